"""Item and chunk keys: 64-bit unsigned integers, distinct per process (a random base and a
counter), and the one way to read keys given by a caller (an array, a list of ints, numpy
integers)."""

from __future__ import annotations

import itertools
import operator
import os
import random
from collections.abc import Iterator
from typing import Any

import numpy as np

from ostinato.errors import InvalidArgumentError

#: Keys are a random base, drawn once per process, plus a counter: distinct within a process
#: (threads included) and, with overwhelming probability, between processes (two processes'
#: runs of keys overlap with probability about (n1 + n2) / 2**64). A random draw per key cost
#: 1,100-1,700 CPU instructions; the counter about a third of that. The base leaves room for
#: 2**48 keys below the all-ones key, which is never used.
_ROOM = 2**48


def _counter() -> Iterator[int]:
    return itertools.count(random.SystemRandom().randrange(2**64 - 1 - _ROOM))


#: The process's key counter (an iterator of keys): ``next(keys.counter)`` is :func:`new_key`
#: without its call, for a writer's hot path. Rebound in a forked child, so read it from the
#: module each time, never keep it.
counter = _counter()


def new_key() -> int:
    """A new 64-bit key in ``[0, 2**64 - 1)``, distinct from every other key this process drew."""
    return next(counter)


def new_keys(n: int) -> list[int]:
    """``n`` new keys (as :func:`new_key`), drawn at once."""
    if n <= 0:
        return []
    return list(itertools.islice(counter, n))


def _after_fork_in_child() -> None:
    """A forked process draws keys of its own. Without this, actors forked from one parent
    drew the same item and chunk keys as each other (the key state was copied)."""
    global counter
    counter = _counter()


os.register_at_fork(after_in_child=_after_fork_in_child)


def key_array(keys: Any) -> np.ndarray:
    """``keys`` as a flat ``uint64`` array (a view of an unsigned array when possible).

    Raises:
      InvalidArgumentError: an element is not an integer (floats are refused rather than
        rounded), or does not fit 64 unsigned bits.
    """
    if isinstance(keys, np.ndarray):
        if keys.dtype.kind not in "ui":
            raise InvalidArgumentError(f"keys must be integers, got an array of {keys.dtype}")
        return keys.astype(np.uint64, copy=False).reshape(-1)
    try:
        return np.array([operator.index(k) for k in keys], dtype=np.uint64)
    except (TypeError, ValueError, OverflowError):
        raise InvalidArgumentError(f"keys ({keys!r}) must be unsigned 64-bit integers") from None


def key_list(keys: Any) -> list[int]:
    """``keys`` as a list of Python ints (validated as :func:`key_array` does)."""
    if isinstance(keys, np.ndarray):
        return key_array(keys).tolist()
    try:
        out = list(map(operator.index, keys))
    except TypeError:
        raise InvalidArgumentError(f"keys ({keys!r}) must be integers") from None
    if out and (min(out) < 0 or max(out) >= 2**64):
        raise InvalidArgumentError(f"keys ({keys!r}) must be unsigned 64-bit integers")
    return out

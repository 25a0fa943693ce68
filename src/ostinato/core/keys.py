"""Item and chunk keys: 64-bit unsigned integers, drawn at random, and the one way to read keys
given by a caller (an array, a list of ints, numpy integers)."""

from __future__ import annotations

import operator
import random
from typing import Any

import numpy as np

from ostinato.errors import InvalidArgumentError

_key_rng = random.Random()


def new_key() -> int:
    """A random 64-bit key in ``[0, 2**64 - 1)``."""
    return _key_rng.getrandbits(64) % (2**64 - 1)


def new_keys(n: int) -> list[int]:
    """``n`` random 64-bit keys in ``[0, 2**64 - 1)``, drawn at once."""
    if n <= 0:
        return []
    raw = np.frombuffer(_key_rng.getrandbits(64 * n).to_bytes(8 * n, "little"), np.uint64)
    keys = raw.tolist()
    if 2**64 - 1 in keys:  # as new_key: the all-ones key is never used
        keys = [k % (2**64 - 1) for k in keys]
    return keys


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

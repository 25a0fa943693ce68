"""Stored items' trajectories kept out of CPython's cyclic garbage collector.

A table keeps each item's packed trajectory (:mod:`ostinato.core.items`): a tuple that refers
to chunks. Tuples of chunks are containers the collector tracks, so every item a table holds
is one more object for each *full* collection to visit, and the interpreter starts a full
collection whenever the objects that survived earlier ones have grown by a quarter: a table
filling up, or a full table replacing its items, pays for a full collection every few thousand
inserts, each longer than the last. Measured on embedded inserts of 16 vectorised environments
(W9), that was about a quarter of the time.

The collector only exists to find reference cycles, and a trajectory is in none: it refers to
chunks, offsets and lengths, and a chunk refers to rows, never to an item. :func:`untrack`
therefore takes each new trajectory tuple of one slice per column (the common form) off the
collector's lists with ``PyObject_GC_UnTrack`` -- what CPython does itself for tuples of
numbers. The table's per-slot lists of trajectories and squeeze flags are taken off too
(:func:`untrack_objects`), so that a full collection does not even walk their million entries.
Reference counting frees all of it exactly as before; for the objects the collector does see
(chunks), what it cannot see only counts as a reference from outside, which keeps them alive as
it should.

A table only untracks items once it holds :data:`~ostinato.core.slots.UNTRACK_FROM` (65,536):
a call costs about 0.1 µs, 2-4% of an embedded insert, and a smaller table's items cost the
collections less than that. Items of several slices per column (a sequence across a chunk
boundary) are left tracked: they hold a tuple per column and per slice, a dozen calls each,
which cost 6% of the inserts of 16 vectorised environments' 10-step items (W9s). On another
interpreter nothing is done.
"""

from __future__ import annotations

import ctypes
import sys
from collections import deque
from collections.abc import Callable, Iterable
from typing import Any

from ostinato.core import items as items_lib

_consume: Callable[[Iterable[Any]], None] = deque(maxlen=0).extend


def _load() -> Callable[[Any], None] | None:
    if sys.implementation.name != "cpython":
        return None
    try:
        fn = ctypes.pythonapi.PyObject_GC_UnTrack
    except AttributeError:  # pragma: no cover - CPython exports it
        return None
    fn.argtypes = [ctypes.py_object]
    fn.restype = None
    return fn  # type: ignore[no-any-return]


_untrack = _load()


def available() -> bool:
    """Whether :func:`untrack` does anything on this interpreter."""
    return _untrack is not None


def untrack(trajs: Iterable[Any], all_flat: bool = False) -> None:
    """Takes the packed trajectories (items' ``traj`` tuples) of one slice per column off the
    cyclic collector's lists; others are left as they are (``all_flat``: the caller knows
    every one is of one slice per column). Only for tuples whose contents form no reference
    cycle."""
    fn = _untrack
    if fn is None:
        return
    _consume(map(fn, trajs if all_flat else filter(items_lib.is_flat, trajs)))


def untrack_objects(*objs: Any) -> None:
    """Takes containers (a table's per-slot lists) off the cyclic collector's lists. Only for
    containers that are in no reference cycle, and stay so."""
    fn = _untrack
    if fn is not None:
        _consume(map(fn, objs))

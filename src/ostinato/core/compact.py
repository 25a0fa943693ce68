"""Items stored as columns instead of one packed trajectory each.

A table keeps each item's trajectory as a packed tuple (:mod:`ostinato.core.items`), which
refers to chunks, so the cyclic garbage collector tracks it: every item a table holds is one
more object for each of its collections to visit. A vector writer's items come with all they
are made of as columns instead (:class:`~ostinato.core.locations.LocatedCall`: per column, each
item's chunk and offset, and its length), so a table stores those items as entries of a few
lists per column, which the collector does not walk (:func:`~ostinato.core.untrack.
untrack_objects`), and no tuple per item at all: neither the writer nor the table builds one.
Such a *compact* item is always located (:class:`~ostinato.core.locations.Locations`: the
lengths are read there), and its packed trajectory is built only when something asks for it
(:meth:`CompactColumns.fill`: a sample, a checkpoint, a lookup).

Where a writer's items cannot be stored so -- the table does not insert them as one batch, or
cannot locate them -- :func:`located_trajectories` packs them from the same columns, and they are
stored as any other item.
"""

from __future__ import annotations

from collections import _count_elements, deque  # type: ignore[attr-defined]
from collections.abc import Callable, Iterable, Sequence
from itertools import chain, repeat
from operator import attrgetter
from typing import Any

from ostinato.core import items as items_lib
from ostinato.core.locations import LocatedCall, Locations
from ostinato.core.untrack import untrack_objects


def call_trajectories(
    chunks: Sequence[Sequence[Any]],
    offsets: Sequence[Sequence[int]],
    lengths: Sequence[int],
    n: int,
) -> list[items_lib.Packed]:
    """The packed (flat) trajectories of ``n`` items given per column: each item's chunk and
    offset, and the column's length."""
    parts: list[Any] = []
    for ch, off, length in zip(chunks, offsets, lengths):
        parts += (ch, off, repeat(length, n))
    return list(zip(*parts))


def located_trajectories(calls: Sequence[LocatedCall]) -> list[items_lib.Packed]:
    """The packed trajectories of the items of ``calls``, in order."""
    out: list[items_lib.Packed] = []
    for call in calls:
        out += call_trajectories(call.chunks, call.offsets, call.lengths, call.firsts.shape[1])
    return out


def with_trajectories(items: Sequence[Any], calls: Sequence[LocatedCall]) -> list[Any]:
    """``items`` (``(key, priority, None, squeeze)``, the items of ``calls`` in order) with
    their packed trajectories."""
    keys, prios, _, sqs = zip(*items)
    return list(zip(keys, prios, located_trajectories(calls), sqs))


class CompactColumns:
    """Per slot and column, the chunk and offset of the compact items (None elsewhere)."""

    def __init__(self, capacity: int) -> None:
        self._capacity = capacity
        self.ncols = 0
        self.chunks: list[list[Any]] = []
        self.offsets: list[list[Any]] = []

    def _setup(self, ncols: int) -> None:
        self.ncols = ncols
        self.chunks = [[None] * self._capacity for _ in range(ncols)]
        self.offsets = [[None] * self._capacity for _ in range(ncols)]
        untrack_objects(*self.chunks, *self.offsets)  # not walked by garbage collections

    def grow(self, capacity: int) -> None:
        """The slots now go up to ``capacity``."""
        extra = [None] * (capacity - self._capacity)
        for col in chain(self.chunks, self.offsets):
            col += extra
        self._capacity = capacity

    def put(self, where: Any, calls: Sequence[LocatedCall]) -> None:
        """Stores the items of ``calls`` in slots ``where`` (a slice, or a list of slots)."""
        if not self.ncols:
            self._setup(len(calls[0].chunks))
        if type(where) is slice:
            # Call by call, a slice of each list (iterating over the items, even in C, costs
            # ten times as much).
            i = where.start
            for call in calls:
                s = slice(i, i + len(call.offsets[0]))
                for col, values in zip(self.chunks, call.chunks):
                    col[s] = values
                for col, values in zip(self.offsets, call.offsets):
                    col[s] = values
                i = s.stop
        else:  # per column, the calls' sequences one after the other
            chunks = map(chain.from_iterable, zip(*map(_CHUNKS_OF, calls)))
            offsets = map(chain.from_iterable, zip(*map(_OFFSETS_OF, calls)))
            _consume(map(_set_all, self.chunks, repeat(where), chunks))
            _consume(map(_set_all, self.offsets, repeat(where), offsets))

    def count(self, counts: dict[Any, int], slots: Sequence[int]) -> None:
        """Adds to ``counts`` the chunk references of the compact items in ``slots``."""
        for col in self.chunks:
            _count_elements(counts, map(col.__getitem__, slots))

    def forget(self, slots: Sequence[int]) -> None:
        """Drops what ``slots`` held (their chunks are no longer kept alive from here)."""
        for col in chain(self.chunks, self.offsets):
            for s in slots:
                col[s] = None

    def clear(self) -> None:
        """Drops every item (the number of columns learned is kept)."""
        for col in chain(self.chunks, self.offsets):
            col[:] = repeat(None, self._capacity)

    def fill(self, out: list[Any], slots: Sequence[int], locations: Locations) -> None:
        """Puts the packed trajectory of each compact item of ``slots`` where ``out`` (the
        items' stored trajectories, in the order of ``slots``) holds None."""
        if out.count(None) == len(out):  # all compact (a vector writer's table)
            pos: Sequence[int] = range(len(out))
            sel: Sequence[int] = slots
        else:
            pos = [i for i, t in enumerate(out) if t is None]
            sel = list(map(slots.__getitem__, pos))
        packed = _pack_rows(self.chunks, self.offsets, locations.lengths(sel), sel)
        if type(pos) is range:
            out[:] = packed
        else:
            _set_all(out, pos, packed)


_CHUNKS_OF = attrgetter("chunks")
_OFFSETS_OF = attrgetter("offsets")
_consume: Callable[[Iterable[Any]], None] = deque(maxlen=0).extend  # runs it in C


def _set_all(target: list[Any], where: Sequence[int], values: Iterable[Any]) -> None:
    _consume(map(target.__setitem__, where, values))


def _pack_rows(
    chunks: list[list[Any]], offsets: list[list[Any]], lengths: list[list[int]], sel: Sequence[int]
) -> list[items_lib.Packed]:
    parts: list[Any] = []
    for ch, off, ln in zip(chunks, offsets, lengths):
        parts += (map(ch.__getitem__, sel), map(off.__getitem__, sel), ln)
    return list(zip(*parts))

"""Counting the chunk references of items: per distinct chunk, for a table's batch insert
or eviction (:class:`~ostinato.core.slots.Slots`), where items share a few chunks."""

from __future__ import annotations

from collections import _count_elements  # type: ignore[attr-defined]
from collections.abc import Sequence
from itertools import chain
from operator import itemgetter

from ostinato.core import items as items_lib
from ostinato.core.chunks import Chunk
from ostinato.core.locations import LocatedCall

_FIRST = itemgetter(0)
_CHUNKS = itemgetter(slice(0, None, 3))  # a flat trajectory's chunks


def count_chunks(
    counts: dict[Chunk, int], trajs: Sequence[items_lib.Packed]
) -> tuple[int, list[int]]:
    """Adds to ``counts`` the references ``trajs`` hold per chunk.

    Returns the length the flat trajectories (one slice per column) have when they all have
    one, else -1; and the indices of the others (nested: a column of several slices, as an
    item straddling a chunk boundary has), in order. A writer's batch is usually all flat
    but for a few such items: the flat ones are still counted column by column."""
    kinds = list(map(type, map(_FIRST, trajs)))
    nested: list[int] = []
    flat: Sequence[items_lib.Packed] = trajs
    if kinds.count(Chunk) != len(kinds):
        i = -1
        try:
            while True:
                i = kinds.index(tuple, i + 1)  # a nested trajectory is a tuple of columns
                nested.append(i)
        except ValueError:
            pass
        if len(nested) + kinds.count(Chunk) != len(kinds):  # columns not tuples: any not flat
            nested = [i for i, k in enumerate(kinds) if k is not Chunk]
        flat = list(trajs)
        for i in reversed(nested):
            del flat[i]
        nested_chunks = (items_lib.chunk_refs(trajs[i]) for i in nested)
        _count_elements(counts, chain.from_iterable(nested_chunks))
    lengths = set(map(len, flat))
    length = lengths.pop() if len(lengths) == 1 else -1
    if length > 0 and len(flat) >= 16:
        # Column by column: no tuple of chunks made per item (half the cost of the chain, but
        # more for a few items).
        for j in range(0, length, 3):
            _count_elements(counts, map(itemgetter(j), flat))
    else:
        _count_elements(counts, chain.from_iterable(map(_CHUNKS, flat)))
    return length, nested


def count_located(counts: dict[Chunk, int], calls: Sequence[LocatedCall], ncols: int) -> None:
    """Adds to ``counts`` the references that the items of writer ``calls`` hold per chunk:
    column by column, consecutive calls with the same chunks (a vector writer's calls between
    two chunk changes) are counted once, times their number, instead of item by item."""
    for j in range(ncols):
        run: Sequence[Chunk] = ()
        times = 0
        for call in calls:
            chunks = call.chunks[j]
            if chunks == run:  # the same chunks in the same lanes (identity first)
                times += 1
                continue
            _add_times(counts, run, times)
            run, times = chunks, 1
        _add_times(counts, run, times)


def _add_times(counts: dict[Chunk, int], chunks: Sequence[Chunk], times: int) -> None:
    """Adds ``times`` references to each of ``chunks`` (the items of ``times`` calls)."""
    if times == 1:
        _count_elements(counts, chunks)
    elif times:
        get = counts.get
        for c in chunks:
            counts[c] = get(c, 0) + times

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
_FLAT = {Chunk}


def count_chunks(counts: dict[Chunk, int], trajs: Sequence[items_lib.Packed]) -> int:
    """Adds to ``counts`` the references ``trajs`` hold per chunk. Returns the length every
    trajectory has when all are flat (one slice per column) and of one length, else -1."""
    flat = set(map(type, map(_FIRST, trajs))) == _FLAT
    length = len(trajs[0]) if flat and len(set(map(len, trajs))) == 1 else -1
    if length > 0 and len(trajs) >= 16:
        # Column by column: no tuple of chunks made per item (half the cost of the chain, but
        # more for a few items).
        for j in range(0, length, 3):
            _count_elements(counts, map(itemgetter(j), trajs))
    else:
        _count_elements(
            counts, chain.from_iterable(map(_CHUNKS if flat else items_lib.chunk_refs, trajs))
        )
    return length


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

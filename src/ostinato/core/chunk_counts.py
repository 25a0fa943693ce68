"""Counting the chunk references of items: per distinct chunk, for a table's batch insert
or eviction (:class:`~ostinato.core.slots.Slots`), where items share a few chunks."""

from __future__ import annotations

from collections import _count_elements  # type: ignore[attr-defined]
from collections.abc import Sequence
from itertools import chain
from operator import itemgetter
from typing import Any

from ostinato.core import items as items_lib
from ostinato.core.chunks import Chunk, two_runs
from ostinato.core.locations import LocatedCall

_FIRST = itemgetter(0)
_CHUNKS_AFTER_FIRST = itemgetter(slice(3, None, 3))  # a flat trajectory's other chunks


def _two_runs(counts: dict[Chunk, int], col: Sequence[Any]) -> bool:
    """Adds to ``counts`` one per element of ``col`` (not empty) and returns True when it is
    one or two runs of chunks (:func:`~ostinato.core.chunks.two_runs`: a few instructions per
    element, where counting each in a dict costs a hash and a lookup); else returns False,
    having added nothing."""
    k = two_runs(col)
    if not k:
        return False
    n = len(col)
    if k < n:
        b = col[-1]
        counts[b] = counts.get(b, 0) + n - k
    a = col[0]
    counts[a] = counts.get(a, 0) + k
    return True


def count_chunks(
    counts: dict[Chunk, int], trajs: Sequence[items_lib.Packed], transpose: bool = False
) -> tuple[int, list[int], list[tuple[Any, ...]] | None]:
    """Adds to ``counts`` the references ``trajs`` hold per chunk.

    Returns the length the flat trajectories (one slice per column) have when they all have
    one, else -1; the indices of the others (nested: a column of several slices, as an item
    straddling a chunk boundary has), in order; and, with a length and ``transpose``, the
    flat trajectories' fields transposed (``fields[3 * j]``: column ``j``'s chunks, then its
    offsets and lengths), else None. A writer's batch is usually all flat but for a few
    such items: the flat ones are still counted column by column."""
    if not trajs:
        return -1, [], None
    firsts = list(map(_FIRST, trajs))  # a flat trajectory's first chunk, else its first column
    nested: list[int] = []
    flat: Sequence[items_lib.Packed] = trajs
    if not _two_runs(counts, firsts):  # more chunks, or nested trajectories among them
        kinds = list(map(type, firsts))
        if kinds.count(Chunk) != len(kinds):
            nested = [i for i, k in enumerate(kinds) if k is not Chunk]
            nested_chunks = (items_lib.chunk_refs(trajs[i]) for i in nested)
            _count_elements(counts, chain.from_iterable(nested_chunks))
            flat = list(trajs)
            for i in reversed(nested):
                del flat[i], firsts[i]
            if not flat:
                return -1, nested, None
        if not _two_runs(counts, firsts):
            _count_elements(counts, firsts)
    lengths = list(map(len, flat))
    length = lengths[0] if lengths.count(lengths[0]) == len(lengths) else -1
    if length < 0:
        _count_elements(counts, chain.from_iterable(map(_CHUNKS_AFTER_FIRST, flat)))
        return length, nested, None
    if transpose:
        # One C-level pass; for a batch's few hundred items (in cache: for many thousands,
        # as a table's reset counts, it is slower than a list per column).
        transposed = list(zip(*flat))
        fields: list[tuple[Any, ...]] | None = transposed
        columns: Any = transposed[3:length:3]
    else:
        fields = None
        columns = (list(map(itemgetter(j), flat)) for j in range(3, length, 3))
    for col in columns:
        if not _two_runs(counts, col):
            _count_elements(counts, col)
    return length, nested, fields


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

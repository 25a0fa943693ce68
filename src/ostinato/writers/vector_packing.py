"""A vector writer's items packed: per item, per column, a (chunk, offset, length) slice.

Items of one ``create_items`` call come one per selected lane (environment), and their
columns reach ``back`` steps back from each lane's newest step. Columns with as many rows per
chunk fill and close their lanes' chunks at the same steps (see
:class:`~ostinato.writers.lanes.Lanes`), so their offsets are worked out once per group;
lanes whose items reach back into closed chunks get their slices one by one.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import repeat
from operator import sub
from typing import Any

import numpy as np

from ostinato.core import items as items_lib
from ostinato.writers.lanes import VectorColumn
from ostinato.writers.packing import tuple_getter


def pack_items(
    cols: Sequence[VectorColumn],
    lanes: np.ndarray | None,
    sel: np.ndarray,
    count: int,
    want_chunks: bool,
) -> tuple[list[items_lib.Packed], list[Sequence[Any]] | None]:
    """The packed trajectories of the items of ``lanes`` (None: every lane; ``sel`` the
    selected lanes, ``count`` of them), and with ``want_chunks``, per column, each item's
    chunk -- when every item lies in its lanes' current chunks (one slice of it per column),
    else None."""
    parts: list[Any] = []
    flat = True
    pick: Any = None  # the selected lanes' entries of a per-lane list (made when needed)
    # Every lane's offset per (rows per chunk, steps back).
    shared: dict[tuple[int, int], list[int]] = {}
    # The selected lanes' offsets, and whether some reach back into closed chunks.
    chosen: dict[tuple[int, int], tuple[Sequence[int], bool]] = {}
    chunks: list[Sequence[Any]] | None = [] if want_chunks else None
    off_list: Sequence[int]
    for c in cols:
        lanes_c = c.lanes
        back = c.back
        group = (lanes_c.rows, back)
        every = shared.get(group)
        if every is None:  # one numpy call (subtracting a Python int would be a second)
            fills = (lanes_c.pos - lanes_c.start).tolist()
            every = shared[group] = list(map(sub, fills, repeat(back)))
        current = back <= lanes_c.minfill  # then in every lane's current chunk
        ch = lanes_c.chunk
        if lanes is None and current:
            off_list, behind = every, False
        else:
            if lanes is not None and pick is None:
                pick = tuple_getter(sel.tolist())
            got = chosen.get(group)
            if got is None:  # list work, no numpy
                offs = every if lanes is None else pick(every)
                got = chosen[group] = (offs, not current and min(offs) < 0)
            off_list, behind = got
        if not behind:  # in each lane's current chunk
            col_chunks = ch if lanes is None else pick(ch)
            if chunks is not None:
                if lanes is None:
                    col_chunks = tuple(ch)  # a snapshot: the lanes' list changes
                chunks.append(col_chunks)
            parts += (col_chunks, off_list, repeat(c.length, count))
        else:  # some lanes reach back into closed chunks: their slices, one by one
            chunks = None
            sl = _slices(c, sel.tolist(), off_list)
            if all(len(x) == 1 for x in sl):
                parts.append([x[0][0] for x in sl])
                parts.append([x[0][1] for x in sl])
                parts.append([x[0][2] for x in sl])
            else:
                flat = False
                parts.append(sl)
    if flat:
        return list(zip(*parts)), chunks
    parts = [list(x) if isinstance(x, repeat) else x for x in parts]
    return list(map(_repack, repeat(parts, count), range(count))), chunks


# Helpers, not comprehensions in pack_items: a comprehension that reads a function's locals
# makes them cells, created on every call of the function.
def _slices(c: VectorColumn, lanes: list[int], offsets: Sequence[int]) -> list[Any]:
    """Per lane, the slices of column ``c``'s item: one of the lane's current chunk where the
    offset is not negative, else walked back through its closed chunks."""
    lanes_c = c.lanes
    ch = lanes_c.chunk
    return [
        [(ch[i], o, c.length)] if o >= 0 else lanes_c.slices(i, c.back, c.length)
        for i, o in zip(lanes, offsets)
    ]


def _repack(parts: list[Any], j: int) -> tuple[Any, ...]:
    """Item ``j``'s packed trajectory in per-column form (some column has several slices)."""
    out: list[tuple[Any, ...]] = []
    i = 0
    while i < len(parts):
        p = parts[i]
        if p and isinstance(p[0], list):  # a column's slices per item
            out.append(tuple(p[j]))
            i += 1
        else:
            out.append(((parts[i][j], parts[i + 1][j], parts[i + 2][j]),))
            i += 3
    return tuple(out)

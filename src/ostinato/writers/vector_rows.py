"""Where a vector writer's items have their rows, made with one numpy call per
``create_items``.

A table records, per item, where each column's rows lie in the block its chunk was carved from
(:mod:`ostinato.core.locations`). Worked out item by item from the packed trajectories, that
costs the table a loop in Python, about a sixth of an embedded vector step. A vector writer
already holds what those locations are made of as arrays -- each lane's next row in its
column's block (the writer's position grid), the block's code, how far back and how long each
column of the item reaches -- so it works them out for a whole call at once
(:class:`~ostinato.core.locations.LocatedCall`) and hands them to its in-process stream with the
items (:meth:`ostinato.transport.streams.Delivery.insert`); the table writes a batch's
locations with a few numpy calls (:meth:`~ostinato.core.slots.Slots.add_many`). With them go
the items' chunks, per column, so that the table counts its chunk references once per run of
calls with the same chunks rather than once per item.

They are made only where that is exact: every column of the call in its lanes' current chunks
(none reaching back into a closed chunk), all lanes of a column in one block.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ostinato.core.locations import LocatedCall
from ostinato.writers.lanes import VectorColumn

#: Trajectory layouts whose set-up a writer keeps before it starts afresh.
MAX_LAYOUTS = 256


class Locator:
    """Works out where one writer's items have their rows.

    Args:
      grid: the writer's positions, one row per column (``grid[j][lane]``: the row of the
        block that lane's next value of column ``j`` goes to).
    """

    def __init__(self, grid: np.ndarray):
        self._grid = grid
        #: layout -> (its columns' rows of the grid, their steps back (per column and lane),
        #: lengths)
        self._layouts: dict[tuple[Any, ...], tuple[Any, ...]] = {}

    def locate(
        self,
        cols: Sequence[VectorColumn],
        layout: tuple[Any, ...],
        lanes: np.ndarray | None,
        chunks: list[Sequence[Any]],
    ) -> LocatedCall | None:
        """Where the items of a call (one per lane of ``lanes``, or of every lane) have their
        rows, with their chunks (per column, each item's); None where some column's lanes are
        not all in one block (the table then works them out itself).

        The caller has checked that every column of every item lies in its lane's current
        chunk, so an item's first row of a column is its lane's next row minus the steps
        back."""
        codes = []
        for c in cols:
            lanes_c = c.lanes
            # All lanes write into one block (then the newest, whose code this is), or not.
            if lanes_c.common is None or lanes_c.block_code is None:
                return None
            codes.append(lanes_c.block_code)
        t = self._layouts.get(layout)
        if t is None:
            t = self._learn(cols, layout)
        which, backs, lengths = t
        firsts = self._grid[which] - backs  # same shapes: no broadcasting (twice the cost)
        if lanes is not None:
            firsts = firsts.take(lanes, 1)
        return LocatedCall(firsts, tuple(codes), lengths, tuple(chunks))

    def _learn(self, cols: Sequence[VectorColumn], layout: tuple[Any, ...]) -> tuple[Any, ...]:
        idx = [c.lanes.index for c in cols]
        k = len(idx)
        which: Any = idx  # the columns in another order, or some twice: a copy
        if idx == list(range(idx[0], idx[0] + k)):
            which = slice(idx[0], idx[0] + k)  # a view
        backs = np.repeat(np.array([[c.back] for c in cols], np.int64), self._grid.shape[1], 1)
        if len(self._layouts) >= MAX_LAYOUTS:
            self._layouts.clear()
        out = self._layouts[layout] = (which, backs, tuple(c.length for c in cols))
        return out

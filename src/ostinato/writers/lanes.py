"""The lanes of a :class:`~ostinato.writers.vector_writer.VectorTrajectoryWriter`: one per
environment, per column, each with its own chunks carved from blocks the lanes share; and the
history views (:class:`VectorColumnHistory`, :class:`VectorColumn`) that items are made from.
"""

from __future__ import annotations

import math
from collections import deque
from typing import TYPE_CHECKING, Any

import numpy as np

from ostinato.core import pages
from ostinato.core.chunks import Chunk
from ostinato.core.keys import new_key
from ostinato.core.locations import register_block
from ostinato.core.specs import ALLOWED_KINDS, dtype_name, shape_str
from ostinato.writers.chunker import (
    BLOCK_BYTES,
    BLOCK_MAX_ROW_BYTES,
    MAX_AUTO_ROWS,
    TARGET_CHUNK_BYTES,
)

#: A lane's full chunk passes its newest ``keep - 1`` rows on to the next one when they are at
#: most this share of a chunk's rows (1/8: at most 12.5% more rows stored).
CARRY_SHARE = 8

if TYPE_CHECKING:
    from ostinato.writers.vector_writer import VectorTrajectoryWriter


class Lanes:
    """One column of the writer: per lane, the chunk being filled and the closed chunks that
    still hold kept steps of the lane's episode.

    A lane's chunk occupies rows ``[start, start + cap)`` of its array (a block shared by the
    lanes, for small rows); ``pos`` is the row the lane's next value goes to, so the chunk
    holds ``pos - start`` rows. Two scalars keep the per-step checks off numpy: ``room``, a
    lower bound on the rows left in every lane's chunk (0: look), and ``minfill``, a lower
    bound on the rows every lane's chunk holds.

    The writer appends to every column at once and ends episodes in every column at once, and
    a chunk's capacity depends only on :attr:`rows`; so columns with as many rows per chunk
    open and close their lanes' chunks at the same steps, and their fills (``pos - start``)
    agree in every lane. ``create_items`` relies on this to compute offsets once per group.

    A chunk that fills up mid-episode passes its newest :attr:`carry` rows (``keep - 1``, when
    that is at most 1/:data:`CARRY_SHARE` of :attr:`rows`) on to the lane's next chunk, which
    starts with a copy of them. An item of up to ``keep`` steps then always lies in one chunk,
    rows next to each other, however the lane's chunks fall: one slice per column, and a
    location the table can gather by. The closed chunk is kept only for the rows it did not
    pass on (its count in :attr:`closed` excludes them), so walking back through a lane's
    chunks (:meth:`slices`) meets every step once. Without it, every lane's chunk fills at
    the same steps (their regions are carved together), and for ``keep - 1`` appends after
    that every item of every lane reached back into the closed chunk.
    """

    def __init__(self, path: tuple[Any, ...], index: int, num_envs: int, keep: int):
        self.path = path
        self.index = index
        self.n = num_envs
        self.keep = keep
        self.dtype: np.dtype | None = None
        self.shape: tuple[int, ...] = ()
        self.spec: tuple[Any, ...] | None = None
        self.rows = 0  # rows per chunk
        #: Rows a full chunk's successor starts with, copied from its end (see :meth:`_open`).
        self.carry = 0
        self.row_bytes = 1
        self.blocked = False  # lanes' chunks are carved from shared blocks
        self.block: np.ndarray | None = None  # the block new chunks are carved from
        self.block_ro: np.ndarray | None = None
        self.block_next = 0
        self.block_code: int | None = None
        self.arr: list[np.ndarray | None] = [None] * num_envs
        self.ro: list[np.ndarray | None] = [None] * num_envs
        self.code: list[int | None] = [None] * num_envs
        self.start = np.zeros(num_envs, np.int64)
        #: Per lane, the row its next value goes to; the writer replaces it by a row of the
        #: positions array its columns share (see :meth:`store`).
        self.pos = np.zeros(num_envs, np.int64)
        self.cap = np.zeros(num_envs, np.int64)
        self.chunk: list[Chunk | None] = [None] * num_envs
        self.live = np.zeros(num_envs, bool)  # the lane has a chunk being filled
        self.room = 0
        self.minfill = 0
        #: Per lane, the closed chunks of the episode that hold any of its kept steps, oldest
        #: first, with their row counts.
        self.closed: list[deque[tuple[Chunk, int]]] = [deque() for _ in range(num_envs)]
        #: The array every lane writes into (one store for all), or None.
        self.common: np.ndarray | None = None
        #: For rows of several values: each row as one opaque value (``np.void``), and
        #: :attr:`common` seen so, which :meth:`store` writes into with a 1-D index (numpy's
        #: row-wise fancy assignment costs twice as much).
        self.row_dtype: np.dtype | None = None
        self.common_rows: np.ndarray | None = None

    # -- set-up --------------------------------------------------------------------------------
    def first(self, arr: np.ndarray, max_chunk_length: int | None) -> None:
        if arr.dtype.kind not in ALLOWED_KINDS or arr.dtype.kind == "O" or arr.dtype.fields:
            raise ValueError(
                f"column {column_name(self.path)}: dtype {arr.dtype} is not supported by "
                "VectorTrajectoryWriter (numeric and bool columns only; write strings with a "
                "TrajectoryWriter)"
            )
        self.dtype = arr.dtype
        self.shape = tuple(arr.shape[1:])
        self.spec = (self.dtype, self.shape)
        row_bytes = max(1, arr.dtype.itemsize * math.prod(self.shape))
        if max_chunk_length is not None:
            self.rows = max_chunk_length
        else:
            self.rows = int(max(1, min(MAX_AUTO_ROWS, TARGET_CHUNK_BYTES // row_bytes)))
        self.blocked = row_bytes <= BLOCK_MAX_ROW_BYTES
        self.row_bytes = row_bytes
        carry = self.keep - 1  # depends on rows alone, as the class requires
        self.carry = carry if carry * CARRY_SHARE <= self.rows else 0
        if self.blocked and self.shape:
            self.row_dtype = np.dtype((np.void, row_bytes))

    def check(self, arr: np.ndarray) -> None:
        if arr.dtype != self.dtype:
            raise ValueError(
                f"Tensor of wrong dtype provided for column {self.path}. Got "
                f"{dtype_name(arr.dtype)} but expected {dtype_name(self.dtype)}."  # type: ignore[arg-type]
            )
        raise ValueError(
            f"Tensor of incompatible shape provided for column {self.path}. Got "
            f"{shape_str(arr.shape[1:])} per environment which is incompatible with "
            f"{shape_str(self.shape)}."
        )

    # -- chunks --------------------------------------------------------------------------------
    def _region(self, lane: int) -> None:
        """Gives ``lane`` a fresh region of ``rows`` rows."""
        rows = self.rows
        if self.blocked:
            if self.block is None or self.block_next + rows > len(self.block):
                nrows = max(rows * self.n, BLOCK_BYTES // self.row_bytes)
                self.block = np.empty((nrows, *self.shape), self.dtype)
                self.block_ro = self.block.view()
                self.block_ro.flags.writeable = False
                self.block_next = 0
                # The chunks' views keep the block alive: it is registered weakly.
                self.block_code = register_block(self.block)
            self.arr[lane] = self.block
            self.ro[lane] = self.block_ro
            self.code[lane] = self.block_code
            self.start[lane] = self.block_next
            self.block_next += rows
        else:
            a = pages.empty((rows, *self.shape), self.dtype)  # large rows: faulted in at once
            ro = a.view()
            ro.flags.writeable = False
            self.arr[lane] = a
            self.ro[lane] = ro
            self.code[lane] = None
            self.start[lane] = 0
        self.pos[lane] = self.start[lane]
        self.cap[lane] = rows

    def make_room(self, lanes: np.ndarray | None, episodes: list[int]) -> tuple[list[int], int]:
        """Starts a chunk for each of ``lanes`` (default all) whose chunk is full or closed,
        then recomputes :attr:`room`. Returns the lanes given a chunk and the room: what
        :meth:`make_room_as` takes to do the same in a column with as many rows per chunk
        (whose lanes' fills and capacities are those of this column, see the class)."""
        sel = slice(None) if lanes is None else lanes
        need = self.pos[sel] >= (self.start[sel] + self.cap[sel])
        need |= ~self.live[sel]
        idx: list[int] = []
        if np.count_nonzero(need):
            idx = (need.nonzero()[0] if lanes is None else lanes[need]).tolist()
            self._open(idx, episodes)
        # Every lane is live after a call for all of them; after one for some, look again
        # at the next append.
        self.room = int((self.start + self.cap - self.pos).min()) if lanes is None else 0
        return idx, self.room

    def make_room_as(self, done: tuple[list[int], int], episodes: list[int]) -> None:
        """:meth:`make_room`, given what it returned for another column of as many rows per
        chunk in the same append (no numpy call)."""
        idx, room = done
        if idx:
            self._open(idx, episodes)
        self.room = room

    def _open(self, lanes: list[int], episodes: list[int]) -> None:
        for lane in lanes:
            old = self.chunk[lane]
            f = int(self.pos[lane] - self.start[lane])
            self.start[lane] += f
            self.cap[lane] -= f
            k = 0  # rows carried over (see carry)
            if old is not None:  # full: kept while it holds kept steps it does not pass on
                if self.cap[lane] <= 0:  # always so: a chunk ends where its region does
                    k = min(self.carry, f)
                if f > k:
                    self._keep_closed(lane, old, f - k)
                self.chunk[lane] = None
            if self.cap[lane] <= 0:
                self._region(lane)
                if k:
                    s = int(self.start[lane])
                    self.arr[lane][s : s + k] = old.data[f - k : f]  # type: ignore[index,union-attr]
                    self.pos[lane] = s + k
            s = int(self.start[lane])
            c = int(self.cap[lane])
            view = self.ro[lane][s : s + c]  # type: ignore[index]
            code = self.code[lane]
            self.chunk[lane] = Chunk(
                new_key(),
                view,
                episodes[lane],
                nbytes=view.nbytes,
                spec=self.spec,
                origin=None if code is None else (code, s),
            )
            self.live[lane] = True
        self.minfill = 0
        arrs = self.arr
        first = arrs[0]
        self.set_common(first if self.blocked and all(a is first for a in arrs) else None)

    def set_common(self, common: np.ndarray | None) -> None:
        """Sets :attr:`common` (None: the lanes do not share one array, or it is not known),
        and :attr:`common_rows`, derived from it."""
        self.common = common
        self.common_rows = None
        if common is not None and self.row_dtype is not None:
            self.common_rows = common.reshape(len(common), -1).view(self.row_dtype)[:, 0]

    def _keep_closed(self, lane: int, chunk: Chunk, rows: int) -> None:
        q = self.closed[lane]
        q.append((chunk, rows))
        # Drop chunks no kept step is in: the newest ``keep`` steps are the current chunk's
        # rows and those of the newest closed chunks.
        total = 0
        for i in range(len(q) - 1, -1, -1):
            if total >= self.keep:
                for _ in range(i + 1):
                    q.popleft()
                break
            total += q[i][1]

    def close_lane(self, lane: int, clear: bool) -> None:
        """Ends the lane's chunk (its unused rows stay for the lane's next chunk); with
        ``clear`` the closed chunks are forgotten too."""
        chunk = self.chunk[lane]
        if chunk is not None:
            s = int(self.start[lane])
            f = int(self.pos[lane]) - s
            if f < int(self.cap[lane]):
                chunk.data = self.ro[lane][s : s + f]  # type: ignore[index]
                chunk.nbytes = chunk.data.nbytes
            if not clear:
                self._keep_closed(lane, chunk, f)
            self.chunk[lane] = None
            self.live[lane] = False
            self.start[lane] = s + f
            self.cap[lane] -= f
        if clear:
            self.closed[lane].clear()
        self.room = 0
        self.minfill = 0

    def store(self, values: np.ndarray, lanes: np.ndarray | None) -> None:
        """Writes row ``lane`` of ``values`` for each lane (all lanes when ``lanes`` is None);
        :meth:`make_room` has run. The caller then advances :attr:`pos` of those lanes by one
        (the writer's columns share one array of positions: one numpy call for all of them)."""
        common = self.common
        pos = self.pos
        if lanes is None:
            rows = self.common_rows
            if rows is not None:  # the same bytes as common[pos] = values
                rows[pos] = values.reshape(self.n, -1).view(self.row_dtype)[:, 0]  # type: ignore[arg-type]
            elif common is not None:
                common[pos] = values
            else:
                for i, a in enumerate(self.arr):
                    a[pos[i]] = values[i]  # type: ignore[index]
            self.minfill += 1
        else:
            if common is not None:
                common[pos[lanes]] = values[lanes]
            else:
                for i in lanes.tolist():
                    self.arr[i][pos[i]] = values[i]  # type: ignore[index]
        self.room -= 1

    def fill(self, lane: int) -> int:
        return int(self.pos[lane] - self.start[lane])

    def slices(self, lane: int, back: int, length: int) -> list[tuple[Chunk, int, int]]:
        """The slices of the lane's steps ``[E - back, E - back + length)`` (``E`` the lane's
        step count), walking back through closed chunks."""
        f = self.fill(lane)
        chunk = self.chunk[lane]
        seq: list[tuple[Chunk, int]] = []  # newest first: (chunk, rows)
        if chunk is not None and f:
            seq.append((chunk, f))
        seq.extend(reversed(self.closed[lane]))
        out: list[tuple[Chunk, int, int]] = []
        # Steps counted back from the newest (1 = newest): the item wants (back - length, back].
        want_lo, want_hi = back - length, back
        pos = 0
        for c, rows in seq:
            lo, hi = pos, pos + rows  # this chunk holds back distances (lo, hi]
            a = max(lo, want_lo)
            b = min(hi, want_hi)
            if a < b:
                out.append((c, rows - (b - lo), b - a))
            pos = hi
            if pos >= want_hi:
                break
        out.reverse()
        return out

    def chunk_keys(self) -> set[int]:
        keys = {c.key for c in self.chunk if c is not None}
        for q in self.closed:
            keys.update(c.key for c, _ in q)
        return keys


def column_name(path: tuple[Any, ...]) -> str:
    return "/".join(map(str, path)) or "?"


class VectorColumn:
    """Steps of one column for every lane, counted back from each lane's newest step; what
    ``writer.history[...][-k:]`` gives. ``squeeze``: a single step without a time
    dimension (``history[...][-1]``)."""

    __slots__ = ("lanes", "back", "length", "squeeze")

    def __init__(self, lanes: Lanes, back: int, length: int, squeeze: bool):
        self.lanes = lanes
        self.back = back
        self.length = length
        self.squeeze = squeeze

    @property
    def shape(self) -> tuple[int, ...]:
        inner = self.lanes.shape
        return inner if self.squeeze else (self.length, *inner)

    @property
    def dtype(self) -> np.dtype | None:
        return self.lanes.dtype

    def __repr__(self) -> str:
        return (
            f"VectorColumn(path={self.lanes.path}, steps=[-{self.back}, "
            f"-{self.back - self.length}), squeeze={self.squeeze})"
        )


class VectorColumnHistory:
    """One column's history for every lane (``writer.history["obs"]``).

    Index it with negative offsets, which count back from each lane's newest step:
    ``[-1]`` (the newest step, squeezed), ``[-k:]`` (the newest ``k`` steps), ``[-k:-j]``.
    Positive indices are refused: lanes are at different points of their episodes.
    """

    __slots__ = ("_lanes", "_writer")

    def __init__(self, lanes: Lanes, writer: VectorTrajectoryWriter):
        self._lanes = lanes
        self._writer = writer

    def __getitem__(self, index: Any) -> VectorColumn:
        keep = self._lanes.keep
        if isinstance(index, (int, np.integer)) and not isinstance(index, bool):
            i = int(index)
            if not -keep <= i < 0:
                raise IndexError(
                    f"history index {i} of column {column_name(self._lanes.path)}: a "
                    f"VectorTrajectoryWriter takes negative indices from -1 to -{keep} "
                    "(num_keep_alive_refs), counted back from each environment's newest step"
                )
            return VectorColumn(self._lanes, -i, 1, True)
        if isinstance(index, slice):
            start, stop, step = index.start, index.stop, index.step
            if (
                step not in (None, 1)
                or not isinstance(start, (int, np.integer))
                or not -keep <= int(start) < 0
                or not (stop is None or (isinstance(stop, (int, np.integer)) and start < stop <= 0))
            ):
                raise IndexError(
                    f"history slice {index} of column {column_name(self._lanes.path)}: a "
                    "VectorTrajectoryWriter takes [-k:] or [-k:-j] with 1 <= j < k <= "
                    f"{keep} (num_keep_alive_refs), counted back from each environment's "
                    "newest step"
                )
            back = -int(start)
            end = 0 if stop is None else -int(stop)
            return VectorColumn(self._lanes, back, back - end, False)
        raise TypeError(
            f"history indices must be negative integers or slices, not {type(index).__name__}"
        )

    def __len__(self) -> int:
        raise TypeError(
            "a VectorTrajectoryWriter's history has one length per environment: "
            "see writer.episode_steps"
        )

    def numpy(self, lane: int) -> np.ndarray:
        """The kept steps of ``lane``'s episode, stacked (a copy)."""
        n = int(min(self._writer.episode_steps[lane], self._lanes.keep))
        if n == 0:
            return np.empty((0, *self._lanes.shape), self._lanes.dtype)
        parts = [
            c.data[o : o + ln]  # type: ignore[index]
            for c, o, ln in self._lanes.slices(lane, n, n)
        ]
        return np.concatenate(parts)

    def __repr__(self) -> str:
        return f"VectorColumnHistory(path={self._lanes.path}, num_envs={self._lanes.n})"

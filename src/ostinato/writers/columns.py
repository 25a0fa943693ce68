"""Column histories (what ``TrajectoryWriter.history`` hands out) and their trajectory columns
(:class:`TrajectoryColumn`, defined in :mod:`ostinato.writers.trajectory_column`)."""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from ostinato.writers.chunker import CellRef
from ostinato.writers.trajectory_column import RunColumn, TrajectoryColumn


class ColumnHistory:
    """The refs of one column over the current episode (``writer.history[path]``).

    ``len()`` counts every step of the episode; only the newest ``buffer_size`` refs are kept,
    older steps read as ``None``. Indexing follows Python's list semantics exactly (unlike
    Reverb, ``h[len(h)]`` raises ``IndexError`` and ``h[i:len(h)]`` is not empty).
    """

    __slots__ = ("_path", "_buf", "_offset", "_size", "_holes", "_unshare")

    def __init__(self, path: tuple[Any, ...], buffer_size: int, history_padding: int = 0):
        self._path = path
        self._size = buffer_size
        self._buf: deque[CellRef | None] = deque(maxlen=buffer_size)
        self._offset = history_padding  # steps before the buffer (dropped or never written)
        for _ in range(min(history_padding, buffer_size)):
            self._buf.append(None)
        self._offset = history_padding - len(self._buf)
        #: False while no step of the buffer is None (since the last reset): slices need not
        #: look for one.
        self._holes = bool(self._buf)
        #: Set while the column's chunker uses this buffer as its keep-alive window
        #: (``ColumnChunker`` "shared window"): called before the buffer stops being exactly
        #: that window (its first None, a new size), so that the chunker keeps its own again.
        self._unshare: Callable[[], None] | None = None

    def append(self, ref: CellRef | None) -> None:
        # ColumnChunker.append does this inline for the refs it makes (never None): keep both.
        if ref is None:
            if self._unshare is not None:
                self._unshare()
            self._holes = True
        if len(self._buf) == self._size:
            self._offset += 1
        self._buf.append(ref)

    def can_set_last(self) -> bool:
        return bool(self._buf) and self._buf[-1] is None

    def drop_reserved(self) -> None:
        """Removes the newest step, reserved (``None``) by a partial step, so that the value
        written into it can be appended (the chunker appends it) in its place."""
        if not self._buf or self._buf[-1] is not None:
            raise RuntimeError("drop_reserved called on a step that is not reserved")
        self._buf.pop()

    def reset(self) -> None:
        self._buf.clear()
        self._offset = 0
        self._holes = False

    def resize(self, buffer_size: int) -> None:
        if buffer_size == self._size:
            return
        if self._unshare is not None:
            self._unshare()
        old = list(self._buf)
        self._size = buffer_size
        self._buf = deque(old[-buffer_size:], maxlen=buffer_size)
        self._offset += max(0, len(old) - buffer_size)

    def __len__(self) -> int:
        return self._offset + len(self._buf)

    def _ref(self, i: int) -> CellRef | None:
        j = i - self._offset
        return self._buf[j] if j >= 0 else None

    def _resolve(self, i: Any) -> int:
        n = self._offset + len(self._buf)
        i = int(i)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError("list index out of range")
        return i

    def __getitem__(self, index: Any) -> TrajectoryColumn:
        # Fast paths for the common ``h[-k]`` and ``h[-k:]`` (the newest k steps): the column
        # is built here, without a call (user code reads a column per item).
        t = type(index)
        if t is int:
            buf = self._buf
            if index < 0 and -index <= len(buf):
                ref = buf[index]
                if ref is not None:
                    return ref  # a step's ref is its squeezed column
        elif t is slice and index.stop is None and index.step is None:
            start = index.start
            buf = self._buf
            n = len(buf)
            if type(start) is not int:  # None, numpy integers, bad types: the general path
                refs = None
            elif start == -n:  # the whole buffer (or nothing when it is empty: -0 == 0)
                refs = tuple(buf)
            elif -n < start < 0:
                refs = tuple(itertools.islice(buf, n + start, None))
            else:
                refs = None
            if refs and not (self._holes and None in refs):
                col = RunColumn()
                col._refs = refs
                col._path = self._path
                return col
        if isinstance(index, (int, np.integer)) and not isinstance(index, bool):
            n = self._offset + len(self._buf)
            i = int(index)
            if i < 0:
                i += n
            if not 0 <= i < n:
                raise IndexError("list index out of range")
            j = i - self._offset
            ref = self._buf[j] if j >= 0 else None
            if ref is None:
                raise ValueError(
                    "TrajectoryColumns cannot contain any None data references: TrajectoryColumn "
                    f"at path {self._path + (index,)} got [None] (the step is older than the "
                    "writer keeps, or the column was not written at that step)."
                )
            return ref  # type: ignore[return-value]  # its squeezed column
        if isinstance(index, slice):
            n = self._offset + len(self._buf)
            start, stop, step = index.indices(n)
            if step == 1 and start >= self._offset:
                refs = list(
                    itertools.islice(
                        self._buf, start - self._offset, max(start, stop) - self._offset
                    )
                )
            else:
                # map, not a comprehension: one would make ``self`` a cell on every call.
                refs = list(map(self._ref, range(start, stop, step)))
            col = TrajectoryColumn(refs, path=self._path)
            col._run = step == 1
            return col
        if isinstance(index, list):
            return TrajectoryColumn(
                list(map(self._ref, map(self._resolve, index))), path=self._path
            )
        raise TypeError(
            f"_ColumnHistory indices must be integers or slices, not {type(index).__name__}"
        )

    def __iter__(self) -> Iterator[CellRef | None]:
        return itertools.chain(itertools.repeat(None, self._offset), self._buf)

    def numpy(self) -> np.ndarray:
        """All steps of the episode still held, stacked (raises if any step is missing)."""
        return self[:].numpy()

    def __repr__(self) -> str:
        return f"ColumnHistory(path={self._path}, len={len(self)})"


# Reverb's private name, which some user code and tests reach for.
_ColumnHistory = ColumnHistory

"""Column histories (what ``TrajectoryWriter.history`` hands out) and their trajectory columns
(:class:`TrajectoryColumn`, defined in :mod:`ostinato.writers.trajectory_column`)."""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

from ostinato.writers.chunker import CellRef
from ostinato.writers.trajectory_column import RunColumn, TrajectoryColumn

if TYPE_CHECKING:
    from ostinato.writers.chunker import ColumnChunker


#: ``ColumnHistory._lo`` while the newest step is pending: above every value index, so that
#: ``__getitem__``'s fast paths (``v >= self._lo``) step aside.
_PENDING = 1 << 62


class ColumnHistory:
    """The steps of one column over the current episode (``writer.history[path]``).

    ``len()`` counts every step of the episode; only the newest ``buffer_size`` steps are kept,
    older steps read as ``None``. Indexing follows Python's list semantics exactly (unlike
    Reverb, ``h[len(h)]`` raises ``IndexError`` and ``h[i:len(h)]`` is not empty).

    A history holds no ref per step. While every step of the episode has a value (the usual
    case), step ``i`` is simply its chunker's value ``base + i``: appending a value changes
    nothing here, and reading a step makes its :class:`CellRef` (or, for ``h[-k:]``, a
    :class:`RunColumn` of ``k`` value indices) from the chunker's counters. Once a step has no
    value (``None``: a partial step, a column missing from a step, a column that appeared
    after the episode's first step), the history keeps the value index of each step it holds,
    or None, in a buffer, until the buffers are cleared (``end_episode``).
    """

    __slots__ = (
        "_path",
        "_size",
        "_chunker",
        "_base",
        "_lo",
        "_pending_lo",
        "_buf",
        "_offset",
        "_holes",
    )

    def __init__(self, path: tuple[Any, ...], buffer_size: int, history_padding: int = 0):
        self._path = path
        self._size = buffer_size
        #: The column's chunker (set by it: :meth:`_attach`).
        self._chunker: ColumnChunker = None  # type: ignore[assignment]
        #: Without a buffer: the value index of the episode's step 0, and the lowest value
        #: index the history still holds (raised when it shrinks); steps below it, and below
        #: the newest ``buffer_size``, read as None.
        self._base = 0
        self._lo = 0
        #: Without a buffer, while the newest step has no value yet (a partial step's
        #: reservation, see :meth:`append`): the lowest value index held, and ``_lo`` is
        #: :data:`_PENDING`, out of every fast path's reach. None otherwise.
        self._pending_lo: int | None = None
        #: With a buffer (None without): the newest steps' value indices or None, after
        #: ``_offset`` steps no longer held.
        self._buf: deque[int | None] | None = None
        self._offset = 0
        #: False while no step of the buffer is None (since the last reset): slices need not
        #: look for one.
        self._holes = False
        if history_padding:
            buf: deque[int | None] = deque(maxlen=buffer_size)
            for _ in range(min(history_padding, buffer_size)):
                buf.append(None)
            self._buf = buf
            self._offset = history_padding - len(buf)
            self._holes = True

    def _attach(self, chunker: ColumnChunker) -> None:
        self._chunker = chunker
        self._base = self._lo = chunker._count
        if self._buf is not None:
            chunker._hole_history = self

    def _to_buffer(self, count: int) -> deque[int | None]:
        """Starts keeping the steps' value indices in a buffer (a step without a value is
        coming, or the pending one stays without); ``count``: the chunker's values so far."""
        buf = self._buf
        if buf is None:
            lo = self._lo if self._pending_lo is None else self._pending_lo
            buf = deque(range(max(lo, count - self._size), count), maxlen=self._size)
            self._offset = count - self._base - len(buf)
            self._buf = buf
            self._lo = lo
            self._chunker._hole_history = self
            if self._pending_lo is not None:  # the newest step, without a value
                self._pending_lo = None
                self._holes = True
                if len(buf) == self._size:
                    self._offset += 1
                buf.append(None)
        return buf

    #: What :meth:`append` does to reserve the newest step of a history ``{h}`` (of chunker
    #: ``{c}``) in its usual case (no buffer, nothing reserved yet: :data:`RESERVABLE`), as
    #: source lines for a generated step writer (:mod:`ostinato.writers.step_writers`, which
    #: binds ``PENDING``): keep the two in step.
    RESERVABLE = "{h}._buf is None and {h}._pending_lo is None"
    RESERVE = "{h}._pending_lo = {h}._lo\n{h}._lo = PENDING\n{c}._hole_history = {h}"

    def append(self, ref: None) -> None:
        """Appends a step without a value (the chunker counts the steps that have one)."""
        if ref is not None:
            raise TypeError("a history's steps with a value are appended by its chunker")
        buf = self._buf
        if buf is None:
            if self._pending_lo is None:
                # The newest step has no value, for now: a partial step's reservation, which
                # the step's next append usually fills (drop_reserved). The history goes on
                # counting; reads take the general path (``_lo`` out of reach) meanwhile, and
                # the chunker's next value, if the step stays without one, starts the buffer.
                self._pending_lo = self._lo
                self._lo = _PENDING
                self._chunker._hole_history = self
                return
            buf = self._to_buffer(self._chunker._count)
        self._holes = True
        if len(buf) == self._size:  # the oldest step leaves the buffer
            self._offset += 1
        buf.append(None)

    def can_set_last(self) -> bool:
        buf = self._buf
        if buf is None:
            return self._pending_lo is not None
        return bool(buf) and buf[-1] is None

    #: What :meth:`drop_reserved` does in its usual case (no buffer, the newest step
    #: reserved: :data:`FILLABLE`), as source lines for a generated step writer (see
    #: :data:`RESERVE`): keep the two in step.
    FILLABLE = "{h}._buf is None and {h}._pending_lo is not None"
    FILL = "{h}._lo = {h}._pending_lo\n{h}._pending_lo = None\n{c}._hole_history = None"

    def drop_reserved(self) -> None:
        """Removes the newest step, reserved (``None``) by a partial step, so that the value
        written into it can be appended (the chunker appends it) in its place."""
        buf = self._buf
        if buf is None and self._pending_lo is not None:
            self._lo = self._pending_lo
            self._pending_lo = None
            self._chunker._hole_history = None
            return
        if not buf or buf[-1] is not None:
            raise RuntimeError("drop_reserved called on a step that is not reserved")
        buf.pop()

    def reset(self) -> None:
        """Empties the history (the episode's buffers were cleared)."""
        self._buf = None
        self._offset = 0
        self._holes = False
        self._pending_lo = None
        self._base = self._lo = self._chunker._count
        self._chunker._hole_history = None

    def resize(self, buffer_size: int) -> None:
        if buffer_size == self._size:
            return
        if self._pending_lo is not None:
            self._to_buffer(self._chunker._count)
        buf = self._buf
        if buf is None:
            # Steps that left the history stay gone when it grows.
            self._lo = max(self._lo, self._chunker._count - self._size)
            self._size = buffer_size
            return
        old = list(buf)
        self._size = buffer_size
        self._buf = deque(old[-buffer_size:], maxlen=buffer_size)
        self._offset += max(0, len(old) - buffer_size)

    def __len__(self) -> int:
        if self._buf is None:
            return self._chunker._count - self._base + (self._pending_lo is not None)
        return self._offset + len(self._buf)

    def _holds(self, v: int) -> bool:
        """Without a buffer: whether value ``v``'s step is held (among the newest
        ``buffer_size`` steps, none dropped by a resize) and has its value (not the pending
        step's)."""
        count = self._chunker._count
        if self._pending_lo is None:
            return self._lo <= v < count and v >= count - self._size
        # The newest step held is the pending one: one value fewer is held.
        return self._pending_lo <= v < count and v > count - self._size

    def _ref(self, i: int) -> CellRef | None:
        """Step ``i``'s ref (``0 <= i < len(self)``), or None when the history does not hold
        its value."""
        buf = self._buf
        if buf is None:
            v = self._base + i
            if not self._holds(v):
                return None
        else:
            j = i - self._offset
            v = buf[j] if j >= 0 else None  # type: ignore[assignment]
            if v is None:
                return None
        return self._chunker.ref(v)

    def _run(self, start: int, stop: int) -> RunColumn | None:
        """Steps ``start .. stop - 1`` (``0 <= start < stop <= len(self)``) as a run of their
        values, or None when the history does not hold a value for one of them."""
        buf = self._buf
        if buf is None:
            v = self._base + start
            if self._pending_lo is None:  # _holds(v), inline (the structured writer's reads)
                if v < self._lo or v < self._chunker._count - self._size:
                    return None  # the oldest is no longer held (the later ones are)
            elif not (self._holds(v) and self._holds(self._base + stop - 1)):
                return None  # the oldest is no longer held, or the pending step is in it
        else:
            j = start - self._offset
            if j < 0:
                return None
            vs = tuple(itertools.islice(buf, j, stop - self._offset))
            if self._holes and None in vs:
                return None
            v = vs[0]  # type: ignore[assignment]  # steps with values: consecutive values
        col = RunColumn()
        col._chunker = self._chunker
        col._v0 = v
        col._n = stop - start
        col._path = self._path
        return col

    def _resolve(self, i: Any) -> int:
        n = len(self)
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
            if index < 0:
                buf = self._buf
                ch = self._chunker
                if buf is None:
                    v = ch._count + index
                    if v >= self._lo and -index <= self._size:
                        first = ch._last_first
                        if v < first:
                            return ch.ref(v)
                        ref = CellRef()  # ch.ref(v), inline: the value is in the newest chunk
                        ref.chunk = ch._last_chunk
                        ref.offset = v - first
                        ref.chunker = ch
                        ref.v = v
                        return ref
                elif -index <= len(buf):
                    v = buf[index]
                    if v is not None:
                        return ch.ref(v)
            elif self._buf is None:  # h[i], i >= 0 (Acme's n-step adder reads h[first])
                v = self._base + index
                if self._holds(v):
                    return self._chunker.ref(v)
        elif t is slice and index.stop is None and index.step is None:
            start = index.start
            if type(start) is int and start < 0:  # not None, numpy integers, bad types
                buf = self._buf
                if buf is None:
                    v = self._chunker._count + start
                    if v >= self._lo and -start <= self._size:
                        col = RunColumn()
                        col._chunker = self._chunker
                        col._v0 = v
                        col._n = -start
                        col._path = self._path
                        return col
                elif -start <= len(buf):
                    n = self._offset + len(buf)
                    run = self._run(n + start, n)
                    if run is not None:
                        return run
        elif t is slice and index.step is None and self._buf is None:
            # h[-k:-j] (k > j > 0) without a buffer: a run too, also while the newest step is
            # pending (Acme's adders read h[-k-1:-1] between a step's two appends); and
            # h[i:j] (0 <= i < j) whose steps are held (Acme's n-step adder).
            start = index.start
            stop = index.stop
            if type(start) is int and type(stop) is int and start < stop:
                if start >= 0:
                    v = self._base + start
                    held = self._holds(v) and self._holds(v + stop - start - 1)
                elif stop < 0:
                    v = self._chunker._count + start
                    pending = self._pending_lo
                    if pending is None:
                        held = v >= self._lo
                    else:  # the newest step is the pending one, without a value (_holds)
                        v += 1
                        held = v >= pending
                    held = held and -start <= self._size
                else:
                    held = False
                if held:
                    col = RunColumn()
                    col._chunker = self._chunker
                    col._v0 = v
                    col._n = stop - start
                    col._path = self._path
                    return col
        if isinstance(index, (int, np.integer)) and not isinstance(index, bool):
            i = self._resolve(index)
            ref = self._ref(i)
            if ref is None:
                raise ValueError(
                    "TrajectoryColumns cannot contain any None data references: TrajectoryColumn "
                    f"at path {self._path + (index,)} got [None] (the step is older than the "
                    "writer keeps, or the column was not written at that step)."
                )
            return ref  # its squeezed column
        if isinstance(index, slice):
            start, stop, step = index.indices(len(self))
            if step == 1 and start < stop:
                run = self._run(start, stop)
                if run is not None:
                    return run
            # Not a run (an empty slice, another step, or a step without a value, for which
            # TrajectoryColumn raises). map, not a comprehension: one would make ``self`` a
            # cell on every call.
            refs = list(map(self._ref, range(start, stop, step)))
            return TrajectoryColumn(refs, path=self._path)
        if isinstance(index, list):
            return TrajectoryColumn(
                list(map(self._ref, map(self._resolve, index))), path=self._path
            )
        raise TypeError(
            f"_ColumnHistory indices must be integers or slices, not {type(index).__name__}"
        )

    def __iter__(self) -> Iterator[CellRef | None]:
        return map(self._ref, range(len(self)))

    def numpy(self) -> np.ndarray:
        """All steps of the episode still held, stacked (raises if any step is missing)."""
        return self[:].numpy()

    def __repr__(self) -> str:
        return f"ColumnHistory(path={self._path}, len={len(self)})"


# Reverb's private name, which some user code and tests reach for.
_ColumnHistory = ColumnHistory

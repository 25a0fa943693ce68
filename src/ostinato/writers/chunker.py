"""Per-column chunkers: turn appended values into rows of shared chunks.

A chunker owns one column of one writer. Each appended value becomes one row of the chunk
being filled; values are numbered in order (``0, 1, ...``), and a :class:`CellRef`, made when
a step is read, points at a value's row by its number. Rows are written into a preallocated
array, so an item may refer to rows of a chunk that is still being filled: rows never move and
are never rewritten, so readers in other threads see finished rows only.

The number of rows per chunk is ``max_chunk_length`` when configured, otherwise chosen so that a
chunk holds about :data:`TARGET_CHUNK_BYTES` (between 1 and :data:`MAX_AUTO_ROWS` rows). Bigger
chunks amortise per-chunk overhead; an item keeps its whole chunk alive, so with a remover
that deletes in random order a table can hold up to ``ln(rows)`` times more step data than its
items strictly need (with Fifo removal, no more).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

from ostinato.core import pages
from ostinato.core.chunks import Chunk
from ostinato.core.keys import new_key
from ostinato.core.locations import register_block
from ostinato.core.specs import ALLOWED_KINDS, dtype_name, shape_str
from ostinato.writers.trajectory_column import TrajectoryColumn

if TYPE_CHECKING:
    from ostinato.writers.columns import ColumnHistory

TARGET_CHUNK_BYTES = 128 * 1024
MAX_AUTO_ROWS = 256
#: Chunks of columns whose rows are at most this many bytes are carved, one after the other,
#: out of blocks of :data:`BLOCK_BYTES`: batch assembly then gathers the rows of many sampled
#: items of one block with a single ``take`` (see :attr:`~ostinato.core.chunks.Chunk.origin`)
#: instead of one slice per item. A block is freed when its last chunk is.
BLOCK_MAX_ROW_BYTES = 4096
BLOCK_BYTES = 1 << 20


def to_array(value: Any, column: Any = None) -> np.ndarray:
    """Converts a step value as Reverb does: Python int -> int64, float -> float64, strings ->
    object arrays of bytes.

    Every string form -- ``str``/``bytes``, fixed-width ``S``/``U`` arrays, object arrays of
    ``bytes``/``str`` -- becomes an object array of ``bytes`` (``str`` encoded as UTF-8), the
    one string type that travels over the wire, into checkpoints and into ``tf.string``; so
    values of different lengths fit one column, as they do in Reverb.

    Raises:
      ValueError: the value has a dtype no column can hold (datetimes, structured records,
        Python objects other than strings), naming ``column`` and the dtype.
    """
    if type(value) is np.ndarray and value.dtype.kind not in "OSU":
        arr = value
    else:
        arr = np.asarray(value)
        if arr.dtype.kind == "S" and not isinstance(value, np.ndarray):
            # Python bytes: keep them whole (a fixed-width S array drops trailing NULs).
            arr = np.asarray(value, dtype=object)
    kind = arr.dtype.kind
    if kind in "OSU":
        flat = arr.reshape(-1).tolist()
        if kind == "U" or kind == "O":
            for x in flat:
                if not isinstance(x, (bytes, str)):
                    raise ValueError(
                        f"column {_column_name(column)}: an object array may hold only bytes "
                        f"or str (TensorFlow's string), got {type(x).__name__} {x!r:.60}"
                    )
            flat = [x.encode() if isinstance(x, str) else x for x in flat]
        out = np.empty(len(flat), dtype=object)
        out[:] = flat
        return out.reshape(arr.shape)
    if kind not in ALLOWED_KINDS or arr.dtype.fields is not None:
        raise ValueError(
            f"column {_column_name(column)}: dtype {arr.dtype} is not supported (columns hold "
            "bool, integer, floating-point, complex or string values)"
        )
    return arr


def _column_name(column: Any) -> str:
    if column is None:
        return "?"
    if isinstance(column, tuple):
        return "/".join(map(str, column)) or "?"
    return str(column)


#: numpy's real and boolean scalar types (what a step's numeric leaves usually are).
NUMPY_REAL_SCALARS = frozenset(
    {
        np.float32,
        np.float64,
        np.float16,
        np.int8,
        np.int16,
        np.int32,
        np.int64,
        np.uint8,
        np.uint16,
        np.uint32,
        np.uint64,
        np.bool_,
    }
)
_FAST_TYPES = frozenset({np.ndarray, *NUMPY_REAL_SCALARS, np.complex64, np.complex128})
#: A column of scalars of a numpy type that a Python type converts to exactly (what
#: ``np.asarray`` of its values gives): that Python type, stored without a conversion.
_PYTHON_SCALARS: dict[type, type] = {np.bool_: bool, np.float64: float}


class CellRef(TrajectoryColumn):
    """A reference to one appended value (Reverb's ``WeakCellRef``), which is also that step's
    squeezed :class:`TrajectoryColumn` (what ``history[path][i]`` returns).

    The writer keeps no ref per value: a column's history holds the values' indices, and a
    ref is made when user code reads a step (see :mod:`ostinato.writers.columns`). It expires
    when its value leaves the writer's keep-alive window or the episode's buffers are cleared
    (``expired`` compares the value's index with the chunker's window); items created from it
    before that keep the data alive regardless. As a ref, its ``shape`` is a tuple (Reverb's
    ``WeakCellRef.shape`` is a list; its squeezed column's, the same shape, is a tuple here
    too).
    """

    __slots__ = ("chunk", "offset", "chunker", "v")
    #: The chunk holding the value (None for a ref made after its value expired and its chunk
    #: was let go) and its row there.
    chunk: Chunk | None
    offset: int
    chunker: ColumnChunker
    #: The value's index among all values of its chunker (0, 1, ...).
    v: int

    # As a column: the one step, squeezed. (Class attributes, read through the subclass, in
    # place of TrajectoryColumn's slots, which a CellRef leaves unset: no reference cycle.)
    _squeeze = True
    _run = True

    @property
    def _refs(self) -> tuple[CellRef]:
        return (self,)

    @property
    def _path(self) -> tuple[Any, ...]:
        return self.chunker.path

    @property
    def _chunker(self) -> ColumnChunker:
        return self.chunker

    @property
    def expired(self) -> bool:
        """The value has left the keep-alive window (or the buffers were cleared)."""
        return self.v < self.chunker._live_from

    #: Made with no arguments and its fields set one by one (``CellRef()`` then calls no
    #: Python ``__init__``): see :meth:`ColumnChunker.ref`.
    __init__ = object.__init__  # type: ignore[assignment]

    # shape, dtype and len() are TrajectoryColumn's, read through ``_refs``.

    def numpy(self) -> np.ndarray:
        # Its own (TrajectoryColumn's reads the one ref's numpy(), this).
        if self.expired or self.chunk is None:
            # Either of Reverb's messages: this is a ref and a column.
            raise RuntimeError(
                "Cannot convert TrajectoryColumn with expired data references to numpy array "
                "(Cannot access data from expired WeakCellRef)."
            )
        return np.array(self.chunk.data[self.offset])

    def __eq__(self, other: object) -> bool:
        # Refs are made per read: two refs to one value are equal.
        if type(other) is not CellRef:
            return NotImplemented
        return self.v == other.v and self.chunker is other.chunker

    def __hash__(self) -> int:
        return hash((id(self.chunker), self.v))

    def __repr__(self) -> str:
        key = None if self.chunk is None else self.chunk.key
        return f"CellRef(chunk={key}, offset={self.offset}, expired={self.expired})"


def _span_ends(spans: list[tuple[int, Chunk]], count: int) -> list[int]:
    """Where each of a chunker's ``spans`` ends: the chunk holds the values from its first to
    the next chunk's first (the newest up to ``count``, the values appended so far)."""
    ends = [first for first, _ in spans[1:]]
    ends.append(count)
    return ends


#: ``ColumnChunker._n`` when no chunk is being filled: more rows than any chunk has.
_NO_ROOM = 1 << 62


class ColumnChunker:
    """Writes the values of one column into chunks.

    Args:
      path: the column's path in the step structure (for error messages).
      num_keep_alive_refs: how many of the newest values stay live (refs to older ones
        expire).
      max_chunk_length: rows per chunk, or ``None`` to size chunks by bytes.
    """

    def __init__(
        self,
        path: tuple[Any, ...],
        num_keep_alive_refs: int,
        max_chunk_length: int | None = None,
        history: ColumnHistory | None = None,
    ):
        self.path = path
        #: The column's history (which reads its steps' values from this chunker's counters),
        #: or None.
        self.history = history
        self.num_keep_alive_refs = num_keep_alive_refs
        self.max_chunk_length = max_chunk_length
        self.dtype: np.dtype | None = None
        #: The column's dtype when its values need no conversion (not strings), else None:
        #: what a value's dtype is compared with, by identity, on the fast path.
        self._fast_dtype: np.dtype | None = None
        #: The numpy scalar type of a column of native numeric scalars, else None.
        self._scalar_type: type | None = None
        #: The Python type whose values numpy converts exactly to a value of a column of
        #: scalars (``bool`` for a bool column, ``float`` for a float64 one), else None.
        self._python_type: type | None = None
        self._object_scalar = False
        self._spec: tuple[Any, ...] | None = None
        self.shape: tuple[int, ...] = ()
        self._rows = 0
        self._row_bytes = 0
        self._buf: np.ndarray | None = None
        self._block: np.ndarray | None = None  # rows of this block are handed out in order
        self._block_ro: np.ndarray | None = None  # the same, read-only (what chunks refer to)
        self._block_next = 0  # first row of the block not handed out
        self._block_code: int | None = None  # the block's code (ostinato.core.locations)
        self._chunk_start: int | None = None  # first row in the block of the chunk being filled
        self._chunk: Chunk | None = None
        self._n = _NO_ROOM  # rows of the chunk being filled (_NO_ROOM: none is)
        self._episode: int | None = None
        #: Values appended so far: the next value's index (``CellRef.v``).
        self._count = 0
        #: Values of a lower index have expired (left the keep-alive window, or the buffers
        #: were cleared). Never decreases.
        self._live_from = 0
        #: ``(first value index, chunk)`` of the chunks that may hold live values, oldest
        #: first; the newest is also kept apart (``_last_first``, ``_last_chunk``), even once
        #: closed, as every value from ``_last_first`` on is in it.
        self._spans: list[tuple[int, Chunk]] = []
        self._last_first = 0
        self._last_chunk: Chunk | None = None
        #: The history, while it keeps its steps' value indices in a buffer (a step without a
        #: value, see :class:`~ostinato.writers.columns.ColumnHistory`): :meth:`append` puts
        #: each value's index in it. None while the history's steps are this chunker's values
        #: in order.
        self._hole_history: ColumnHistory | None = None
        if history is not None:
            history._attach(self)

    def _spec_error(self, arr: np.ndarray) -> ValueError:
        if arr.dtype != self.dtype:
            return ValueError(
                f"Tensor of wrong dtype provided for column {self.path}. Got "
                f"{dtype_name(arr.dtype)} but expected {dtype_name(self.dtype)}."
            )
        return ValueError(
            f"Tensor of incompatible shape provided for column {self.path}. Got "
            f"{shape_str(arr.shape)} which is incompatible with {shape_str(self.shape)}."
        )

    def _start_chunk(self, episode_id: int) -> None:
        self._trim_current()
        rows = self._rows
        if self.dtype.kind != "O" and self._row_bytes <= BLOCK_MAX_ROW_BYTES:
            if self._block is None or self._block_next + rows > len(self._block):
                nrows = max(rows, BLOCK_BYTES // max(1, self._row_bytes))
                self._block = np.empty((nrows, *self.shape), dtype=self.dtype)
                self._block_ro = self._block.view()
                self._block_ro.flags.writeable = False
                self._block_next = 0
                # The chunks' views keep the block (their base) alive: it is registered weakly.
                self._block_code = register_block(self._block)
            start = self._block_next
            self._block_next = start + rows
            self._buf = self._block[start : start + rows]
            view = self._block_ro[start : start + rows]  # type: ignore[index]
            origin = None if self._block_code is None else (self._block_code, start)
            self._chunk_start = start
        else:
            # Large rows (frames): the chunk's pages are faulted in at once (core.pages).
            self._buf = pages.empty((rows, *self.shape), self.dtype)
            view = self._buf.view()
            view.flags.writeable = False
            origin = None
            self._chunk_start = None
        self._chunk = chunk = Chunk(
            new_key(), view, episode_id, nbytes=view.nbytes, spec=self._spec, origin=origin
        )
        self._n = 0
        self._episode = episode_id
        # Lets go of the oldest chunks while they hold no live value (the next one starts at
        # or before the oldest live value; the newest holds live values until the buffers
        # are cleared, which empties the list).
        spans = self._spans
        live_from = self._live_from
        while len(spans) > 1 and spans[1][0] <= live_from:
            del spans[0]
        self._last_first = first = self._count
        spans.append((first, chunk))
        self._last_chunk = chunk

    def _trim_current(self) -> None:
        """Shrinks a partly filled chunk that will get no more rows: a chunk of a block gives its
        unused rows back to the block (the next chunk starts right after it); another is copied
        when less than half full, to free the unused tail."""
        chunk = self._chunk
        if chunk is not None and 0 < self._n < self._rows:
            n = self._n
            start = self._chunk_start
            if start is not None:  # carved out of the block
                if self._block_next == start + self._rows:
                    self._block_next = start + n
                chunk.data = self._block_ro[start : start + n]  # type: ignore[index]
                chunk.nbytes = chunk.data.nbytes
            elif n < self._rows // 2:
                data = np.array(self._buf[:n])  # type: ignore[index]
                data.flags.writeable = False
                chunk.data = data
                chunk.nbytes = data.nbytes
        self._chunk = None
        self._buf = None
        self._n = _NO_ROOM  # the next append takes the slow path, which starts a chunk
        self._episode = None

    def _first_value(self, arr: np.ndarray) -> None:
        self.dtype = arr.dtype
        self._fast_dtype = arr.dtype if arr.dtype.kind != "O" else None
        native = self._fast_dtype is not None and arr.dtype is np.dtype(arr.dtype.type)
        self._scalar_type = arr.dtype.type if native and arr.shape == () else None
        self._python_type = _PYTHON_SCALARS.get(self._scalar_type)  # type: ignore[arg-type]
        self.shape = arr.shape
        self._object_scalar = arr.dtype.kind == "O" and arr.shape == ()
        self._spec = (arr.dtype, arr.shape)
        #: Bytes of one row (computed once: numpy's ``prod`` costs microseconds a call).
        self._row_bytes = arr.dtype.itemsize * math.prod(arr.shape)
        if self.max_chunk_length is not None:
            self._rows = self.max_chunk_length
        else:
            row_bytes = max(1, self._row_bytes)
            self._rows = int(max(1, min(MAX_AUTO_ROWS, TARGET_CHUNK_BYTES // row_bytes)))

    def append(self, value: Any, episode_id: int) -> None:
        """Stores one value (the next value index, :attr:`_count`). Validates dtype and shape.

        No ref is made: the history reads the value by its index (see
        :class:`~ostinato.writers.columns.ColumnHistory`)."""
        # Fast path: a value stored as it is, with room in the chunk being filled (a chunk is
        # closed at the end of an episode, so it is always of this episode). That is a numpy
        # scalar of a column of scalars of its type (one identity check: such a scalar's dtype
        # is the type's native one and its shape is ()), or an array or numpy scalar whose
        # dtype is the column's by identity (numpy shares one dtype object per built-in type)
        # and whose shape is the column's, in a column not of strings (to_array converts those).
        t = type(value)
        n = self._n
        if (
            t is self._scalar_type
            or (t in _FAST_TYPES and value.dtype is self._fast_dtype and value.shape == self.shape)
        ) and n < self._rows:
            self._buf[n] = value  # type: ignore[index]
        else:
            n = self._store_slow(value, episode_id)
        self._n = n + 1
        self._count = v = self._count + 1
        v -= self.num_keep_alive_refs  # the oldest live value from now on
        if v > self._live_from:
            self._live_from = v
        hist = self._hole_history
        if hist is not None:  # the history keeps a buffer: the value's index goes in it
            v = self._count - 1
            buf = hist._buf
            if buf is None:  # its newest step stayed without a value: a buffer from now on
                buf = hist._to_buffer(v)
            if len(buf) == hist._size:
                hist._offset += 1
            buf.append(v)

    def _store_slow(self, value: Any, episode_id: int) -> int:
        """Stores what :meth:`append`'s fast path does not -- the first value, a dtype/shape
        error, a column of strings (object columns never take the fast path), a full chunk or
        a new episode -- converting strings; returns the row it went to."""
        if type(value) is self._python_type:  # (None until the first value)
            arr = value  # a Python bool or float: the buffer converts it exactly
        else:
            arr = (
                value
                if type(value) in _FAST_TYPES and value.dtype.kind not in "OSU"
                else to_array(value, self.path)
            )
            if self.dtype is None:
                if arr.dtype.kind not in ALLOWED_KINDS or arr.dtype.fields is not None:
                    to_array(arr, self.path)  # raises, naming the column and dtype
                self._first_value(arr)
            elif arr.dtype != self.dtype or arr.shape != self.shape:
                raise self._spec_error(np.asarray(arr))
        if self._chunk is None or self._n >= self._rows or self._episode != episode_id:
            self._start_chunk(episode_id)
        n = self._n
        if self._object_scalar:
            self._buf[n, ...] = arr  # type: ignore[index]  # stores the bytes, not the 0-d array
        else:
            self._buf[n] = arr  # type: ignore[index]
        return n

    def live_chunk_keys(self) -> set[int]:
        """Keys of the chunks holding the values that are still live.

        Called from a network stream's thread while the writer appends: it reads the window's
        lower end first, then a copy of the chunk list (one C-level copy, never a list that
        changes under it), then the count, so that a concurrent append makes it keep a chunk
        too many rather than too few; a chunk started during the call may be missing, as from
        any snapshot (the stream then sends that chunk's rows again if an item needs them)."""
        live_from = self._live_from
        spans = list(self._spans)
        ends = _span_ends(spans, self._count)
        return {
            chunk.key for (first, chunk), end in zip(spans, ends) if end > live_from and end > first
        }

    def locate(self, v: int) -> tuple[Chunk | None, int]:
        """The chunk holding value ``v`` and its row there; ``(None, -1)`` once the chunk of
        an expired value has been let go."""
        if v >= self._last_first:
            if self._last_chunk is None:
                return None, -1
            return self._last_chunk, v - self._last_first
        for first, chunk in reversed(self._spans):
            if v >= first:
                return chunk, v - first
        return None, -1

    def ref(self, v: int) -> CellRef:
        """A new ref to value ``v``."""
        r = CellRef()
        r.chunk, r.offset = self.locate(v)
        r.chunker = self
        r.v = v
        return r

    def slices(self, v: int, n: int) -> list[tuple[Chunk, int, int]]:
        """The chunk slices ``(chunk, offset, length)`` of the ``n`` values from ``v`` on (live
        values: see :attr:`_live_from`), oldest first."""
        out = []
        end = v + n
        spans = self._spans
        for (first, chunk), last in zip(spans, _span_ends(spans, self._count)):
            lo, hi = max(v, first), min(end, last)
            if lo < hi:
                out.append((chunk, lo - first, hi - lo))
        return out

    def release_spare_rows(self) -> None:
        """Closes the chunk being filled (trimming its unused rows); the next value starts a new
        one."""
        self._trim_current()

    def end_episode(self, clear_buffers: bool) -> None:
        """Closes the current chunk; with ``clear_buffers`` every live value expires and the
        history is emptied."""
        self._trim_current()
        if clear_buffers:
            self._live_from = self._count
            self._spans = []
            self._last_first = self._count
            self._last_chunk = None
            if self.history is not None:
                self.history.reset()

    def configure(self, num_keep_alive_refs: int, max_chunk_length: int | None) -> None:
        self.num_keep_alive_refs = num_keep_alive_refs
        self.max_chunk_length = max_chunk_length
        self._trim_current()
        if max_chunk_length is not None:
            self._rows = max_chunk_length
        elif self.dtype is not None:
            self._first_value(np.empty(self.shape, self.dtype))
        self._live_from = max(self._live_from, self._count - num_keep_alive_refs)

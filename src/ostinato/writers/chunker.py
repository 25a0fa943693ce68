"""Per-column chunkers: turn appended values into rows of shared chunks.

A chunker owns one column of one writer. Each appended value becomes one row of the chunk
being filled and a :class:`CellRef` points at that row. Rows are written into a preallocated
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
from collections import deque
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


class CellRef(TrajectoryColumn):
    """A reference to one appended value (Reverb's ``WeakCellRef``), which is also that step's
    squeezed :class:`TrajectoryColumn` (what ``history[path][i]`` returns: one object per
    step, made once by the writer, instead of a new column at every read).

    It expires when it leaves the writer's keep-alive window or the episode's buffers are
    cleared; items created from it before that keep the data alive regardless. As a ref, its
    ``shape`` is a tuple (Reverb's ``WeakCellRef.shape`` is a list; its squeezed column's, the
    same shape, is a tuple here too).
    """

    __slots__ = ("chunk", "offset", "chunker", "expired")
    chunk: Chunk
    offset: int
    chunker: ColumnChunker
    expired: bool

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

    #: Made by the chunker with no arguments and its fields set one by one (``CellRef()``
    #: then calls no Python ``__init__``: the cheapest object a writer makes per value).
    __init__ = object.__init__  # type: ignore[assignment]

    # shape, dtype and len() are TrajectoryColumn's, read through ``_refs``.

    def numpy(self) -> np.ndarray:
        # Its own (TrajectoryColumn's reads the one ref's numpy(), this).
        if self.expired:
            # Either of Reverb's messages: this is a ref and a column.
            raise RuntimeError(
                "Cannot convert TrajectoryColumn with expired data references to numpy array "
                "(Cannot access data from expired WeakCellRef)."
            )
        return np.array(self.chunk.data[self.offset])

    def __repr__(self) -> str:
        return f"CellRef(chunk={self.chunk.key}, offset={self.offset}, expired={self.expired})"


#: ``ColumnChunker._n`` when no chunk is being filled: more rows than any chunk has.
_NO_ROOM = 1 << 62


class ColumnChunker:
    """Writes the values of one column into chunks.

    Args:
      path: the column's path in the step structure (for error messages).
      num_keep_alive_refs: how many of the newest refs stay valid.
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
        #: The column's history, which each ref is appended to (by :meth:`append` itself: one
        #: call per value instead of two), or None.
        self.history = history
        self.num_keep_alive_refs = num_keep_alive_refs
        self.max_chunk_length = max_chunk_length
        self.dtype: np.dtype | None = None
        #: The column's dtype when its values need no conversion (not strings), else None:
        #: what a value's dtype is compared with, by identity, on the fast path.
        self._fast_dtype: np.dtype | None = None
        #: The numpy scalar type of a column of native numeric scalars, else None.
        self._scalar_type: type | None = None
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
        self._last_step = -1
        self._live: deque[CellRef] = deque()
        #: The keep-alive window is the history's buffer itself (see :meth:`_share_window`):
        #: ``_live`` is then unused.
        self._shared = False
        self._share_window()

    def _share_window(self) -> None:
        """Uses the history's buffer as the keep-alive window when the two are the same: the
        buffer holds as many steps as refs stay live, has no step without a value (None),
        and the chunker holds no live ref of its own. A ref then expires as it leaves the
        buffer, and ``append`` keeps one deque instead of two. The history calls
        :meth:`_stop_sharing` before it stops being that window."""
        hist = self.history
        if (
            hist is not None
            and not self._shared
            and not self._live
            and not hist._buf
            and hist._size == self.num_keep_alive_refs
        ):
            self._shared = True
            hist._unshare = self._stop_sharing

    def _stop_sharing(self) -> None:
        """Takes the keep-alive window back from the history: the refs in its buffer (all live,
        none None while shared)."""
        hist = self.history
        assert hist is not None
        self._live = deque(hist._buf)  # type: ignore[arg-type]  # no None while shared
        self._shared = False
        hist._unshare = None

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
        self._chunk = Chunk(
            new_key(), view, episode_id, nbytes=view.nbytes, spec=self._spec, origin=origin
        )
        self._n = 0
        self._episode = episode_id

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

    def append(self, value: Any, episode_id: int) -> CellRef:
        """Stores one value and appends the ref to it to :attr:`history`; returns the ref.
        Validates dtype and shape."""
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
        ref = CellRef()
        ref.chunk = self._chunk
        ref.offset = n
        ref.chunker = self
        ref.expired = False
        hist = self.history
        if self._shared:  # the history's buffer is the keep-alive window
            buf = hist._buf  # type: ignore[union-attr]
            if len(buf) == hist._size:  # type: ignore[union-attr]
                hist._offset += 1  # type: ignore[union-attr]
                buf[0].expired = True  # type: ignore[union-attr]  # leaves the window
            buf.append(ref)
            return ref
        live = self._live
        if len(live) >= self.num_keep_alive_refs:
            live.popleft().expired = True
        live.append(ref)
        if hist is not None:  # ColumnHistory.append(ref), inline
            buf = hist._buf
            if len(buf) == hist._size:
                hist._offset += 1
            buf.append(ref)
        return ref

    def _store_slow(self, value: Any, episode_id: int) -> int:
        """Stores what :meth:`append`'s fast path does not -- the first value, a dtype/shape
        error, a column of strings (object columns never take the fast path), a full chunk or
        a new episode -- converting strings; returns the row it went to."""
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
        """Keys of the chunks holding the values whose refs are still live."""
        if self._shared:
            return {r.chunk.key for r in list(self.history._buf)}  # type: ignore[union-attr]
        return {r.chunk.key for r in list(self._live)}

    def release_spare_rows(self) -> None:
        """Closes the chunk being filled (trimming its unused rows); the next value starts a new
        one."""
        self._trim_current()

    def end_episode(self, clear_buffers: bool) -> None:
        """Closes the current chunk; with ``clear_buffers`` every live ref expires and the
        history is emptied."""
        self._trim_current()
        if clear_buffers:
            hist = self.history
            for r in hist._buf if self._shared else self._live:  # type: ignore[union-attr]
                r.expired = True  # type: ignore[union-attr]  # no None while shared
            self._live.clear()
            if hist is not None:
                hist.reset()  # then the window can be shared again
                self._share_window()

    def configure(self, num_keep_alive_refs: int, max_chunk_length: int | None) -> None:
        self.num_keep_alive_refs = num_keep_alive_refs
        self.max_chunk_length = max_chunk_length
        self._trim_current()
        if max_chunk_length is not None:
            self._rows = max_chunk_length
        elif self.dtype is not None:
            self._first_value(np.empty(self.shape, self.dtype))
        if self._shared:
            self._stop_sharing()
        while len(self._live) > num_keep_alive_refs:
            self._live.popleft().expired = True

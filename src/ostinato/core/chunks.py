"""Chunks (blocks of consecutive steps of one column), the one way to read their rows, and the
store that counts their users.

A chunk is written once and referenced by any number of items in any number of tables. The
store shared by all tables of a server maps chunk keys to live chunks and counts references;
a chunk whose count falls to zero leaves the store and its data is released.

A chunk holds its rows in one of two forms:

* a numpy array, time first (chunks written in this process; a writer may still be filling
  rows past those that items reference);
* a *row source* (:class:`RowSource`): rows that arrived in some other form and are decoded on
  demand -- a server keeps the segments a remote writer sent (``ostinato.wire.rows``).

Every reader goes through :func:`chunk_array`, :func:`chunk_rows` or :func:`chunk_row_bytes`,
never through ``chunk.data`` directly, so both forms work everywhere.
"""

from __future__ import annotations

import itertools
import sys
import threading
from collections.abc import Iterable, Sequence
from typing import Any, Protocol

import numpy as np


class RowSource(Protocol):
    """Rows of a chunk that are not (yet) one numpy array."""

    #: Rows held so far.
    end: int

    def as_array(self) -> np.ndarray:
        """All rows so far, time first (read-only; may be cached by the source)."""
        ...

    def rows(self, start: int, stop: int) -> np.ndarray:
        """Rows ``[start, stop)`` decoded (only what they need)."""
        ...

    def row_bytes(self, start: int, stop: int) -> bytes:
        """Rows ``[start, stop)`` as raw little-endian C-order bytes (numeric dtypes only)."""
        ...


class Chunk:
    """Rows of one column.

    Attributes:
      key: 64-bit chunk key chosen by the writer.
      data: the rows: a read-only numpy array (time first) or a :class:`RowSource`. Read them
        with :func:`chunk_array` / :func:`chunk_rows` / :func:`chunk_row_bytes`.
      episode_id: the episode the rows belong to.
      refs: number of item (and stream) references, maintained by :class:`ChunkStore`.
      nbytes: bytes the rows take.
      spec: ``(dtype, row_shape)`` of the rows, or ``None`` if not known. Shared (the same
        object) by all chunks of one writer column, so batch assembly can check many chunks at
        once by identity.
      origin: ``(block, first_row)`` when the rows are ``block[first_row:first_row + len]`` of a
        larger array that other chunks of the same column share (a writer carves the chunks of
        a column of small rows out of blocks): batch assembly gathers the rows of many items of
        one block with a single ``take``. ``None`` otherwise.
      raw: every row so far as one payload of raw little-endian C-order bytes, when the row
        source holds them so (rows received over the network), else ``None``: a sample reply
        cuts an item's rows out of it without visiting the row source (on a big table each
        object visited is a cache miss). Set by whoever adds rows; it may lag behind them, but
        always covers the rows of every item stored.
    """

    __slots__ = (
        "key",
        "data",
        "episode_id",
        "refs",
        "_nbytes",
        "spec",
        "origin",
        "raw",
        "_store",
        "_counted",
    )

    def __init__(
        self,
        key: int,
        data: Any,
        episode_id: int = 0,
        nbytes: int | None = None,
        spec: Any = None,
        origin: tuple[int, int] | None = None,
    ):
        self.key = key
        self.data = data
        self.episode_id = episode_id
        self.refs = 0
        self.spec = spec
        self.origin = origin
        self.raw: bytes | None = None
        if nbytes is None:
            nbytes = data.nbytes if isinstance(data, np.ndarray) else len(data)
        self._nbytes = nbytes
        self._store: ChunkStore | None = None  # the store holding the chunk, while one does
        self._counted = 0  # the bytes that store counts for it

    @property
    def nbytes(self) -> int:
        """Bytes the rows take."""
        return self._nbytes

    @nbytes.setter
    def nbytes(self, value: int) -> None:
        # A chunk can change size while a store holds it (a remote writer's open chunk grows
        # as its rows arrive; a writer trims a partly filled one): the store's byte count
        # follows, so that it never has to add up its chunks.
        self._nbytes = value
        store = self._store  # read after the write: see ChunkStore._hold
        if store is not None:
            store._recount(self)

    def __repr__(self) -> str:
        return (
            f"Chunk(key={self.key}, episode_id={self.episode_id}, refs={self.refs}, "
            f"nbytes={self.nbytes})"
        )


def two_runs(col: Sequence[Any]) -> int:
    """Where the second run starts when ``col`` (not empty) is one chunk, or a run of one
    chunk then a run of another -- what a writer's batch of items has in each column (the
    second when a chunk closed partway through) -- so ``len(col)`` for one run; else 0.

    Only identity is compared: the boundary is found by bisection and both runs are checked
    with ``count``, which compares by identity first (a few instructions per element, where
    comparing two different chunks costs a few hundred)."""
    n = len(col)
    a = col[0]
    b = col[-1]
    if type(a) is not Chunk or type(b) is not Chunk:
        return 0
    if b is a:
        return n if col.count(a) == n else 0
    lo, hi = 0, n - 1  # col[lo] is a, col[hi] is b
    while hi - lo > 1:
        mid = (lo + hi) >> 1
        x = col[mid]
        if x is a:
            lo = mid
        elif x is b:
            hi = mid
        else:
            return 0
    if col[hi:].count(b) != n - hi or col[:hi].count(a) != hi:
        return 0
    return hi


# -- reading rows ----------------------------------------------------------------------------------
def chunk_array(chunk: Chunk) -> np.ndarray:
    """All of the chunk's rows as one array, whatever form the chunk holds them in."""
    data = chunk.data
    if isinstance(data, np.ndarray):
        return data
    return data.as_array()


def chunk_rows(chunk: Chunk, start: int, stop: int) -> np.ndarray:
    """Rows ``[start, stop)`` of the chunk (a view where the chunk holds an array)."""
    data = chunk.data
    if isinstance(data, np.ndarray):
        return data[start:stop]
    return data.rows(start, stop)


def chunk_row_bytes(chunk: Chunk, start: int, stop: int) -> bytes:
    """Rows ``[start, stop)`` as raw little-endian C-order bytes (numeric dtypes only)."""
    data = chunk.data
    if isinstance(data, np.ndarray):
        return le_bytes(data[start:stop])
    return data.row_bytes(start, stop)


def le_bytes(rows: np.ndarray) -> bytes:
    """Numeric ``rows`` as little-endian C-order bytes, copied once (twice if they must be
    byte-swapped first)."""
    if not little_endian(rows.dtype):
        rows = rows.astype(rows.dtype.newbyteorder("<"))
    return rows.tobytes()  # C order, whatever the strides


#: Byte orders of dtypes whose bytes are not little-endian as they are ("|": single bytes).
_NOT_LITTLE = frozenset({">", "="} if sys.byteorder == "big" else {">"})


def little_endian(dtype: np.dtype) -> bool:
    """Whether values of ``dtype`` are stored little-endian (or are single bytes), as
    :attr:`Chunk.raw` and the wire hold them."""
    return dtype.byteorder not in _NOT_LITTLE


def chunk_spec(chunk: Chunk) -> tuple[Any, ...]:
    """``(dtype, row_shape)`` of the chunk's rows."""
    spec = chunk.spec
    if spec is None:
        arr = chunk_array(chunk)
        spec = (arr.dtype, arr.shape[1:])
    return spec


# -- the store -------------------------------------------------------------------------------------
class ChunkStore:
    """Reference-counted chunks shared by every table of a server. Thread-safe.

    Chunks are tracked by identity: the same key can name two chunk objects for a while (a
    writer stream that reconnects resends its open chunk as a new object).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._chunks: dict[int, Chunk] = {}  # id(chunk) -> chunk
        self._bytes = 0  # sum of the chunks' nbytes, kept as they come, go and change size

    def _hold(self, c: Chunk) -> None:
        """A chunk enters the store (lock held). ``_store`` is set before ``nbytes`` is read:
        a concurrent resize either happened before that read or sees ``_store`` and
        recounts."""
        self._chunks[id(c)] = c
        c._store = self
        n = c._nbytes
        c._counted = n
        self._bytes += n

    def _recount(self, c: Chunk) -> None:
        with self._lock:
            if c._store is self:
                n = c._nbytes
                self._bytes += n - c._counted
                c._counted = n

    def acquire(self, chunks: Iterable[Chunk]) -> None:
        """Adds one reference to each chunk (a chunk listed twice gets two)."""
        self.acquire_many(chunks, itertools.repeat(1))

    def acquire_many(self, chunks: Iterable[Chunk], counts: Iterable[int]) -> None:
        """Adds ``counts[i]`` references to ``chunks[i]`` (restores, which count them in bulk)."""
        with self._lock:
            for c, m in zip(chunks, counts):
                if m:
                    if c.refs == 0:
                        self._hold(c)
                    c.refs += m

    def release(self, chunks: Iterable[Chunk]) -> None:
        """Drops one reference from each chunk; unreferenced chunks leave the store."""
        self.release_many(chunks, itertools.repeat(1))

    def release_many(self, chunks: Iterable[Chunk], counts: Iterable[int]) -> None:
        """Drops ``counts[i]`` references from ``chunks[i]`` (a chunk may be listed more than
        once); unreferenced chunks leave the store."""
        with self._lock:
            d = self._chunks
            for c, m in zip(chunks, counts):
                c.refs -= m
                if c.refs == 0:
                    d.pop(id(c), None)
                    c._store = None
                    self._bytes -= c._counted
                elif c.refs < 0:  # pragma: no cover - would be a bug in the table
                    raise AssertionError(f"chunk {c.key} released more often than acquired")

    def get(self, key: int) -> Chunk | None:
        """A live chunk with this key (the newest, if a key names several)."""
        with self._lock:
            found = [c for c in self._chunks.values() if c.key == key]
        return found[-1] if found else None

    def __len__(self) -> int:
        return len(self._chunks)

    def __contains__(self, key: int) -> bool:
        return self.get(key) is not None

    @property
    def num_bytes(self) -> int:
        """Bytes of all chunks held (kept up to date as they change: O(1))."""
        return self._bytes

    def stats(self) -> tuple[int, int]:
        """``(chunks, bytes)`` held now, read together."""
        with self._lock:
            return len(self._chunks), self._bytes

    def chunks(self) -> list[Chunk]:
        with self._lock:
            return list(self._chunks.values())

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
    """

    __slots__ = ("key", "data", "episode_id", "refs", "nbytes", "spec", "origin")

    def __init__(self, key: int, data: Any, episode_id: int = 0, nbytes: int | None = None,
                 spec: Any = None, origin: tuple[np.ndarray, int] | None = None):
        self.key = key
        self.data = data
        self.episode_id = episode_id
        self.refs = 0
        self.spec = spec
        self.origin = origin
        if nbytes is None:
            nbytes = data.nbytes if isinstance(data, np.ndarray) else len(data)
        self.nbytes = nbytes

    def __repr__(self) -> str:
        return f"Chunk(key={self.key}, episode_id={self.episode_id}, refs={self.refs}, nbytes={self.nbytes})"


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
        rows = data[start:stop]
        return np.ascontiguousarray(rows).astype(rows.dtype.newbyteorder("<"), copy=False).tobytes()
    return data.row_bytes(start, stop)


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

    def acquire(self, chunks: Iterable[Chunk]) -> None:
        """Adds one reference to each chunk (a chunk listed twice gets two)."""
        with self._lock:
            d = self._chunks
            for c in chunks:
                if c.refs == 0:
                    d[id(c)] = c
                c.refs += 1

    def acquire_many(self, chunks: Sequence[Chunk], counts: Sequence[int]) -> None:
        """Adds ``counts[i]`` references to ``chunks[i]`` (restores, which count them in bulk)."""
        with self._lock:
            d = self._chunks
            for c, m in zip(chunks, counts):
                if m:
                    if c.refs == 0:
                        d[id(c)] = c
                    c.refs += m

    def release(self, chunks: Iterable[Chunk]) -> None:
        """Drops one reference from each chunk; unreferenced chunks leave the store."""
        with self._lock:
            d = self._chunks
            for c in chunks:
                c.refs -= 1
                if c.refs == 0:
                    d.pop(id(c), None)
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
        with self._lock:
            return sum(c.nbytes for c in self._chunks.values())

    def chunks(self) -> list[Chunk]:
        with self._lock:
            return list(self._chunks.values())

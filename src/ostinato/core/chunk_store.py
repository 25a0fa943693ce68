"""Chunks (blocks of consecutive steps of one column) and the store that counts their users.

A chunk is written once and referenced by any number of items in any number of tables. The
store shared by all tables of a server maps chunk keys to live chunks and counts references;
a chunk whose count falls to zero leaves the store and its data is released.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import Any

import numpy as np


class Chunk:
    """Rows of one column.

    Attributes:
      key: 64-bit chunk key chosen by the writer.
      data: the rows. In-process this is a read-only numpy array whose leading dimension is time
        (a writer may still be filling rows past those that items reference); over the network
        it is the encoded payload, which the server never decodes.
      episode_id: the episode the rows belong to.
      refs: number of item (and stream) references, maintained by :class:`ChunkStore`.
      spec: ``(dtype, row_shape)`` of the rows, or ``None`` if not known.
    """

    __slots__ = ("key", "data", "episode_id", "refs", "nbytes", "spec")

    def __init__(self, key: int, data: Any, episode_id: int = 0, nbytes: int | None = None,
                 spec: Any = None):
        self.key = key
        self.data = data
        self.episode_id = episode_id
        self.refs = 0
        #: ``(dtype, row_shape)`` of the rows, shared (the same object) by all chunks of one
        #: writer column, so batch assembly can check many chunks at once by identity.
        self.spec = spec
        if nbytes is None:
            nbytes = data.nbytes if isinstance(data, np.ndarray) else len(data)
        self.nbytes = nbytes

    def __repr__(self) -> str:
        return f"Chunk(key={self.key}, episode_id={self.episode_id}, refs={self.refs}, nbytes={self.nbytes})"


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

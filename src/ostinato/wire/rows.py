"""Rows a server received over the network: a chunk's segments, kept as they arrived.

The server does not look inside tensors (docs/architecture.md): a chunk that a remote writer sent
holds a :class:`SegmentedRows` -- the writer's segments in row order, decompressed but not
decoded -- which implements the row-source protocol of :mod:`ostinato.core.chunks`: sample
replies cut the bytes they need out of the segments, and readers in the server's own process
decode rows on demand.
"""

from __future__ import annotations

import bisect
import math

import numpy as np

from ostinato.errors import DecodeError
from ostinato.wire.codec import Segment


class SegmentedRows:
    """Server-side data of a chunk that arrived over the network: its segments, in row order."""

    __slots__ = ("segments", "starts", "end", "dtype", "row_shape", "row_nbytes", "_cache")

    def __init__(self, dtype: np.dtype, row_shape: tuple[int, ...]):
        self.segments: list[Segment] = []
        self.starts: list[int] = []
        self.end = 0
        self.dtype = dtype
        self.row_shape = row_shape
        self.row_nbytes = dtype.itemsize * math.prod(row_shape)
        self._cache: np.ndarray | None = None

    def add(self, seg: Segment) -> None:
        if seg.start != self.end:
            raise DecodeError(
                f"chunk {seg.key}: segment starts at row {seg.start}, expected {self.end}"
            )
        if seg.dtype != self.dtype or seg.row_shape != self.row_shape:
            raise DecodeError(f"chunk {seg.key}: segment dtype/shape differs from earlier segments")
        self.segments.append(seg)
        self.starts.append(seg.start)
        self.end += seg.nrows

    def covering(self, offset: int, length: int) -> list[tuple[Segment, int, int]]:
        """Segments holding rows [offset, offset + length): (segment, local offset, rows)."""
        out = []
        i = bisect.bisect_right(self.starts, offset) - 1
        row, left = offset, length
        while left > 0:
            seg = self.segments[i]
            local = row - seg.start
            n = min(left, seg.nrows - local)
            out.append((seg, local, n))
            row += n
            left -= n
            i += 1
        return out

    # -- the row-source protocol (ostinato.core.chunks.RowSource) ---------------------------------
    def rows(self, start: int, stop: int) -> np.ndarray:
        """Rows ``[start, stop)`` decoded (only the segments that hold them)."""
        parts = [
            seg.decode()[local : local + n] for seg, local, n in self.covering(start, stop - start)
        ]
        if not parts:
            return np.empty((0, *self.row_shape), dtype=self.dtype)
        return parts[0] if len(parts) == 1 else np.concatenate(parts)

    def row_bytes(self, start: int, stop: int) -> bytes:
        """Rows ``[start, stop)`` as the raw little-endian bytes received (segments are kept
        decompressed, so this cuts them out without decoding)."""
        rb = self.row_nbytes
        segs = self.segments
        if len(segs) == 1:  # the common case: one segment holds the whole chunk
            return segs[0].payload[start * rb : stop * rb]
        parts = [
            seg.payload[local * rb : (local + k) * rb]
            for seg, local, k in self.covering(start, stop - start)
        ]
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def as_array(self) -> np.ndarray:
        """All rows so far as one read-only array (for in-process samplers), cached until more
        rows arrive."""
        cache = self._cache
        if cache is None or len(cache) != self.end:
            cache = np.concatenate([s.decode() for s in self.segments])
            cache.flags.writeable = False
            self._cache = cache
        return cache

    @property
    def nbytes(self) -> int:
        """Bytes of the payloads held."""
        return sum(len(s.payload) for s in self.segments)

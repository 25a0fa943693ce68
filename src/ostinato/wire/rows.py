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
from ostinato.wire.codec import RAW, Segment

#: A chunk's consecutive small raw numeric segments (each at most :data:`MERGE_SEGMENT_BYTES`)
#: are merged into one while the merged payload stays within :data:`MERGE_BYTES`: a writer
#: sends a chunk's rows in as many segments as it sends requests, and a chunk of small rows
#: then holds one segment, whose rows a sample reply cuts out with one slice. Big rows (frames)
#: are never copied again: cutting them is not what costs.
MERGE_BYTES = 64 * 1024
MERGE_SEGMENT_BYTES = 8 * 1024


class SegmentedRows:
    """Server-side data of a chunk that arrived over the network: its segments, in row order.

    Readers run on other threads than the stream adding segments: :attr:`parts` is one pair
    ``(segments, their first rows)`` of tuples, replaced (never changed in place) when a
    segment is added or merged, so a reader always sees a consistent pair.

    :attr:`flat` is the payload of the one segment that holds every row so far (numeric
    rows), else None: a sample reply cuts an item's rows out of it with one attribute read
    instead of three objects' (on a big table each is a cache miss). It only ever covers rows
    that have arrived, and an item refers only to rows that arrived before it was stored, so
    a reader that sees an older payload still finds the item's rows in it.
    """

    __slots__ = ("parts", "flat", "end", "dtype", "row_shape", "row_nbytes", "_cache")

    def __init__(self, dtype: np.dtype, row_shape: tuple[int, ...]):
        self.parts: tuple[tuple[Segment, ...], tuple[int, ...]] = ((), ())
        self.flat: bytes | None = None
        self.end = 0
        self.dtype = dtype
        self.row_shape = row_shape
        self.row_nbytes = dtype.itemsize * math.prod(row_shape)
        self._cache: np.ndarray | None = None

    @property
    def segments(self) -> tuple[Segment, ...]:
        return self.parts[0]

    def add(self, seg: Segment) -> None:
        if seg.start != self.end:
            raise DecodeError(
                f"chunk {seg.key}: segment starts at row {seg.start}, expected {self.end}"
            )
        if seg.dtype != self.dtype or seg.row_shape != self.row_shape:
            raise DecodeError(f"chunk {seg.key}: segment dtype/shape differs from earlier segments")
        segs, starts = self.parts
        last = segs[-1] if segs else None
        if (
            last is not None
            and last.codec == seg.codec == RAW
            and self.dtype.kind != "O"  # a string segment's payload is one msgpack list
            and len(seg.payload) <= MERGE_SEGMENT_BYTES
            and len(last.payload) + len(seg.payload) <= MERGE_BYTES
        ):
            merged = _merged(last, seg)
            self.parts = (segs[:-1] + (merged,), starts)
            if len(segs) == 1:
                self.flat = merged.payload
        else:
            self.flat = seg.payload if not segs and self.dtype.kind != "O" else None
            self.parts = (segs + (seg,), starts + (seg.start,))
        self.end += seg.nrows

    def covering(self, offset: int, length: int) -> list[tuple[Segment, int, int]]:
        """Segments holding rows [offset, offset + length): (segment, local offset, rows)."""
        segs, starts = self.parts
        out = []
        i = bisect.bisect_right(starts, offset) - 1
        row, left = offset, length
        while left > 0:
            seg = segs[i]
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
        segs = self.parts[0]
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
            cache = np.concatenate([s.decode() for s in self.parts[0]])
            cache.flags.writeable = False
            self._cache = cache
        return cache

    @property
    def nbytes(self) -> int:
        """Bytes of the payloads held."""
        return sum(len(s.payload) for s in self.parts[0])


def _merged(a: Segment, b: Segment) -> Segment:
    """Raw segment ``b`` appended to raw segment ``a`` (its next rows) as one segment."""
    payload = b"".join((a.payload, b.payload))
    nrows = a.nrows + b.nrows
    raw = dict(a.raw, n=nrows, b=payload)
    return Segment(a.key, a.episode_id, a.start, nrows, a.dtype, a.row_shape, RAW, payload, raw)

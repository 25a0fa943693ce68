"""Encoding of Ostinato's wire messages: msgpack envelopes carrying raw tensor bytes.

Every RPC payload is one msgpack map (never pickle). Tensor data travels as *segments*: a run
of rows of one chunk, as raw little-endian C-order bytes (optionally zstd-compressed), with its
dtype and row shape. A writer sends each row once; the server stores segments as received and
sends the same bytes to samplers; only clients decode them.

Segment (map): ``k`` chunk key, ``e`` episode id, ``s`` first row, ``n`` rows, ``d`` dtype
string (numpy ``dtype.str``, or ``"O"`` for strings/bytes), ``h`` row shape, ``c`` codec
(0 raw, 1 zstd), ``b`` payload.

Decoding validates every field and raises :class:`DecodeError` (a ``ValueError``) on anything
malformed, so a hostile message can never crash the server.
"""

from __future__ import annotations

import dataclasses
import math
import threading
from typing import Any

import msgpack
import numpy as np

from ostinato.core.chunks import le_bytes
from ostinato.core.signature import MAX_DIMS
from ostinato.core.specs import dtype_from_str, dtype_to_str
from ostinato.errors import DecodeError
from ostinato.wire import prefaulted_copy

RAW = 0
ZSTD = 1
#: Segments smaller than this are never compressed.
COMPRESS_MIN_BYTES = 2048
#: Bytes test-compressed before compressing a large segment.
PROBE_BYTES = 4096


def pack(obj: Any) -> bytes:
    return msgpack.packb(obj, use_bin_type=True)


def unpack(data: bytes) -> Any:
    try:
        return msgpack.unpackb(data, raw=False, strict_map_key=False)
    except Exception as e:  # noqa: BLE001 - any parse failure is a malformed message
        raise DecodeError(f"malformed message ({type(e).__name__}: {e})") from None


# -- framed messages ----------------------------------------------------------------------------
#: A segment may instead carry ``m`` = ``[offset, length]`` of its rows in the writer's
#: shared-memory ring (see :mod:`ostinato.wire.shm`); such segments have no framed payload.
#: Framed message: ``FRAME_MAGIC``, the header's length (uint32 little-endian), a msgpack map
#: whose segments carry ``z`` (payload length) instead of ``b``, then the payloads in order.
#: Large tensor bytes are thus copied once into the message instead of through msgpack's
#: growing buffer. A msgpack map never starts with these bytes, so both forms are accepted.
FRAME_MAGIC = b"OSF1"


def pack_framed(body: dict, seg_field: str = "seg") -> bytes:
    """Packs ``body`` as a framed message, moving each segment's ``b`` payload out of the header
    (the segment dicts are modified)."""
    segs = body.get(seg_field) or []
    payloads = []
    for seg in segs:
        if "b" not in seg:  # rows in a shared-memory ring (``m``): nothing to frame
            continue
        b = seg.pop("b")
        seg["z"] = len(b)
        payloads.append(b)
    header = pack(body)
    return b"".join([FRAME_MAGIC, len(header).to_bytes(4, "little"), header, *payloads])


def unpack_framed(data: bytes, seg_field: str = "seg") -> Any:
    """Reads a framed or a plain msgpack message; segments get their ``b`` payloads back."""
    if data[:4] != FRAME_MAGIC:
        return unpack(data)
    if len(data) < 8:
        raise DecodeError("truncated framed message")
    hlen = int.from_bytes(data[4:8], "little")
    if hlen > len(data) - 8:
        raise DecodeError(f"framed message header of {hlen} bytes exceeds the message")
    body = unpack(data[8 : 8 + hlen])
    if not isinstance(body, dict):
        raise DecodeError("framed message header must be a map")
    segs = body.get(seg_field, [])
    if not isinstance(segs, list):
        raise DecodeError(f"field {seg_field!r} must be a list of segments")
    base = None
    off = 8 + hlen
    for seg in segs:
        if isinstance(seg, dict) and "m" in seg and "z" not in seg:
            continue  # rows in the writer's shared-memory ring, resolved by the server
        z = req(seg, "z", int, "segment")
        if not 0 <= z <= len(data) - off:
            raise DecodeError(f"segment payload of {z} bytes exceeds the message")
        if z >= prefaulted_copy.MIN_BYTES:
            if base is None:
                base = prefaulted_copy.address_of(data)
            seg["b"] = prefaulted_copy.copy_out(data, base, off, z)
        elif type(data) is bytes:
            seg["b"] = data[off : off + z]
        else:
            seg["b"] = bytes(memoryview(data)[off : off + z])
        del seg["z"]
        off += z
    if off != len(data):
        raise DecodeError(f"framed message has {len(data) - off} bytes after its segments")
    return body


# -- small validators ---------------------------------------------------------------------------
def req(msg: Any, key: str, typ: type | tuple[type, ...], what: str = "message") -> Any:
    if not isinstance(msg, dict):
        raise DecodeError(f"{what} must be a map, got {type(msg).__name__}")
    if key not in msg:
        raise DecodeError(f"{what} lacks field {key!r}")
    v = msg[key]
    if not isinstance(v, typ) or (typ is int and isinstance(v, bool)):
        raise DecodeError(f"{what} field {key!r} has type {type(v).__name__}")
    return v


def u64(v: Any, what: str) -> int:
    if not isinstance(v, int) or isinstance(v, bool) or not 0 <= v < 2**64:
        raise DecodeError(f"{what} must be an unsigned 64-bit integer, got {v!r}")
    return v


# -- shapes -------------------------------------------------------------------------------------
def shape_from_wire(h: Any) -> tuple[int, ...]:
    if not isinstance(h, list) or len(h) > MAX_DIMS:
        raise DecodeError(f"bad shape {h!r}")
    for d in h:
        if not isinstance(d, int) or isinstance(d, bool) or not 0 <= d < 2**31:
            raise DecodeError(f"bad shape {h!r}")
    return tuple(h)


# -- segments -----------------------------------------------------------------------------------
def encode_rows(rows: np.ndarray, compress: bool) -> tuple[int, bytes | memoryview]:
    """Returns (codec, payload) for rows of one chunk. A raw numeric payload of at least
    :data:`COMPRESS_MIN_BYTES` is a byte memoryview of ``rows`` (no copy): it must be packed
    before ``rows`` changes; smaller ones are ``bytes``."""
    payload: bytes | memoryview
    if rows.dtype.kind == "O":
        items = rows.reshape(-1).tolist()
        for x in items:
            if not isinstance(x, (bytes, str)):  # writers only store bytes (chunker.to_array)
                raise ValueError(f"object rows may hold only bytes or str, got {type(x).__name__}")
        payload = pack(items)
    elif rows.nbytes < COMPRESS_MIN_BYTES:
        # Small rows (a step's scalars and short vectors): one copy to bytes is cheaper than
        # a view, and never compressed.
        return RAW, le_bytes(rows)
    else:
        arr = np.ascontiguousarray(rows).astype(rows.dtype.newbyteorder("<"), copy=False)
        payload = memoryview(arr.reshape(-1)).cast("B")
    if compress and len(payload) >= COMPRESS_MIN_BYTES:
        # Probe a slice first: incompressible data (images of noise, already-compressed bytes)
        # is sent raw without paying for a full compression attempt.
        if len(payload) > 4 * PROBE_BYTES:
            probe = _zstd_compressor().compress(payload[:PROBE_BYTES])
            if len(probe) >= 0.9 * PROBE_BYTES:
                return RAW, payload
        z = _zstd_compressor().compress(payload)
        if len(z) < 0.9 * len(payload):
            return ZSTD, z
    return RAW, payload


def make_segment(
    key: int,
    episode_id: int,
    start: int,
    rows: np.ndarray,
    compress: bool,
    ring_ref: list[int] | None = None,
) -> dict:
    """A segment carrying ``rows`` inline (``b``), or, given ``ring_ref`` = ``[offset, length]``
    of raw rows already in the writer's shared-memory ring, referring to them (``m``)."""
    seg = {
        "k": key,
        "e": episode_id,
        "s": start,
        "n": int(rows.shape[0]),
        "d": dtype_to_str(rows.dtype),
        "h": list(rows.shape[1:]),
    }
    if ring_ref is not None:
        seg["c"], seg["m"] = RAW, ring_ref
    else:
        seg["c"], seg["b"] = encode_rows(rows, compress)
    return seg


@dataclasses.dataclass
class Segment:
    """A validated segment (payload still encoded)."""

    key: int
    episode_id: int
    start: int
    nrows: int
    dtype: np.dtype
    row_shape: tuple[int, ...]
    codec: int
    payload: bytes
    raw: dict  # the message as received, re-sent verbatim to samplers

    def decode(self) -> np.ndarray:
        return decode_payload(self.codec, self.payload, self.dtype, self.row_shape, self.nrows)


def parse_segment(m: Any, max_bytes: int) -> Segment:
    what = "segment"
    key = u64(req(m, "k", int, what), "chunk key")
    ep = u64(req(m, "e", int, what), "episode id")
    start = req(m, "s", int, what)
    n = req(m, "n", int, what)
    if not 0 <= start < 2**40 or not 1 <= n < 2**31:
        raise DecodeError(f"segment rows out of range (start {start}, rows {n})")
    dtype = dtype_from_str(req(m, "d", str, what))
    shape = shape_from_wire(req(m, "h", list, what))
    codec = req(m, "c", int, what)
    if codec not in (RAW, ZSTD):
        raise DecodeError(f"unknown codec {codec}")
    payload = req(m, "b", bytes, what)
    if len(payload) > max_bytes:
        raise DecodeError(f"segment of {len(payload)} bytes exceeds the limit of {max_bytes}")
    if codec == RAW and dtype.kind != "O":
        expect = n * dtype.itemsize * math.prod(shape)
        if len(payload) != expect:
            raise DecodeError(f"segment payload has {len(payload)} bytes, expected {expect}")
    return Segment(key, ep, start, n, dtype, shape, codec, payload, m)


#: Bytes charged per element of a string (object) segment that the server decodes to check it
#: (a Python ``bytes`` object and the list slot pointing at it).
OBJECT_ELEMENT_BYTES = 48


def declared_bytes(m: Any) -> int:
    """The bytes a segment will take once expanded, from what it declares, expanding nothing.

    Numbers: rows x dtype x row shape (what a zstd payload must inflate to, or what a
    shared-memory reference copies). Strings: the payload's size (as a zstd frame announces it,
    or its length; for a shared-memory reference, the length referenced) plus
    :data:`OBJECT_ELEMENT_BYTES` per element, the cost of decoding it to check it.

    Raises:
      DecodeError: a field needed for the size is malformed (or a compressed string segment
        does not announce its size).
    """
    what = "segment"
    n = req(m, "n", int, what)
    if not 1 <= n < 2**31:
        raise DecodeError(f"segment rows out of range (rows {n})")
    dtype = dtype_from_str(req(m, "d", str, what))
    elements = n * math.prod(shape_from_wire(req(m, "h", list, what)))
    if dtype.kind != "O":
        return elements * dtype.itemsize
    b, ref = m.get("b"), m.get("m")
    if isinstance(b, bytes):
        size = len(b)
        if m.get("c") == ZSTD:
            import zstandard

            try:
                size = zstandard.frame_content_size(b)
            except zstandard.ZstdError as e:
                raise DecodeError(f"corrupt compressed segment: {e}") from None
            if size < 0:
                raise DecodeError("a compressed string segment must announce its size")
    elif isinstance(ref, list) and len(ref) == 2 and type(ref[1]) is int and ref[1] >= 0:
        size = ref[1]
    else:
        size = 0  # no payload: parse_segment rejects it
    return size + elements * OBJECT_ELEMENT_BYTES


def check_strings(payload: bytes, count: int) -> None:
    """Checks that a raw string segment's payload decodes to exactly ``count`` elements, each
    ``bytes`` or ``str``, so that every client can decode what the server stores.

    The elements are decoded one at a time and dropped (nested containers are refused before
    they are built): the work is bounded by the payload, the memory by one element.

    Raises:
      DecodeError: the payload is not such a list.
    """
    u = msgpack.Unpacker(
        raw=False,
        max_array_len=0,
        max_map_len=0,
        max_ext_len=0,
        max_buffer_size=max(len(payload), 1),
        strict_map_key=False,
    )
    u.feed(payload)
    try:
        n = u.read_array_header()
        if n != count:
            raise DecodeError(f"string segment holds {n} elements, expected {count}")
        for i in range(n):
            x = u.unpack()
            if not isinstance(x, (bytes, str)):
                raise DecodeError(
                    f"string segment element {i} is a {type(x).__name__}, not bytes or str"
                )
        rest = len(payload) - u.tell()
    except DecodeError:
        raise
    except Exception as e:  # noqa: BLE001 - any parse failure is a malformed segment
        raise DecodeError(f"malformed string segment ({type(e).__name__}: {e})") from None
    if rest:
        raise DecodeError(f"string segment has {rest} bytes after its elements")


def safe_decompress(payload: bytes, expect: int | None, limit: int) -> bytes:
    """Decompresses a zstd frame without ever producing more than ``expect`` (or ``limit``)
    bytes: frames announcing a larger or unknown size are rejected before inflating."""
    import zstandard

    try:
        size = zstandard.frame_content_size(payload)
    except zstandard.ZstdError as e:
        raise DecodeError(f"corrupt compressed segment: {e}") from None
    bound = expect if expect is not None else limit
    if size < 0 or size > bound or (expect is not None and size != expect):
        raise DecodeError(
            f"compressed segment announces {size} bytes, expected "
            f"{'at most ' if expect is None else ''}{bound}"
        )
    try:
        out = _zstd_decompressor().decompress(payload, max_output_size=bound)
    except zstandard.ZstdError as e:
        raise DecodeError(f"corrupt compressed segment: {e}") from None
    if len(out) != size:
        raise DecodeError(f"compressed segment inflated to {len(out)} bytes, expected {size}")
    return out


def _expected_bytes(seg_dtype: np.dtype, nrows: int, row_shape: tuple[int, ...]) -> int | None:
    return None if seg_dtype.kind == "O" else nrows * seg_dtype.itemsize * math.prod(row_shape)


def to_raw(seg: Segment, limit: int = 2**31) -> Segment:
    """The segment with its payload decompressed (servers keep raw rows so that they can cut
    the rows a sample needs out of a segment without decoding anything)."""
    if seg.codec == RAW:
        return seg
    payload = safe_decompress(
        seg.payload, _expected_bytes(seg.dtype, seg.nrows, seg.row_shape), limit
    )
    raw = dict(seg.raw, c=RAW, b=payload)
    return Segment(
        seg.key, seg.episode_id, seg.start, seg.nrows, seg.dtype, seg.row_shape, RAW, payload, raw
    )


def decode_payload(
    codec: int,
    payload: bytes,
    dtype: np.dtype,
    row_shape: tuple[int, ...],
    nrows: int,
    limit: int = 2**31,
) -> np.ndarray:
    if codec == ZSTD:
        payload = safe_decompress(payload, _expected_bytes(dtype, nrows, row_shape), limit)
    if dtype.kind == "O":
        items = unpack(payload)
        if not isinstance(items, list) or len(items) != nrows * math.prod(row_shape):
            raise DecodeError("bad string segment")
        for x in items:
            if not isinstance(x, (bytes, str)):
                raise DecodeError(f"string segment holds a {type(x).__name__}, not bytes or str")
        arr = np.empty(len(items), dtype=object)
        arr[:] = [x.encode() if isinstance(x, str) else x for x in items]
        return arr.reshape((nrows, *row_shape))
    try:
        arr = np.frombuffer(payload, dtype=dtype.newbyteorder("<"))
        return arr.reshape((nrows, *row_shape)).astype(dtype.newbyteorder("="), copy=False)
    except ValueError as e:
        raise DecodeError(f"segment payload does not match its dtype/shape: {e}") from None


#: zstandard's compressor and decompressor objects must not be used by two threads at once (a
#: server encodes samples on several RPC threads, a client decodes on several sampler workers:
#: a shared one produced corrupt frames, "Destination buffer is too small"); one per thread.
_zstd_local = threading.local()


def _zstd_compressor() -> Any:
    c = getattr(_zstd_local, "c", None)
    if c is None:
        import zstandard

        c = _zstd_local.c = zstandard.ZstdCompressor(level=1)
    return c


def _zstd_decompressor() -> Any:
    d = getattr(_zstd_local, "d", None)
    if d is None:
        import zstandard

        d = _zstd_local.d = zstandard.ZstdDecompressor()
    return d

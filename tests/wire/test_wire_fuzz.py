"""Fuzzing of the wire codec (``ostinato.wire.codec``).

* Round trips: row segments of random dtypes/shapes (strings too, compressed or not),
  signatures and table info survive encode -> msgpack -> decode unchanged.
* Decoders fed random or mutated input raise only ``DecodeError`` (a ``ValueError``).

The service fed hostile requests over gRPC is fuzzed in ``test_wire_service_fuzz.py``.
"""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest
from _wire_strategies import FAST, NUMERIC, SEG_KEYS, mp_values
from hypothesis import example, given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import ostinato as reverb
from ostinato.core.signature import signature_from_data, signature_to_data
from ostinato.errors import DecodeError
from ostinato.wire import codec, protocol


@st.composite
def row_arrays(draw):
    """(rows, expected decoded rows): a chunk's rows of a random dtype and row shape."""
    kind = draw(st.sampled_from(NUMERIC + ["str", "bytes"]))
    big = draw(st.booleans())  # big arrays are mostly one value: they take the zstd path
    nrows = draw(st.integers(1, 700 if big else 5))
    row_shape = draw(
        hnp.array_shapes(
            min_dims=0, max_dims=3, min_side=0 if not big else 1, max_side=3 if big else 4
        )
    )
    shape = (nrows, *row_shape)
    if kind in ("str", "bytes"):
        elems = st.text(max_size=6) if kind == "str" else st.binary(max_size=6)
        rows = draw(hnp.arrays(object, shape, elements=elems, fill=elems))
        expect = np.empty(rows.shape, dtype=object)
        expect.reshape(-1)[:] = [x.encode() if isinstance(x, str) else x for x in rows.reshape(-1)]
        return rows, expect
    dt = np.dtype(kind)
    rows = draw(hnp.arrays(dt, shape))
    return rows, rows.astype(dt.newbyteorder("="))


signature_specs = st.builds(
    reverb.TensorSpec,
    st.lists(st.none() | st.integers(0, 2**31 - 1), max_size=4),
    st.sampled_from(["float32", "float64", "int8", "int64", "uint16", "bool", "complex64", object]),
    st.none() | st.text(max_size=6),
)

signatures = st.recursive(
    signature_specs | st.none(),
    lambda ch: (
        st.dictionaries(st.text(max_size=4), ch, max_size=3)
        | st.lists(ch, max_size=3)
        | st.lists(ch, max_size=3).map(tuple)
    ),
    max_leaves=8,
)


def _same_nest(a, b):
    """Equality that also tells tuples from lists and compares dtype objects exactly."""
    assert type(a) is type(b), (a, b)
    if isinstance(a, dict):
        assert list(a) == list(b)
        for k in a:
            _same_nest(a[k], b[k])
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            _same_nest(x, y)
    else:
        assert a == b


# -- round trips -----------------------------------------------------------------------------------
@FAST
@given(
    data=row_arrays(),
    compress=st.booleans(),
    key=st.integers(0, 2**64 - 1),
    episode=st.integers(0, 2**64 - 1),
    start=st.integers(0, 2**40 - 1),
)
def test_segment_round_trip(data, compress, key, episode, start):
    rows, expect = data
    seg = codec.make_segment(key, episode, start, rows, compress)
    if not compress:
        assert seg["c"] == codec.RAW
    wire = codec.pack({"seg": [seg]})
    m = codec.unpack(wire)["seg"][0]
    parsed = codec.parse_segment(m, max_bytes=len(wire))
    assert (parsed.key, parsed.episode_id, parsed.start, parsed.nrows) == (
        key,
        episode,
        start,
        rows.shape[0],
    )
    assert parsed.row_shape == rows.shape[1:]
    out = parsed.decode()
    assert out.shape == rows.shape
    assert out.dtype == expect.dtype
    if expect.dtype.kind == "O":
        assert out.reshape(-1).tolist() == expect.reshape(-1).tolist()
    else:
        assert out.tobytes() == expect.tobytes()  # bit-exact (NaN payloads, -0.0)


@pytest.mark.parametrize(
    "rows",
    [
        np.arange(8, dtype=np.float32).reshape(1, 8),  # small: sent as one bytes copy
        np.arange(6, dtype=">i4").reshape(3, 2),  # big-endian
        np.arange(32, dtype=np.float64).reshape(4, 8)[:, ::2],  # strided
        np.asfortranarray(np.arange(12, dtype=np.int16).reshape(3, 4)),  # Fortran order
        np.arange(4096, dtype=">f4").reshape(2, 2048)[:, ::2],  # large, strided, big-endian
    ],
    ids=["small", "big-endian", "strided", "fortran", "large-strided-big-endian"],
)
def test_raw_segments_are_little_endian_c_order_rows(rows):
    c, payload = codec.encode_rows(rows, compress=False)
    assert c == codec.RAW
    assert bytes(payload) == np.ascontiguousarray(rows, rows.dtype.newbyteorder("<")).tobytes()


def test_compressible_segments_are_compressed_and_round_trip():
    for rows in (
        np.zeros((500, 4), np.float32),
        np.full((300, 2), 7, ">i8"),
        np.array([[b"abc" * 50]] * 100, dtype=object),
    ):
        seg = codec.make_segment(1, 2, 0, rows, compress=True)
        assert seg["c"] == codec.ZSTD
        parsed = codec.parse_segment(codec.unpack(codec.pack(seg)), 1 << 20)
        out = parsed.decode()
        assert out.shape == rows.shape
        assert out.reshape(-1).tolist() == rows.reshape(-1).tolist()


@FAST
@given(sig=signatures)
def test_signature_round_trip(sig):
    encoded = signature_to_data(sig)
    decoded = signature_from_data(codec.unpack(codec.pack(encoded)))
    _same_nest(decoded, sig)


_SELECTORS = [
    lambda: reverb.selectors.Uniform(),
    lambda: reverb.selectors.Fifo(),
    lambda: reverb.selectors.Lifo(),
    lambda: reverb.selectors.MaxHeap(),
    lambda: reverb.selectors.MinHeap(),
]


@FAST
@given(
    sampler=st.sampled_from(_SELECTORS)
    | st.floats(0, 1).map(lambda e: lambda: reverb.selectors.Prioritized(e)),
    remover=st.sampled_from(_SELECTORS),
    limiter=st.sampled_from(
        [
            lambda: reverb.rate_limiters.MinSize(3),
            lambda: reverb.rate_limiters.Queue(7),
            lambda: reverb.rate_limiters.Stack(7),
            lambda: reverb.rate_limiters.SampleToInsertRatio(1.5, 10, 5.0),
        ]
    ),
    max_times_sampled=st.integers(0, 5),
    sig=st.none()
    | st.dictionaries(st.text(min_size=1, max_size=4), signature_specs, min_size=1, max_size=3),
)
def test_table_info_round_trip(sampler, remover, limiter, max_times_sampled, sig):
    table = reverb.Table(
        "t",
        sampler(),
        remover(),
        100,
        limiter(),
        max_times_sampled=max_times_sampled,
        signature=sig,
    )
    info = table.info
    decoded = protocol.decode_table_info(codec.unpack(codec.pack(protocol.encode_table_info(info))))
    assert decoded == info


def test_table_info_round_trip_with_live_counters():
    table = reverb.Table(
        "live",
        reverb.selectors.Prioritized(0.7),
        reverb.selectors.Fifo(),
        3,
        reverb.rate_limiters.MinSize(1),
        signature={"x": reverb.TensorSpec([None, 2], np.float32, "x")},
    )
    with reverb.Server([table]) as server:
        client = server.localhost_client()
        for i in range(5):
            client.insert({"x": np.zeros((1, 2), np.float32) + i}, {"live": 1.0})
        list(client.sample("live", 4))
        info = table.info
        assert info.current_size == 3 and info.rate_limiter_info.insert_stats.completed == 5
        decoded = protocol.decode_table_info(
            codec.unpack(codec.pack(protocol.encode_table_info(info)))
        )
        assert decoded == info


# -- decoders fed garbage --------------------------------------------------------------------------
@FAST
@given(raw=st.binary(max_size=300))
def test_unpack_random_bytes(raw):
    try:
        codec.unpack(raw)
    except DecodeError:
        pass


def test_unpack_hostile_nesting_and_truncation():
    for raw in (
        b"\x91" * 200_000 + b"\xc0",
        b"\xdd\xff\xff\xff\xff",
        b"\xdb\xff\xff\xff\xff",
        b"\xc6\xff\xff\xff\xffab",
        b"\xdf\xff\xff\xff\xff\x01",
    ):
        with pytest.raises(DecodeError):
            codec.unpack(raw)


@FAST
@given(raw=st.binary(max_size=300))
def test_unpack_framed_random_bytes(raw):
    for data in (raw, codec.FRAME_MAGIC + raw):
        try:
            codec.unpack_framed(data)
        except DecodeError:
            pass


@FAST
@given(
    sizes=st.lists(st.integers(0, 3000), max_size=5),
    cut=st.integers(1, 64),
    extra=st.binary(min_size=1, max_size=8),
)
def test_framed_round_trip_and_truncation(sizes, cut, extra):
    rows = [np.arange(n, dtype=np.uint8) for n in sizes]
    segs = [
        codec.make_segment(
            i, 0, 0, r.reshape(-1, 1) if r.size else np.zeros((1, 0), np.uint8), compress=False
        )
        for i, r in enumerate(rows)
    ]
    body = {"seg": segs, "t": ["x"], "i": []}
    msg = codec.pack_framed(body)
    back = codec.unpack_framed(msg)
    assert [bytes(s["b"]) for s in back["seg"]] == [r.tobytes() for r in rows]
    assert back["t"] == ["x"]
    for seg in back["seg"]:
        codec.parse_segment(seg, 2**20)
    with pytest.raises(DecodeError):
        codec.unpack_framed(msg[:-cut] if len(msg) - cut > 8 else msg[:7])
    with pytest.raises(DecodeError):
        codec.unpack_framed(msg + extra)


def test_plain_msgpack_messages_still_accepted():
    seg = codec.make_segment(1, 2, 0, np.arange(4, dtype=np.float32).reshape(2, 2), compress=False)
    back = codec.unpack_framed(codec.pack({"seg": [seg]}))
    assert back["seg"][0]["b"] == np.arange(4, dtype=np.float32).tobytes()


@st.composite
def mutated_segments(draw):
    rows = draw(
        st.sampled_from(
            [
                np.arange(6, dtype=np.float32).reshape(3, 2),
                np.array([b"a", b"bc"], dtype=object),
                np.zeros((600, 2), np.int64),
            ]
        )
    )
    seg = codec.make_segment(5, 6, 0, rows, compress=draw(st.booleans()))
    for _ in range(draw(st.integers(1, 3))):
        field = draw(st.sampled_from(SEG_KEYS + ["x"]))
        if draw(st.booleans()) and field in seg:
            del seg[field]
        else:
            seg[field] = draw(
                mp_values
                | st.sampled_from(["<f4", "O", "|b1", ">c16", "V8", "M8", "U3", "<f4,<f4"])
                | st.binary(max_size=4096)
            )
    return codec.unpack(codec.pack(seg))


def _check_decoded(parsed):
    try:
        out = parsed.decode()
    except DecodeError:
        return
    assert out.shape == (parsed.nrows, *parsed.row_shape)
    assert out.dtype == parsed.dtype.newbyteorder("=")


@FAST
@given(m=mutated_segments() | mp_values)
def test_parse_segment_rejects_cleanly(m):
    try:
        parsed = codec.parse_segment(m, max_bytes=1 << 20)
    except DecodeError:
        return
    _check_decoded(parsed)


@FAST
@given(
    codec_id=st.sampled_from([codec.RAW, codec.ZSTD]),
    payload=st.binary(max_size=200),
    zstd_wrap=st.booleans(),
    dtype=st.sampled_from(NUMERIC + ["O"]),
    row_shape=hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=3),
    nrows=st.integers(1, 4),
)
def test_decode_payload_rejects_cleanly(codec_id, payload, zstd_wrap, dtype, row_shape, nrows):
    if codec_id == codec.ZSTD and zstd_wrap:  # a valid frame around arbitrary content
        payload = codec._zstd_compressor().compress(payload)
    try:
        out = codec.decode_payload(codec_id, payload, np.dtype(dtype), row_shape, nrows)
    except DecodeError:
        return
    assert out.shape == (nrows, *row_shape)


@FAST
@given(
    m=mp_values
    | st.dictionaries(
        st.sampled_from(["spec", "dict", "tuple", "list"]), mp_values, min_size=1, max_size=1
    )
)
@example(m={"dict": 5})
@example(m={"dict": [[[1], None]]})
@example(m={"tuple": 3})
def test_decode_nest_rejects_cleanly(m):
    try:
        signature_from_data(m)
    except DecodeError:
        pass


@FAST
@given(m=mp_values)
@example(m={"name": "t", "sampler": 5, "remover": 5, "rl": [0] * 7})
@example(m={"name": "t", "sampler": {"which": "prioritized", "exp": None}, "rl": [0] * 7})
def test_decode_table_info_rejects_cleanly(m):
    try:
        protocol.decode_table_info(m)
    except DecodeError:
        pass


def test_parse_segment_rejects_shape_whose_size_overflows():
    seg = {"k": 1, "e": 1, "s": 0, "n": 1, "d": "<f4", "h": [2**30, 2**30, 16], "c": 0, "b": b""}
    with pytest.raises(DecodeError):
        codec.parse_segment(seg, 1 << 20)


def test_decode_payload_zstd_bomb_is_rejected_before_inflating():
    bomb = codec._zstd_compressor().compress(b"\0" * (64 << 20))
    assert len(bomb) < 1 << 16
    tracemalloc.start()
    try:
        with pytest.raises(DecodeError):
            codec.decode_payload(codec.ZSTD, bomb, np.dtype("<f4"), (), 1)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 8 << 20, f"decoding a 4-byte segment allocated {peak} bytes"

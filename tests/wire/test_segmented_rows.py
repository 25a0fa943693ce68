"""SegmentedRows: a chunk's rows as a remote writer sent them. Small consecutive raw segments
are merged (a sample reply then cuts an item's rows out of one payload); big ones and string
segments are kept as they came; every reader sees the same rows either way."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ostinato.wire import codec, protocol
from ostinato.wire.rows import MERGE_BYTES, MERGE_SEGMENT_BYTES, SegmentedRows


def _segment(rows: np.ndarray, start: int, compress: bool = False) -> codec.Segment:
    m = codec.make_segment(7, 3, start, rows, compress=compress)
    return codec.to_raw(codec.parse_segment(codec.unpack(codec.pack(m)), 2**31))


def _fill(data: SegmentedRows, pieces: list[np.ndarray]) -> None:
    start = 0
    for p in pieces:
        data.add(_segment(p, start))
        start += len(p)


@settings(max_examples=60, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 40), min_size=1, max_size=30),
    width=st.sampled_from([1, 8, 300]),
    cut=st.data(),
)
def test_every_reader_sees_the_rows_sent(sizes, width, cut):
    rows = np.arange(sum(sizes) * width, dtype=np.float32).reshape(-1, width)
    data = SegmentedRows(np.dtype(np.float32), (width,))
    pieces = np.split(rows, np.cumsum(sizes)[:-1])
    _fill(data, pieces)
    assert data.end == len(rows)
    assert data.nbytes == rows.nbytes
    np.testing.assert_array_equal(data.as_array(), rows)
    lo = cut.draw(st.integers(0, len(rows) - 1))
    hi = cut.draw(st.integers(lo + 1, len(rows)))
    np.testing.assert_array_equal(data.rows(lo, hi), rows[lo:hi])
    assert data.row_bytes(lo, hi) == rows[lo:hi].tobytes()
    covered = data.covering(lo, hi - lo)
    assert sum(n for _, _, n in covered) == hi - lo
    # The one payload a sample reply cuts rows from, while one segment holds every row.
    assert data.flat == (rows.tobytes() if len(data.segments) == 1 else None)
    for seg in data.segments:  # re-sent verbatim to samplers: each must parse on its own
        again = codec.parse_segment(seg.raw, 2**31)
        np.testing.assert_array_equal(again.decode(), rows[seg.start : seg.start + seg.nrows])


def test_small_segments_merge_big_ones_do_not():
    small = SegmentedRows(np.dtype(np.float32), (8,))
    _fill(small, [np.ones((3, 8), np.float32)] * 50)  # 96-byte segments
    assert len(small.segments) == 1
    big_row = MERGE_SEGMENT_BYTES // 4 + 1  # one row is more than a mergeable segment
    big = SegmentedRows(np.dtype(np.float32), (big_row,))
    _fill(big, [np.ones((1, big_row), np.float32)] * 3)
    assert len(big.segments) == 3
    capped = SegmentedRows(np.dtype(np.uint8), (1024,))
    _fill(capped, [np.ones((4, 1024), np.uint8)] * (2 * MERGE_BYTES // 4096))
    assert all(len(s.payload) <= MERGE_BYTES for s in capped.segments)
    assert len(capped.segments) == 2


def test_string_segments_are_not_merged():
    data = SegmentedRows(np.dtype(object), ())
    start = 0
    for words in (["a", "bb"], ["ccc"]):
        data.add(_segment(np.array(words, dtype=object), start))
        start += len(words)
        assert data.flat is None  # a string payload is not rows of bytes
    assert len(data.segments) == 2
    assert list(data.rows(0, 3)) == [b"a", b"bb", b"ccc"]  # strings travel as bytes


def test_a_gap_or_another_dtype_is_refused():
    data = SegmentedRows(np.dtype(np.float32), (2,))
    data.add(_segment(np.zeros((2, 2), np.float32), 0))
    with pytest.raises(protocol.DecodeError, match="starts at row 3, expected 2"):
        data.add(_segment(np.zeros((1, 2), np.float32), 3))
    with pytest.raises(protocol.DecodeError, match="differs"):
        data.add(_segment(np.zeros((1, 2), np.float64), 2))


def test_sampled_rows_are_cut_from_each_chunks_payload():
    """Over gRPC, chunks whose rows came in many requests hold one payload (``Chunk.raw``)
    that sample replies cut rows from; every sampled row is the one written."""
    import ostinato as reverb
    from ostinato.core import items as items_lib

    table = reverb.Table(
        "t",
        sampler=reverb.selectors.Uniform(),
        remover=reverb.selectors.Fifo(),
        max_size=1000,
        rate_limiter=reverb.rate_limiters.MinSize(1),
    )
    with reverb.Server([table]) as server:
        client = reverb.Client(f"localhost:{server.port}", in_process=False)
        with client.trajectory_writer(2) as w:
            for i in range(300):  # every step its own request: segments merged as they come
                w.append({"x": np.full(3, i, np.int32), "y": np.float64(i)})
                if i:
                    h = w.history
                    w.create_item("t", 1.0, {"x": h["x"][-1], "y": h["y"][-2:]})
                w.flush()
        stored = server.tables_by_name["t"]._slots
        chunks = {c for t in stored.traj if t is not None for c in items_lib.chunk_refs(t)}
        assert chunks and all(c.raw is not None for c in chunks)
        for c in chunks:
            assert c.raw == c.data.as_array().astype(c.data.dtype.newbyteorder("<")).tobytes()
        batch = client.sample_batch("t", batch_size=256, timeout=5.0)
        x, y = batch.data  # the columns in sorted key order (the table has no signature)
        np.testing.assert_array_equal(x, np.repeat(x[:, :1], 3, axis=1))
        np.testing.assert_array_equal(y[:, 1], x[:, 0])
        np.testing.assert_array_equal(y[:, 0], x[:, 0] - 1)

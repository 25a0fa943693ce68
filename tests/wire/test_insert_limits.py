"""What one Insert request may make the server allocate (docs/architecture.md: everything a client
sends is bounded before it is expanded), and what it may make the server store: compressed
segments are checked against ``max_inflated_bytes`` from their declared sizes before inflating,
and string segments are decoded and checked at insert, so nothing un-decodable is ever stored."""

from __future__ import annotations

import io

import grpc
import numpy as np
import psutil
import pytest
import zstandard
from _wire_util import QUEUE_CODE, SERVICE, grpc_client, wait_until

import ostinato as reverb
from ostinato.wire import codec
from server_process import ServerProcess

MB = 1 << 20


def _zero_frame(nbytes: int) -> bytes:
    """A zstd frame that announces and inflates to ``nbytes`` zeros (built without holding
    them: a few KB)."""
    out = io.BytesIO()
    zero = bytes(MB)
    with zstandard.ZstdCompressor(level=1).stream_writer(out, size=nbytes, closefd=False) as w:
        for _ in range(nbytes // MB):
            w.write(zero)
        w.write(bytes(nbytes % MB))
    return out.getvalue()


def _seg(key: int, d: str, h: list[int], c: int, b: bytes, n: int = 1) -> dict:
    return {"k": key, "e": 0, "s": 0, "n": n, "d": d, "h": h, "c": c, "b": b}


def _insert(
    port: int, segs: list[dict], items: list, keep: list[int] | None = None, more: list[bytes] = ()
) -> list:
    msg = codec.pack_framed({"seg": segs, "t": ["q"], "i": items, "keep": keep or []})
    with grpc.insecure_channel(f"localhost:{port}") as ch:
        call = ch.stream_stream(SERVICE + "Insert")
        return list(call(iter([msg, *more]), timeout=20))


def test_zstd_bomb_is_refused_before_inflating():
    """D3: three 64 MiB zero segments in a ~20 KB request; the server inflated all of them
    (1 GiB segments took it to 3.1 GB RSS). Now refused from the declared sizes."""
    frame = _zero_frame(64 * MB)
    assert len(frame) < 64 * 1024
    code = QUEUE_CODE.format(size=10) + "\nSERVER_KWARGS = {'max_message_bytes': 8 << 20}\n"
    with ServerProcess(code) as srv:
        proc = psutil.Process(srv.proc.pid)
        rss0 = proc.memory_info().rss
        segs = [_seg(k, "|u1", [64 * MB], codec.ZSTD, frame) for k in (1, 2, 3)]
        items = [[0, k, 1.0, [[k, 0, 1]], [True]] for k in (1, 2, 3)]
        with pytest.raises(grpc.RpcError) as e:
            _insert(srv.port, segs, items)
        assert e.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, e.value
        assert "max_inflated_bytes (67108864)" in e.value.details()
        assert proc.memory_info().rss - rss0 < 48 * MB
        c = grpc_client(srv.address)
        try:  # still serving, and a request under the limit (one such segment) is stored
            one = _seg(1, "|u1", [64 * MB], codec.ZSTD, frame)  # (packing consumed segs)
            assert _insert(srv.port, [one], items[:1]) == [codec.pack({"n": 1})]
            c.insert(np.zeros(3), {"q": 1.0})
            assert c.server_info()["q"].current_size == 2
        finally:
            c.close()


def test_limits_name_the_option_and_bound_what_a_stream_holds():
    server = reverb.Server([reverb.Table.queue("q", 100)], max_inflated_bytes=MB)
    try:
        assert server.max_inflated_bytes == MB
        big = _seg(1, "|u1", [MB + 1], codec.ZSTD, _zero_frame(MB + 1))
        with pytest.raises(grpc.RpcError) as e:
            _insert(server.port, [big], [[0, 1, 1.0, [[1, 0, 1]], [True]]])
        assert e.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "max_inflated_bytes (1048576)" in e.value.details()
        # Rows kept for later items add up per stream: 4 x the limit at most.
        part = 900 * 1024
        msgs = [
            codec.pack_framed(
                {
                    "seg": [_seg(k, "|u1", [part], codec.RAW, bytes(part))],
                    "t": ["q"],
                    "i": [],
                    "keep": list(range(1, k + 1)),
                }
            )
            for k in range(1, 7)
        ]
        with pytest.raises(grpc.RpcError) as e:
            with grpc.insecure_channel(f"localhost:{server.port}") as ch:
                list(ch.stream_stream(SERVICE + "Insert")(iter(msgs), timeout=20))
        assert e.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "4 x max_inflated_bytes (1048576)" in e.value.details()
        # The stream's handler ends just after the client hears its status.
        wait_until(lambda: server.service.streams.active_streams == 0, 10, "the stream to end")
        with pytest.raises(ValueError, match="max_inflated_bytes"):
            reverb.Server([reverb.Table.queue("z", 1)], max_inflated_bytes=10)
    finally:
        server.stop()


@pytest.mark.parametrize(
    "payload, match",
    [
        (codec.pack([1, 2]), "element 0 is a int"),
        (codec.pack([b"a", [b"b"]]), "malformed string segment"),
        (codec.pack([b"a"]), "holds 1 elements, expected 2"),
        (codec.pack([b"a", b"b"]) + b"\0", "bytes after its elements"),
        (b"\xff\x00garbage", "malformed string segment"),
    ],
)
def test_undecodable_string_segments_are_refused_at_insert(payload, match):
    """D4: object segments were stored without being decoded; every later sample that picked
    such an item failed on the client with DecodeError. Now refused at insert."""
    server = reverb.Server([reverb.Table.queue("q", 100)])
    c = grpc_client(f"localhost:{server.port}")
    try:
        c.insert([np.array([b"ok", b"fine"], dtype=object)], {"q": 1.0})
        seg = _seg(5, "O", [2], codec.RAW, payload)
        with pytest.raises(grpc.RpcError) as e:
            _insert(server.port, [seg], [[0, 5, 1.0, [[5, 0, 1]], [True]]])
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT, e.value
        assert match in e.value.details()
        s = next(c.sample("q", emit_timesteps=False))  # only the good item is there
        assert list(np.asarray(s.data[0]).reshape(-1)) == [b"ok", b"fine"]
        assert c.server_info()["q"].current_size == 0
    finally:
        c.close()
        server.stop()


def test_compressed_string_segments_are_checked_too():
    server = reverb.Server([reverb.Table.queue("q", 100)])
    try:
        z = zstandard.ZstdCompressor().compress(codec.pack([7] * 1000))
        seg = _seg(5, "O", [1000], codec.ZSTD, z)
        with pytest.raises(grpc.RpcError) as e:
            _insert(server.port, [seg], [[0, 5, 1.0, [[5, 0, 1]], [True]]])
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        good = zstandard.ZstdCompressor().compress(codec.pack([b"x" * 10] * 1000))
        assert _insert(
            server.port,
            [_seg(6, "O", [1000], codec.ZSTD, good)],
            [[0, 6, 1.0, [[6, 0, 1]], [True]]],
        ) == [codec.pack({"n": 1})]
    finally:
        server.stop()

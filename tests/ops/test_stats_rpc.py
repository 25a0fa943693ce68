"""The Stats call: malformed requests and replies, tokens, servers without it (older ones), and
the values of a sharded set (merged, and per shard)."""

from __future__ import annotations

import socket

import grpc
import msgpack
import numpy as np
import pytest
from _ops_util import STATS, serve_without_stats
from hypothesis import given, settings
from hypothesis import strategies as st

import ostinato as reverb
from ostinato.errors import DecodeError
from ostinato.ops import stats as ops_stats
from ostinato.wire import protocol


def _raw(address, payload, metadata=()):
    with grpc.insecure_channel(address) as ch:
        try:
            return grpc.StatusCode.OK, ch.unary_unary(STATS)(payload, timeout=10, metadata=metadata)
        except grpc.RpcError as e:
            return e.code(), e.details()


@pytest.fixture(scope="module")
def live():
    server = reverb.Server([reverb.Table.queue("q", 10)])
    server.localhost_client().insert(np.ones(3), {"q": 1.0})
    yield server
    server.stop()


@pytest.mark.parametrize(
    "payload",
    [
        b"",
        b"\xc1",
        b"garbage that is not msgpack \xff\xfe",
        msgpack.packb([1, 2, 3]),
        msgpack.packb(7),
        msgpack.packb("a string"),
        b"OSF1\x00\x00\x00\x00",
    ],
)
def test_malformed_stats_requests_are_refused_and_change_nothing(live, payload):
    before = live.metrics()["tables"]
    code, details = _raw(f"localhost:{live.port}", payload)
    assert code == grpc.StatusCode.INVALID_ARGUMENT, details
    after = live.metrics()
    assert after["tables"] == before
    assert after["server"]["requests"]["Stats"]["INVALID_ARGUMENT"] >= 1


def test_a_map_with_unknown_fields_is_answered(live):
    code, raw = _raw(f"localhost:{live.port}", msgpack.packb({"future": [1, 2], "x": {}}))
    assert code == grpc.StatusCode.OK
    reply = protocol.parse_stats_reply(msgpack.unpackb(raw))
    assert reply["tables"]["q"]["size"] == 1
    # ... and the server keeps serving everyone else
    client = reverb.Client(f"localhost:{live.port}", in_process=False, unavailable_timeout=5)
    try:
        assert client.metrics()["tables"]["q"]["size"] == 1
        assert client.server_info()["q"].current_size == 1
    finally:
        client.close()


_scalar = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**63), 2**63 - 1),
    st.floats(allow_nan=True),
    st.text(max_size=5),
)
_good = _scalar
for _ in range(2):  # maps nested twice (the reader allows a few levels, not any depth)
    _good = st.one_of(_scalar, st.dictionaries(st.text(max_size=4), _good, max_size=4))


@settings(max_examples=100, deadline=None)
@given(st.dictionaries(st.text(max_size=5), _good, max_size=4), _good)
def test_well_formed_replies_are_read_back_as_sent(tables, extra):
    msg = {"server": {"x": extra}, "tables": {k: {"v": v} for k, v in tables.items()}}
    assert protocol.parse_stats_reply(msgpack.unpackb(msgpack.packb(msg))) is not None


@pytest.mark.parametrize(
    "reply",
    [
        None,
        [],
        {"server": {}},
        {"tables": {}},
        {"server": [], "tables": {}},
        {"server": {}, "tables": {"t": {1: 2}}},
        {"server": {"b": b"bytes"}, "tables": {}},
        {"server": {"l": ["a"]}, "tables": {}},
        {"server": {"d": {"d": {"d": {"d": {"d": {"d": {"d": 1}}}}}}}, "tables": {}},
    ],
)
def test_malformed_replies_raise_decode_error(reply):
    with pytest.raises(DecodeError):
        protocol.parse_stats_reply(reply)


def test_stats_needs_the_token(make_server):
    server = make_server(reverb.Table.queue("q", 10), token="s3cret")
    address = f"localhost:{server.port}"
    code, _ = _raw(address, msgpack.packb({}))
    assert code == grpc.StatusCode.UNAUTHENTICATED
    code, _ = _raw(address, msgpack.packb({}), metadata=(("authorization", "Bearer s3cret"),))
    assert code == grpc.StatusCode.OK
    with reverb.Client(address, in_process=False, unavailable_timeout=5) as bad:
        with pytest.raises(reverb.errors.FailedPreconditionError):
            bad.metrics()
    with reverb.Client(address, in_process=False, token="s3cret") as good:
        req = good.metrics()["server"]["requests"]["Stats"]
    assert req == {"UNAUTHENTICATED": 2, "OK": 1}


@pytest.fixture()
def old_server(make_server):
    """An address served by a gRPC server that lacks the Stats method (an older Ostinato)."""
    real = make_server(reverb.Table.queue("q", 10))
    real.localhost_client().insert(np.ones(2), {"q": 1.0})
    gs, address = serve_without_stats(real)
    yield address
    gs.stop(0)


def test_a_server_without_stats_is_described_from_server_info(old_server):
    with reverb.Client(old_server, unavailable_timeout=5) as client:
        with pytest.raises(reverb.errors.UnimplementedError):
            client.transport.metrics(reverb.core.deadline.Deadline.after(5))
        m = client.metrics()
    assert m["source"] == "server_info"
    t = m["tables"]["q"]
    assert (t["size"], t["inserts"], t["max_size"]) == (1, 1, 10)
    assert t["blocked_inserters"] is None and t["insert_blocked_seconds"] is None
    assert m["server"] == {}


def test_sharded_values_are_merged_and_kept_per_shard(make_server):
    def table():
        return reverb.Table(
            "t",
            reverb.selectors.Uniform(),
            reverb.selectors.Fifo(),
            100,
            reverb.rate_limiters.MinSize(1),
        )

    a, b = make_server(table()), make_server(table())
    for server, n in ((a, 3), (b, 5)):
        c = server.localhost_client()
        for i in range(n):
            c.insert(np.float32(i), {"t": 1.0})
        list(c.sample("t", num_samples=n))
    addresses = [f"localhost:{a.port}", f"localhost:{b.port}"]
    for in_process in (None, False):
        with reverb.Client(addresses, in_process=in_process, unavailable_timeout=5) as client:
            m = client.metrics()
        t = m["tables"]["t"]
        assert (t["size"], t["inserts"], t["samples"], t["max_size"]) == (8, 8, 8, 200)
        assert t["shards"] == 2 and t["diff"] is None and t["sampled_per_item"] == 1.0
        assert t["blocked_inserters"] == 0
        assert [s["address"] for s in m["shards"]] == addresses
        assert [s["tables"]["t"]["size"] for s in m["shards"]] == [3, 5]
        assert [s["tables"]["t"]["diff"] for s in m["shards"]] == [0.0, 0.0]
        assert m["server"]["chunks"] == sum(s["server"]["chunks"] for s in m["shards"])
        assert m["server"]["chunk_bytes"] == a.chunk_store.num_bytes + b.chunk_store.num_bytes


def test_a_shard_that_does_not_answer_is_reported_and_left_out(make_server):
    a = make_server(reverb.Table.queue("q", 10))
    a.localhost_client().insert(np.ones(1), {"q": 1.0})
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"localhost:{s.getsockname()[1]}"
    with reverb.Client([f"localhost:{a.port}", dead], unavailable_timeout=0.5) as client:
        m = client.metrics(timeout=2)
    assert m["tables"]["q"]["size"] == 1
    assert "error" in m["shards"][1] and m["shards"][1]["address"] == dead
    with reverb.Client(dead, unavailable_timeout=0.3) as client:
        with pytest.raises(reverb.errors.UnavailableError):
            client.metrics(timeout=1)


def test_merge_takes_the_stalest_checkpoint_and_the_youngest_uptime():
    def shard(up, last, saves):
        return {
            "source": "stats",
            "tables": {},
            "server": {
                "uptime_seconds": up,
                "chunks": 1,
                "chunk_bytes": 10,
                "writer_streams": 0,
                "rings_mapped": 0,
                "ring_streams": 0,
                "ring_bytes": 0,
                "requests": {"Sample": {"OK": 2}},
                "received_bytes": {"Sample": 5},
                "sent_bytes": {},
                "checkpoint": {"last_time": last, "saves": saves, "failures": 0},
            },
        }

    m = ops_stats.merge(
        [shard(100.0, 50.0, 1), shard(10.0, 40.0, 2), {"address": "x", "error": "down"}]
    )
    s = m["server"]
    assert s["uptime_seconds"] == 10.0 and s["chunk_bytes"] == 20
    assert s["checkpoint"]["last_time"] == 40.0 and s["checkpoint"]["saves"] == 3
    assert s["requests"] == {"Sample": {"OK": 4}} and s["received_bytes"] == {"Sample": 10}
    never = ops_stats.merge([shard(1.0, None, 0), shard(1.0, 40.0, 1)])
    assert never["server"]["checkpoint"]["last_time"] is None  # one shard never saved

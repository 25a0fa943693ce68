"""Item groups in Insert requests: runs of alike items as arrays (``ostinato.wire.item_groups``).

A group stores exactly what the same items sent one by one store; every malformed group is
refused with INVALID_ARGUMENT (or NOT_FOUND for an unknown table) and stores nothing; the
server keeps serving. Raw requests over real gRPC to an in-process server.
"""

from __future__ import annotations

import grpc
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ostinato as reverb
from ostinato.wire import codec
from ostinato.wire.item_groups import item_group

SIG = {"a": reverb.TensorSpec([2], np.float32), "b": reverb.TensorSpec([], np.int32)}


@pytest.fixture(scope="module")
def live():
    tables = [
        reverb.Table(
            name,
            reverb.selectors.Fifo(),
            reverb.selectors.Fifo(),
            10_000,
            reverb.rate_limiters.MinSize(1),
            signature=sig,
        )
        for name, sig in (("plain", None), ("copy", None), ("sig", SIG))
    ] + [
        reverb.Table(
            "prio",
            reverb.selectors.Prioritized(1.0),
            reverb.selectors.Fifo(),
            10_000,
            reverb.rate_limiters.MinSize(1),
        )
    ]
    server = reverb.Server(tables)
    channel = grpc.insecure_channel(f"localhost:{server.port}")
    yield server, channel
    channel.close()
    server.stop()


def _send(channel, msgs):
    call = channel.stream_stream("/ostinato.Replay/Insert")(
        iter([codec.pack_framed(m) for m in msgs]), timeout=5
    )
    acks = []
    try:
        for r in call:
            acks.append(codec.unpack(r)["n"])
    except grpc.RpcError as e:
        return acks, e.code(), e.details()
    return acks, grpc.StatusCode.OK, ""


A_KEY, B_KEY = 11, 12


def _segments(n=8):
    a = np.arange(2 * n, dtype=np.float32).reshape(n, 2)
    b = np.arange(n, dtype=np.int32)
    return [
        codec.make_segment(A_KEY, 5, 0, a, False),
        codec.make_segment(B_KEY, 5, 0, b, False),
    ]


def _items(n, key0, table=0, prio=1.0):
    """n flat items of columns (a[i], b[i]), squeezed."""
    return [[table, key0 + i, prio, [[A_KEY, i, 1], [B_KEY, i, 1]], [True, True]] for i in range(n)]


def _as_group(items):
    ti = items[0][0]
    return item_group(
        ti,
        items[0][4],
        np.array([it[1] for it in items], np.uint64),
        np.array([it[2] for it in items], np.float64),
        np.array([[it[3][c][0] for it in items] for c in range(2)], np.uint64),
        np.array([[it[3][c][1] for it in items] for c in range(2)], np.int64),
        np.array([[it[3][c][2] for it in items] for c in range(2)], np.int64),
    )


def _msg(entries, tables=("plain",)):
    return {"seg": _segments(), "t": list(tables), "i": entries, "keep": []}


def _contents(server, name):
    t = server.tables_by_name[name]
    out = []
    for k in t.keys().tolist():
        e = t.get(k)
        cols = [
            np.concatenate([c.data.as_array()[o : o + n] for c, o, n in col]).tobytes()
            for col in __import__("ostinato").core.items.columns(e["trajectory"])
        ]
        out.append((e["priority"], tuple(cols), e["squeeze"]))
    return sorted(out)


def test_group_stores_what_single_items_store(live):
    server, channel = live
    items = _items(6, 1000)
    acks, code, _ = _send(channel, [_msg(items, ("copy",))])
    assert code == grpc.StatusCode.OK and sum(acks) == 6
    mixed = [items[0], _as_group(items[1:5]), items[5]]  # order: single, group, single
    acks, code, _ = _send(channel, [_msg(mixed)])
    assert code == grpc.StatusCode.OK and sum(acks) == 6
    assert _contents(server, "plain") == _contents(server, "copy")
    assert sorted(server.tables_by_name["plain"].keys().tolist()) == list(range(1000, 1006))
    for name in ("plain", "copy"):
        server.tables_by_name[name].reset()


def _mutations():
    g = _as_group(_items(4, 2000))
    bad = []
    for field, value in (
        ("n", 5),
        ("n", 0),
        ("n", "4"),
        ("g", 7),
        ("g", None),
        ("sq", []),
        ("sq", [True]),
        ("k", g["k"][:-8]),
        ("p", b"x"),
        ("c", np.array([[99] * 4, [B_KEY] * 4], np.uint64).tobytes()),  # unknown chunk
        ("o", np.array([[0, 1, 2, 30], [0] * 4], np.int64).tobytes()),  # past the rows
        ("o", np.array([[0, 1, 2, -1], [0] * 4], np.int64).tobytes()),
        ("l", np.array([[1, 1, 2, 1], [1] * 4], np.int64).tobytes()),  # squeezed, 2 rows
        ("l", np.array([[1, 1, 0, 1], [1] * 4], np.int64).tobytes()),
        ("p", np.array([1, 1, np.nan, 1], np.float64).tobytes()),
    ):
        m = dict(g)
        m[field] = value
        bad.append(m)
    return bad


@pytest.mark.parametrize("group", _mutations())
def test_malformed_groups_store_nothing(live, group):
    server, channel = live
    before = {n: len(t) for n, t in server.tables_by_name.items()}
    # A valid item first: the message is refused whole.
    acks, code, details = _send(channel, [_msg([_items(1, 1)[0], group])])
    assert code == grpc.StatusCode.INVALID_ARGUMENT, (code, details)
    assert acks == []
    assert {n: len(t) for n, t in server.tables_by_name.items()} == before


def test_group_signature_and_priorities_checked(live):
    server, channel = live
    g = _as_group(_items(4, 3000))
    acks, code, details = _send(channel, [_msg([g], ("sig",))])
    assert code == grpc.StatusCode.OK, details  # a: f32[2], b: i32 -- the signature's
    g2 = dict(g)
    g2["c"] = np.array([[B_KEY] * 4, [A_KEY] * 4], np.uint64).tobytes()  # columns swapped
    _, code, details = _send(channel, [_msg([g2], ("sig",))])
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "sig" in details
    neg = _as_group(_items(4, 4000, prio=-1.0))
    _, code, details = _send(channel, [_msg([neg], ("prio",))])
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "negative" in details
    assert len(server.tables_by_name["prio"]) == 0
    server.tables_by_name["sig"].reset()


@settings(
    max_examples=60,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    field=st.sampled_from(["n", "g", "sq", "k", "p", "c", "o", "l", "extra"]),
    value=st.none()
    | st.integers(-3, 2**64 - 1)
    | st.binary(max_size=70)
    | st.text(max_size=3)
    | st.lists(st.booleans(), max_size=3),
)
def test_group_fuzz_is_refused_cleanly_or_stored_whole(live, field, value):
    server, channel = live
    g = _as_group(_items(4, 5000))
    g[field] = value
    before = len(server.tables_by_name["plain"])
    acks, code, details = _send(channel, [_msg([g])])
    assert code in {grpc.StatusCode.OK, grpc.StatusCode.INVALID_ARGUMENT}, (code, details)
    after = len(server.tables_by_name["plain"])
    assert after - before == (sum(acks) if code == grpc.StatusCode.OK else 0)
    server.tables_by_name["plain"].reset()


def test_writer_items_arrive_once(live):
    """A writer's runs of items (sent as groups) arrive each once, with their data."""
    server, _ = live
    client = reverb.Client(f"localhost:{server.port}", in_process=False)
    with client.trajectory_writer(1) as w:
        for i in range(500):
            w.append({"a": np.full(2, i, np.float32), "b": np.int32(i)})
            w.create_item("sig", 1.0, {"a": w.history["a"][-1], "b": w.history["b"][-1]})
    assert len(server.tables_by_name["sig"]) == 500
    got = sorted(
        int(np.frombuffer(cols[1], np.int32)[0]) for _, cols, _ in _contents(server, "sig")
    )
    assert got == list(range(500))
    server.tables_by_name["sig"].reset()
    client.close()

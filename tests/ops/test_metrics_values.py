"""Server.metrics() / Client.metrics() after known operations: counters, sizes, bytes, who is
blocked by the rate limiter and for how long, requests and checkpoints (no Prometheus needed)."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

import ostinato as reverb
from _helpers import wait_until
from ostinato.ops.metrics import client_metrics


def _table(server, name):
    return server.metrics()["tables"][name]


def _store_bytes(server):
    return sum(c.nbytes for c in server.chunk_store.chunks())


def _ratio_table(name="t"):
    # 3 inserts are admitted before any sample; the 4th waits ((3 + 1) * 1 - 0 > max_diff 3).
    return reverb.Table(
        name,
        reverb.selectors.Fifo(),
        reverb.selectors.Fifo(),
        100,
        reverb.rate_limiters.SampleToInsertRatio(1.0, 2, (0.0, 3.0)),
    )


class _Timed(threading.Thread):
    def __init__(self, fn):
        super().__init__(daemon=True)
        self.fn, self.error, self.t0, self.t1 = fn, None, None, None

    def run(self):
        self.t0 = time.monotonic()
        try:
            self.fn()
        except BaseException as e:  # noqa: BLE001
            self.error = e
        self.t1 = time.monotonic()


def test_counters_sizes_and_bytes_after_known_operations(make_server):
    server = make_server(
        reverb.Table(
            "u",
            reverb.selectors.Uniform(),
            reverb.selectors.Fifo(),
            5,
            reverb.rate_limiters.MinSize(1),
        )
    )
    client = server.localhost_client()
    with client.trajectory_writer(2) as w:
        for i in range(8):
            w.append({"obs": np.full(4, i, np.float32), "a": np.int64(i)})
            w.create_item("u", 1.0, {"obs": w.history["obs"][-1], "a": w.history["a"][-1]})
        w.end_episode()
    list(client.sample("u", num_samples=7))
    t = _table(server, "u")
    assert (t["size"], t["max_size"], t["inserts"], t["samples"], t["deletes"]) == (5, 5, 8, 7, 3)
    assert t["sampled_per_item"] == pytest.approx(7 / 8)
    assert t["diff"] == pytest.approx(8 * 1.0 - 7)
    assert 1 <= t["unique_samples"] <= 5
    assert (t["episodes"], t["deleted_episodes"]) == (1, 0)
    assert (t["sampler"], t["remover"]) == ("uniform", "fifo")
    assert t["blocked_inserters"] == t["blocked_samplers"] == 0
    assert t["insert_blocked_seconds"] == t["sample_blocked_seconds"] == 0.0
    s = server.metrics()["server"]
    assert s["chunks"] == len(server.chunk_store) > 0
    assert s["chunk_bytes"] == _store_bytes(server) > 0
    client.reset("u")
    assert server.metrics()["server"]["chunk_bytes"] == 0 == _store_bytes(server)


def test_blocked_inserter_is_counted_while_it_waits_and_for_as_long(make_server):
    server = make_server(_ratio_table())
    client = server.localhost_client()
    for i in range(3):
        client.insert(np.float32(i), {"t": 1.0})
    assert _table(server, "t")["blocked_inserters"] == 0
    th = _Timed(lambda: client.insert(np.float32(3), {"t": 1.0}, timeout=30))
    th.start()
    wait_until(lambda: _table(server, "t")["blocked_inserters"] == 1, what="a blocked inserter")
    time.sleep(0.4)
    t = _table(server, "t")
    assert t["blocked_inserters"] == 1 and t["blocked_samplers"] == 0
    assert t["insert_blocked_seconds"] >= 0.4  # counts the wait still going on
    assert t["insert_blocked_seconds"] <= time.monotonic() - th.t0
    next(client.sample("t"))  # makes room: the insert goes in
    th.join(10)
    assert th.error is None and not th.is_alive()
    t = _table(server, "t")
    assert t["blocked_inserters"] == 0
    assert t["inserts"] == 4
    waited = th.t1 - th.t0  # the whole call: a little more than its wait
    assert waited - 0.3 <= t["insert_blocked_seconds"] <= waited
    # Finished waits no longer grow.
    before = t["insert_blocked_seconds"]
    time.sleep(0.1)
    assert _table(server, "t")["insert_blocked_seconds"] == before


def test_blocked_samplers_are_counted_and_timed(make_server):
    server = make_server(
        reverb.Table(
            "m",
            reverb.selectors.Uniform(),
            reverb.selectors.Fifo(),
            100,
            reverb.rate_limiters.MinSize(3),
        )
    )
    client = server.localhost_client()
    threads = [_Timed(lambda: next(client.sample("m", timeout=30))) for _ in range(2)]
    for th in threads:
        th.start()
    wait_until(lambda: _table(server, "m")["blocked_samplers"] == 2, what="2 blocked samplers")
    time.sleep(0.3)
    assert _table(server, "m")["sample_blocked_seconds"] >= 0.6  # two calls, 0.3 s each
    for i in range(3):
        client.insert(np.float32(i), {"m": 1.0})
    for th in threads:
        th.join(10)
        assert th.error is None
    t = _table(server, "m")
    assert t["blocked_samplers"] == 0 and t["blocked_inserters"] == 0
    total = sum(th.t1 - th.t0 for th in threads)
    assert total - 0.5 <= t["sample_blocked_seconds"] <= total


def test_remote_writer_and_sampler_blocked_over_grpc(make_server):
    server = make_server(_ratio_table())
    address = f"localhost:{server.port}"
    client = reverb.Client(address, in_process=False, unavailable_timeout=5)
    try:
        w = client.trajectory_writer(1)
        for i in range(5):
            w.append({"x": np.float32(i)})
            w.create_item("t", 1.0, {"x": w.history["x"][-1]})
        # The server's side of the stream waits for the limiter (in slices of 0.5 s).
        wait_until(lambda: _table(server, "t")["blocked_inserters"] == 1, what="blocked stream")
        time.sleep(0.6)
        m = client.metrics()
        t = m["tables"]["t"]
        assert t["blocked_inserters"] == 1 and t["insert_blocked_seconds"] >= 0.5
        assert m["server"]["writer_streams"] == 1
        assert client_metrics()[address]["pending"] == 2
        for _ in range(2):
            list(client.sample("t", num_samples=1))
        w.flush(timeout_ms=10_000)
        assert _table(server, "t")["blocked_inserters"] == 0
        assert client_metrics()[address]["pending"] == 0
        w.close()
        # A sampler kept waiting by the limiter: 5 inserts, 2 samples taken, 3 allowed.
        list(client.sample("t", num_samples=3))
        th = _Timed(lambda: list(client.sample("t", num_samples=1, timeout=30)))
        th.start()
        wait_until(lambda: _table(server, "t")["blocked_samplers"] == 1, what="remote sampler")
        client.insert(np.float32(9), {"t": 1.0})
        th.join(10)
        assert th.error is None
        s = client.metrics()["server"]
        assert s["requests"]["Sample"]["OK"] >= 4
        assert s["requests"]["Insert"]["OK"] >= 2
        assert s["received_bytes"]["Insert"] > 0 and s["sent_bytes"]["Sample"] > 0
        assert s["sent_bytes"]["Insert"] > 0  # the acknowledgements
    finally:
        client.close()


def test_failed_requests_are_counted_by_status(make_server):
    server = make_server(reverb.Table.queue("q", 10))
    client = reverb.Client(f"localhost:{server.port}", in_process=False, unavailable_timeout=5)
    try:
        with pytest.raises(reverb.errors.TableNotFoundError):
            client.reset("nope")
        with pytest.raises(reverb.errors.DeadlineExceededError):
            next(client.sample("q", timeout=0.05))
        client.reset("q")
        req = client.metrics()["server"]["requests"]
        assert req["Sample"] == {"DEADLINE_EXCEEDED": 1}
        assert req["Reset"] == {"NOT_FOUND": 1, "OK": 1}
        assert "Stats" not in req  # a call is counted once it has answered
        assert client.metrics()["server"]["requests"]["Stats"] == {"OK": 1}
    finally:
        client.close()


def test_chunk_bytes_follow_remote_chunks_that_grow_and_local_chunks_that_are_trimmed(make_server):
    server = make_server(
        reverb.Table(
            "u",
            reverb.selectors.Uniform(),
            reverb.selectors.Fifo(),
            50,
            reverb.rate_limiters.MinSize(1),
        )
    )
    rng = np.random.default_rng(0)
    local = server.localhost_client()
    remote = reverb.Client(f"localhost:{server.port}", in_process=False, unavailable_timeout=5)
    try:
        for client in (local, remote):
            for episode in range(3):
                with client.trajectory_writer(3, max_chunk_length=8) as w:
                    for i in range(int(rng.integers(1, 30))):
                        w.append({"obs": rng.standard_normal(3).astype(np.float32)})
                        if i >= 2:
                            w.create_item("u", 1.0, {"obs": w.history["obs"][-3:]})
                        if rng.random() < 0.3:
                            w.flush()
                    w.end_episode()
                assert server.metrics()["server"]["chunk_bytes"] == _store_bytes(server), episode
        local.delete("u", server.tables_by_name["u"].keys()[:10])
        assert server.metrics()["server"]["chunk_bytes"] == _store_bytes(server)
    finally:
        remote.close()


def test_checkpoint_duration_size_and_age(tmp_path, make_server):
    ckpt = reverb.checkpointers.DefaultCheckpointer(str(tmp_path / "c"))
    server = make_server(reverb.Table.queue("q", 10), checkpointer=ckpt)
    c0 = server.metrics()["server"]["checkpoint"]
    assert c0["saves"] == 0 and c0["age_seconds"] is None and c0["restore_path"] is None
    client = server.localhost_client()
    client.insert(np.zeros(100, np.float32), {"q": 1.0})
    path = client.checkpoint()
    time.sleep(0.05)  # an age to measure (the save itself is done when checkpoint() returns)
    c = server.metrics()["server"]["checkpoint"]
    files = [p for p in __import__("pathlib").Path(path).rglob("*") if p.is_file()]
    assert c["saves"] == 1 and c["failures"] == 0 and c["last_path"] == path
    assert c["last_bytes"] == sum(p.stat().st_size for p in files) > 400
    assert 0 < c["last_seconds"] < 30
    assert 0.05 <= c["age_seconds"] < 30
    server.stop()
    again = make_server(
        reverb.Table.queue("q", 10),
        checkpointer=reverb.checkpointers.DefaultCheckpointer(str(tmp_path / "c")),
    )
    c = again.metrics()["server"]["checkpoint"]
    assert c["restore_path"] == path and c["restore_seconds"] > 0


def test_in_process_latency_is_measured_for_items_held_back_only(make_server):
    server = make_server(_ratio_table("lat"))
    client = server.localhost_client()
    address = f"localhost:{server.port}"
    before = client_metrics().get(address, {"requests": 0, "confirmed": 0})
    with client.trajectory_writer(1) as w:
        for i in range(5):  # 3 go in at once; 2 wait for samples
            w.append({"x": np.float32(i)})
            w.create_item("lat", 1.0, {"x": w.history["x"][-1]})
        w.flush(block_until_num_items=2, timeout_ms=10_000)  # the writer's batch goes in
        assert client_metrics()[address]["pending"] == 2
        time.sleep(0.2)
        list(client.sample("lat", num_samples=2))
        w.flush(timeout_ms=10_000)
    m = client_metrics()[address]
    assert m["pending"] == 0
    assert m["confirmed"] - before["confirmed"] == 2
    lat = m["latency"]
    assert lat["count"] == m["requests"] >= 1
    assert lat["sum"] >= 0.2


def test_grpc_writer_confirmation_latency_per_request(make_server):
    server = make_server(reverb.Table.queue("q", 1000))
    address = f"localhost:{server.port}"
    client = reverb.Client(address, in_process=False, unavailable_timeout=5)
    try:
        before = client_metrics().get(address, {"requests": 0, "confirmed": 0})
        with client.trajectory_writer(1) as w:
            for i in range(50):
                w.append({"x": np.float32(i)})
                w.create_item("q", 1.0, {"x": w.history["x"][-1]})
            w.flush()
        m = client_metrics()[address]
        assert m["confirmed"] - before["confirmed"] == 50
        assert 1 <= m["requests"] - before["requests"] <= 50
        lat = m["latency"]
        assert lat["count"] == m["requests"] and lat["sum"] > 0
        assert len(lat["counts"]) == len(lat["bounds"]) + 1
    finally:
        client.close()


def test_closing_a_writer_while_its_held_back_items_go_in(make_server, monkeypatch):
    """close() empties the in-process writer's queue while its thread is inserting a batch:
    the thread must not then take the batch off the (now empty) queue (IndexError before)."""
    failures = []
    monkeypatch.setattr(threading, "excepthook", lambda args: failures.append(args.exc_value))
    server = make_server(_ratio_table("c"))
    client = server.localhost_client()
    w = client.trajectory_writer(1)
    for i in range(5):  # 3 go in; 2 wait in the writer's thread for the limiter
        w.append({"x": np.float32(i)})
        w.create_item("c", 1.0, {"x": w.history["x"][-1]})
    wait_until(lambda: _table(server, "c")["blocked_inserters"] == 1, what="the writer's thread")
    # close() empties the queue, then waits for the thread, whose insert goes through
    # meanwhile (a sampler makes room 0.1 s later).
    sampler = threading.Timer(0.1, lambda: list(client.sample("c", num_samples=2)))
    sampler.start()
    w.close()
    sampler.join(10)
    assert _table(server, "c")["blocked_inserters"] == 0
    assert failures == []

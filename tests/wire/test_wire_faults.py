"""Faults with real processes on localhost: several client processes at once, clients killed
with SIGKILL in the middle of a stream, servers stopped or killed while clients block on a rate
limiter, servers restarted on the same port, connections cut, thousands of short-lived
connections. Nothing may hang (every wait here is bounded), no stored item may be lost or
duplicated, and the server must leak neither threads nor chunks."""

from __future__ import annotations

import collections
import gc
import os
import signal
import threading
import time

import numpy as np
import psutil
import pytest
from _wire_util import (
    QUEUE_CODE,
    SAMPLER,
    WRITER,
    Blocked,
    Child,
    Proxy,
    drain_ids,
    grpc_client,
    ids_from_lines,
    wait_until,
    writing,
)

import ostinato as reverb
from ostinato.errors import CancelledError, UnavailableError
from server_process import ServerProcess


def writer_ids(wid, n):
    return [wid * 1_000_000 + i for i in range(n)]


def _rpc_threads():
    return [t for t in threading.enumerate() if t.name.startswith("ostinato-rpc")]


def _other_threads():
    return sorted(
        t.name
        for t in threading.enumerate()
        if not t.name.startswith("ostinato-rpc") and t.is_alive()
    )


def _count(cls_name):
    gc.collect()
    return sum(1 for o in gc.get_objects() if type(o).__name__ == cls_name)


# -- several client processes at once -------------------------------------------------------------
def test_concurrent_writer_and_sampler_processes_deliver_every_item_once(tmp_path):
    n_writers, n_items = 3, 150
    with ServerProcess(QUEUE_CODE.format(size=40)) as srv:
        flag = tmp_path / "writers-done"
        samplers = [Child(SAMPLER, srv.address, "q", flag) for _ in range(2)]
        writers = [Child(WRITER, srv.address, "q", w, n_items, 25, 8) for w in range(n_writers)]
        try:
            for w in writers:
                assert w.finish(60) == 0, w.stderr_tail()
            flag.touch()
            for s in samplers:
                assert s.finish(30) == 0, s.stderr_tail()
        finally:
            for c in samplers + writers:
                c.kill()
        per_sampler = [ids_from_lines(s.lines) for s in samplers]
        got = [i for ids in per_sampler for i in ids]
        expect = [i for w in range(n_writers) for i in writer_ids(w, n_items)]
        assert len(got) == len(set(got)), "an item was delivered twice"
        assert sorted(got) == expect, "items were lost"
        for ids in per_sampler:  # a queue hands each writer's items out in order
            for w in range(n_writers):
                mine = [i for i in ids if i // 1_000_000 == w]
                assert mine == sorted(mine)
        assert grpc_client(srv.address).server_info(timeout=5)["q"].current_size == 0


# -- a client killed mid-stream --------------------------------------------------------------------
def test_client_killed_mid_stream_leaks_nothing_and_loses_no_confirmed_item():
    server = reverb.Server([reverb.Table.queue("big", 100_000), reverb.Table.queue("small", 5)])
    writers = []
    try:
        address = f"localhost:{server.port}"
        client = grpc_client(address)
        client.server_info(timeout=5)  # warm up
        base_other = _other_threads()
        base_segments = _count("SegmentedRows")
        # A streams into "big" forever; B fills "small" and then blocks on its rate limiter.
        a = Child(WRITER, address, "big", 1, 0, 10, 16)
        b = Child(WRITER, address, "small", 2, 100, 1, 16)
        writers = [a, b]
        a.wait_line(
            lambda ln: ln.startswith("FLUSHED") and int(ln.split()[1]) >= 40, 30, "40 flushed items"
        )
        b.wait_line(lambda ln: ln == "FLUSHED 5", 30, "5 flushed items")
        wait_until(lambda: server.service.active_streams == 2, 60, "both streams open")
        wait_until(
            lambda: server.metrics()["tables"]["small"]["blocked_inserters"] >= 1,
            30,
            "B's sixth item to reach the server and block there",
        )
        assert len(server.tables_by_name["small"]) == 5
        confirmed = max(int(ln.split()[1]) for ln in a.lines if ln.startswith("FLUSHED"))
        for w in writers:
            os.kill(w.proc.pid, signal.SIGKILL)
        for w in writers:
            w.kill()
        # The server notices both dead streams (B's handler was waiting on the rate limiter).
        wait_until(lambda: server.service.active_streams == 0, 60, "dead streams to end")
        busy = len(_rpc_threads())
        assert busy <= 8, f"{busy} rpc threads"
        # No thread this test started stays (threads of earlier tests may end meanwhile).
        wait_until(
            lambda: not collections.Counter(_other_threads()) - collections.Counter(base_other),
            60,
            "threads back to baseline",
        )
        # Every confirmed item is there exactly once and in order; nothing else is.
        big = drain_ids(client, "big")
        assert big == writer_ids(1, len(big)) and len(big) >= confirmed
        assert drain_ids(client, "small") == writer_ids(2, 5)
        # All items consumed: no chunk stays referenced, no stream kept its rows.
        assert len(server.chunk_store) == 0
        assert _count("SegmentedRows") <= base_segments
        # And the server still serves everyone.
        client.insert(np.int64(7), {"small": 1.0}, timeout=5)
        assert next(client.sample("small", timeout=5))[0].data[0] == 7
        client.close()
    finally:
        for w in writers:
            w.kill()
        server.stop()


# -- the server stops while clients are blocked ----------------------------------------------------
def _block_everyone(address):
    """Starts one client of each blocking kind against a full "q" (size 2) and an empty "e"."""
    c = grpc_client(address, unavailable_timeout=1)
    c.insert(np.zeros(2), {"q": 1.0}, timeout=5)
    c.insert(np.zeros(2), {"q": 1.0}, timeout=5)

    def write_more():
        with writing(c, 1) as w:
            for _ in range(3):
                w.append({"x": np.zeros(2)})
                w.create_item("q", 1.0, {"x": w.history["x"][-1:]})
            w.flush()

    blocked = [
        Blocked("insert", lambda: c.insert(np.zeros(2), {"q": 1.0})),
        Blocked("sample", lambda: next(c.sample("e"))),
        Blocked("sample_batch", lambda: c.sample_batch("e", 4)),
        Blocked("writer", write_more),
    ]
    time.sleep(0.5)
    for b in blocked:
        assert b.thread.is_alive(), f"{b.name} did not block: {b.error!r}"
    return blocked


def _assert_woken(blocked, t0, address, limit):
    for b in blocked:
        b.join(limit + 2)
    for b in blocked:
        # CancelledError when the server's answer got through; otherwise the client retried for
        # its unavailable_timeout (1 s) and names the address.
        err = b.error
        if err is not None and not isinstance(err, (CancelledError, UnavailableError)):
            err = err.__cause__ or err.__context__
        assert isinstance(err, (CancelledError, UnavailableError)), (b.name, b.error)
        if isinstance(err, UnavailableError):
            assert address in str(err) and err.address == address, (b.name, err)
        assert b.ended_at - t0 < limit, (b.name, b.ended_at - t0)


def test_in_process_server_stop_wakes_blocked_grpc_clients():
    server = reverb.Server([reverb.Table.queue("q", 2), reverb.Table.queue("e", 10)])
    address = f"localhost:{server.port}"
    writer_child = None
    try:
        blocked = _block_everyone(address)
        writer_child = Child(WRITER, address, "q", 3, 10, 1, 4)
        # The blocked insert and writer of one client share an Insert stream; the child has one.
        wait_until(lambda: server.service.active_streams >= 2, 60, "child writer stream")
    finally:
        t0 = time.monotonic()
        server.stop()
    _assert_woken(blocked, t0, address, limit=1 + 2)
    assert writer_child.finish(15) != 0  # the child fails instead of hanging
    assert "Error" in writer_child.stderr_tail()
    with pytest.raises(UnavailableError, match=str(server.port)):
        grpc_client(address, unavailable_timeout=0.3).server_info()


@pytest.mark.parametrize("how", ["sigkill", "sigterm"])
def test_server_process_dying_wakes_blocked_clients_with_a_clear_error(how):
    srv = ServerProcess(QUEUE_CODE.format(size=2))
    try:
        blocked = _block_everyone(srv.address)
    finally:
        t0 = time.monotonic()
        srv.kill() if how == "sigkill" else srv.stop()
    _assert_woken(blocked, t0, srv.address, limit=1 + 2)


@pytest.mark.parametrize("where", ["in-process", "child-process"])
def test_server_stop_reports_cancelled_at_once(where):
    if where == "in-process":
        server = reverb.Server([reverb.Table.queue("q", 2), reverb.Table.queue("e", 10)])
        address, stop = f"localhost:{server.port}", server.stop
    else:
        srv = ServerProcess(QUEUE_CODE.format(size=2))
        address, stop = srv.address, srv.stop
    try:
        c = grpc_client(address, unavailable_timeout=1)
        c.insert(np.zeros(2), {"q": 1.0}, timeout=5)
        c.insert(np.zeros(2), {"q": 1.0}, timeout=5)
        blocked = [Blocked(f"sample{i}", lambda: next(c.sample("e"))) for i in range(3)]
        blocked += [
            Blocked(f"insert{i}", lambda: c.insert(np.zeros(2), {"q": 1.0})) for i in range(3)
        ]
        time.sleep(0.5)
    finally:
        t0 = time.monotonic()
        stop()
    for b in blocked:
        b.join(3)
    for b in blocked:
        assert isinstance(b.error, CancelledError) and b.ended_at - t0 < 1, (b.name, b.error)


# -- restarts --------------------------------------------------------------------------------------
def test_restart_on_same_port_client_reconnects_without_duplicates():
    code = QUEUE_CODE.format(size=1000)
    srv = ServerProcess(code)
    port, address = srv.port, srv.address
    client = grpc_client(address, unavailable_timeout=15)
    writer = client.trajectory_writer(1)
    srv2 = None
    try:

        def write(lo, hi):
            for i in range(lo, hi):
                writer.append({"id": np.int64(i)})
                writer.create_item("q", 1.0, {"id": writer.history["id"][-1:]})

        write(0, 5)
        writer.flush(timeout_ms=5000)
        assert client.server_info(timeout=5)["q"].current_size == 5
        srv.kill()
        # While it is down, a call fails with the address named (not a hang).
        t0 = time.monotonic()
        with pytest.raises(UnavailableError, match=address) as ei:
            grpc_client(address, unavailable_timeout=0.5).reset("q")
        assert ei.value.address == address and time.monotonic() - t0 < 3
        write(5, 8)  # written while the server is down: delivered after the restart
        srv2 = ServerProcess(code, port=port)
        write(8, 10)
        writer.flush(timeout_ms=15_000)
        # The new server lost what the old one held (no checkpoint), and got the rest once.
        assert client.server_info(timeout=5)["q"].current_size == 5
        fresh = grpc_client(address)
        assert [int(x) for x in drain_ids(fresh, "q")] == list(range(5, 10))
    finally:
        writer.close()
        srv.kill()
        if srv2 is not None:
            srv2.kill()


def _write_across_a_cut(proxy, client, n=10, cut_after=4):
    """Writes n one-step items; after item ``cut_after`` is confirmed, every connection is cut
    (the writer's current chunk then continues on a new stream)."""
    with writing(client, 1) as w:
        for i in range(n):
            w.append({"id": np.int64(i)})
            w.create_item("q", 1.0, {"id": w.history["id"][-1:]})
            if i == cut_after:
                w.flush(timeout_ms=5000)
                proxy.cut()
        w.flush(timeout_ms=10_000)


def test_connection_cut_without_unconfirmed_items_resumes_cleanly():
    server = reverb.Server([reverb.Table.queue("q", 1000)])
    proxy = Proxy(server.port)
    try:
        _write_across_a_cut(proxy, grpc_client(proxy.address))
        assert drain_ids(grpc_client(f"localhost:{server.port}"), "q", batch=1) == list(range(10))
    finally:
        proxy.close()
        server.stop()


def test_batch_mixing_items_from_before_and_after_a_reconnect():
    """After the cut the writer resends its open chunk under the same key as a new, longer
    Chunk; a batch holding items of both must point each item at its own chunk's rows."""
    server = reverb.Server([reverb.Table.queue("q", 1000)])
    proxy = Proxy(server.port)
    try:
        _write_across_a_cut(proxy, grpc_client(proxy.address))
        assert drain_ids(grpc_client(f"localhost:{server.port}"), "q", batch=64) == list(range(10))
    finally:
        proxy.close()
        server.stop()


def test_lost_confirmation_does_not_duplicate_items():
    server = reverb.Server([reverb.Table.queue("q", 1000)])
    proxy = Proxy(server.port)
    table = server.tables_by_name["q"]
    try:
        client = grpc_client(proxy.address, unavailable_timeout=10)
        w = client.trajectory_writer(1)
        try:
            for i in range(8):
                w.append({"id": np.int64(i)})
                w.create_item("q", 1.0, {"id": w.history["id"][-1:]})
                if i == 4:
                    w.flush(timeout_ms=5000)
                    proxy.drop_replies.set()  # items 5..7 arrive, their confirmation does not
            wait_until(lambda: len(table) == 8, 60, "the server to store 8 items")
            proxy.cut()
            proxy.drop_replies.clear()
            w.flush(timeout_ms=10_000)
        finally:
            w.close()
        assert drain_ids(grpc_client(f"localhost:{server.port}"), "q", batch=1) == list(range(8))
    finally:
        proxy.close()
        server.stop()


# -- many short-lived connections ------------------------------------------------------------------
CHURN = """
import sys, numpy as np, ostinato as reverb
addr, n = sys.argv[1], int(sys.argv[2])
for i in range(n):
    c = reverb.Client(addr, in_process=False, unavailable_timeout=5)
    if i % 4:
        c.server_info(timeout=5)
    else:
        c.insert(np.int64(i), {"q": 1.0}, timeout=5)
    c.close()
print("DONE", flush=True)
"""


SETTLE_S = 60.0
"""How long resources may take to return to baseline after a burst (a bound, not a wait)."""


def _thread_names(pid):
    """``{name: count}`` of a process's OS threads (Linux; empty elsewhere), for messages."""
    names: dict[str, int] = {}
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/comm") as f:
                name = f.read().strip()
            names[name] = names.get(name, 0) + 1
    except OSError:
        pass
    return names


def test_thousands_of_short_lived_connections():
    # A small RPC pool: its workers never exit (a ThreadPoolExecutor does not shrink) and under
    # load it grows towards its cap (the default 64: a run on a loaded 2-core machine ended with
    # 74 = 10 + 64 server threads), so the cap bounds what "near baseline" may mean. A handler
    # that a closed connection pinned would also show here: with 8 workers the churn would stall.
    pool = 8
    srv = ServerProcess(
        QUEUE_CODE.format(size=100_000) + f"SERVER_KWARGS = {{'max_workers': {pool}}}\n"
    )
    children = []
    try:
        proc = psutil.Process(srv.proc.pid)
        me = psutil.Process()
        grpc_client(srv.address).server_info(timeout=5)
        time.sleep(0.3)
        base = proc.num_threads(), proc.num_fds()
        children = [Child(CHURN, srv.address, 400) for _ in range(2)]
        my_base = threading.active_count(), me.num_fds()  # children's pipes included
        n_main = 1200
        for i in range(n_main):
            c = grpc_client(srv.address)
            if i % 10:
                c.server_info(timeout=5)
            else:
                c.insert(np.int64(i), {"q": 1.0}, timeout=5)
            c.close()
        for ch in children:
            assert ch.finish(60) == 0, ch.stderr_tail()
        total = grpc_client(srv.address).server_info(timeout=5)["q"].current_size
        assert total == n_main // 10 + 2 * 100
        # The property: nothing is kept per connection (2,000 of them here), so the server's
        # threads and fds return to near their baseline, whatever the load. Threads: at most
        # the RPC pool's idle workers (up to its cap) and 2 more; gRPC's own event-engine pool
        # also grows while the machine is loaded but reclaims a thread only after it has idled
        # for 20 s, so the wait is long (it ends as soon as the condition holds).
        wait_until(
            lambda: proc.num_threads() <= base[0] + pool + 2,
            SETTLE_S,
            lambda: (
                f"server threads ({proc.num_threads()}: {_thread_names(proc.pid)}) "
                f"near baseline ({base[0]} + {pool} pool workers + 2)"
            ),
        )
        wait_until(
            lambda: proc.num_fds() <= base[1] + 2,
            SETTLE_S,
            lambda: f"server fds ({proc.num_fds()}) back to baseline ({base[1]})",
        )
        # The client side (this process) leaks nothing either.
        wait_until(
            lambda: threading.active_count() <= my_base[0],
            SETTLE_S,
            lambda: f"client threads ({_other_threads()}) back to {my_base[0]}",
        )
        wait_until(
            lambda: me.num_fds() <= my_base[1] + 2,
            SETTLE_S,
            lambda: f"client fds ({me.num_fds()}) back to baseline ({my_base[1]})",
        )
    finally:
        for ch in children:
            ch.kill()
        srv.kill()

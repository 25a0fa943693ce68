"""Hung servers, dead clients and what they leave behind: every call has a deadline even when
the server stops answering without closing its connections; a blocked call of a client that
died does not take items meant for others; writers, streams and stopped servers leave no
threads; in-process readers can read what network writers wrote."""

from __future__ import annotations

import gc
import os
import signal
import threading
import time

import numpy as np
import pytest
from _wire_util import (
    QUEUE_CODE,
    Blocked,
    Child,
    drain_ids,
    grpc_client,
    wait_until,
    writing,
)

import ostinato as reverb
from _helpers import uniform_table
from ostinato.errors import ReverbError, UnavailableError
from server_process import ServerProcess


# -- hung servers: deadlines everywhere ------------------------------------------------------------
@pytest.fixture()
def frozen_server():
    """A server process that accepted our connection and then stopped answering (SIGSTOP),
    as a host that vanished without closing its sockets would."""
    before = set(threading.enumerate())
    srv = ServerProcess(QUEUE_CODE.format(size=10))
    client = grpc_client(srv.address, unavailable_timeout=1)
    client.server_info(timeout=5)  # the channel is connected
    os.kill(srv.proc.pid, signal.SIGSTOP)
    try:
        yield srv, client
    finally:
        os.kill(srv.proc.pid, signal.SIGCONT)
        srv.kill()
        # Calls stuck on the frozen server now fail over (after unavailable_timeout); let their
        # threads finish so that they do not run on into later tests.
        end = time.monotonic() + 8
        for t in set(threading.enumerate()) - before:
            t.join(max(0.0, end - time.monotonic()))


def test_call_without_deadline_does_not_hang_on_a_frozen_server(frozen_server):
    srv, client = frozen_server
    b = Blocked("reset", lambda: client.reset("q"))
    b.thread.join(6)
    assert not b.thread.is_alive(), "client.reset() still blocked 6 s after the server froze"
    assert isinstance(b.error, UnavailableError) and srv.address in str(b.error)


def test_insert_timeout_is_honoured_on_a_frozen_server(frozen_server):
    srv, client = frozen_server
    base = threading.active_count()
    t0 = time.monotonic()
    with pytest.raises(ReverbError):
        client.insert(np.zeros(2), {"q": 1.0}, timeout=1)
    assert time.monotonic() - t0 < 2.5
    wait_until(lambda: threading.active_count() <= base, 30, "writer threads to end")


def test_every_call_to_a_dead_address_fails_naming_it():
    srv = ServerProcess(QUEUE_CODE.format(size=10))
    address = srv.address
    srv.kill()
    c = grpc_client(address, unavailable_timeout=0.5)
    calls = {
        "server_info": lambda: c.server_info(),
        "insert": lambda: c.insert(np.zeros(2), {"q": 1.0}),
        "sample": lambda: next(c.sample("q")),
        "sample_batch": lambda: c.sample_batch("q", 2),
        "reset": lambda: c.reset("q"),
        "mutate_priorities": lambda: c.mutate_priorities("q", {1: 1.0}),
        "update_priorities": lambda: c.update_priorities("q", [1], [1.0]),
        "delete": lambda: c.delete("q", [1]),
        "create_item": lambda: _create_one_item(c),
    }
    t0 = time.monotonic()
    blocked = [Blocked(name, fn) for name, fn in calls.items()]
    for b in blocked:
        b.join(5)
        assert isinstance(b.error, UnavailableError), (b.name, b.error)
        assert address in str(b.error) and b.error.address == address, b.name
    assert time.monotonic() - t0 < 4


def _create_one_item(c):
    w = c.trajectory_writer(1)
    try:
        w.append({"x": np.zeros(2)})
        w.create_item("q", 1.0, {"x": w.history["x"][-1:]})  # validates against the server
    finally:
        w.close()


# -- mixed deployment: in-process readers of network-written data ----------------------------------
def test_in_process_client_samples_items_written_over_grpc():
    with reverb.Server([reverb.Table.queue("q", 100)]) as server:
        remote = grpc_client(f"localhost:{server.port}")
        with writing(remote, 1) as w:
            for i in range(3):
                w.append({"id": np.int64(i)})
                w.create_item("q", 1.0, {"id": w.history["id"][-1:]})
        local = server.localhost_client()
        got = local.sample_batch("q", 3, timeout=5)
        assert got.data[0].reshape(-1).tolist() == [0, 1, 2]


# -- threads and streams left behind ---------------------------------------------------------------
def _grpc_calls() -> set[int]:
    """ids of gRPC call objects alive or awaiting the garbage collector (streaming calls:
    ``_Rendezvous``, whose ``__del__`` takes the call's lock)."""
    import grpc._channel as channel

    # By exact type: isinstance on every object would run other libraries' ABC hooks.
    kinds = {
        c
        for c in vars(channel).values()
        if isinstance(c, type) and issubclass(c, channel._Rendezvous)
    }
    return {id(o) for o in gc.get_objects() if type(o) in kinds}


def test_a_closed_writer_leaves_no_grpc_call_to_the_garbage_collector():
    """A writer's Insert call, once over, is freed at once, not left in a reference cycle (the
    call is also the exception that ended it, and its traceback's frames refer to it). Left to
    the collector, it may be collected at the interpreter's exit, where gRPC's ``__del__``
    can wait forever for a lock that a daemon thread stopped by the exit holds: a script
    that never ends (the ingestion CLI did, about once in 300 exits under load)."""
    with reverb.Server([reverb.Table.queue("q", 100)]) as server:
        gc.collect()
        before = _grpc_calls()
        gc.disable()  # only reference counting frees anything from here
        try:
            client = grpc_client(f"localhost:{server.port}")
            w = client.trajectory_writer(1)
            for i in range(3):
                w.append({"id": np.int64(i)})
                w.create_item("q", 1.0, {"id": w.history["id"][-1]})
            w.flush()
            w.close()  # its last writer gone: the stream cancels its call
            client.close()
            del w, client
            left = _grpc_calls() - before
        finally:
            gc.enable()
        assert not left, f"{len(left)} gRPC call(s) left for the garbage collector"


def _idle_close_seconds():
    from ostinato.wire import writer_stream as wire_client

    return getattr(wire_client, "IDLE_CLOSE_SECONDS", 2.0)


def test_abandoned_writers_do_not_pin_server_threads():
    """TrajectoryWriter.__exit__ only flushes (as Reverb's, which closed in __del__): writers
    used as ``with client.trajectory_writer(...)`` and dropped must still give back their
    stream, their client threads and the server worker thread each stream holds; otherwise
    max_workers of them would make the server stop answering everyone."""
    # Writer threads of earlier tests (e.g. retrying against servers they stopped) are not ours.
    before = {t for t in threading.enumerate() if t.name.startswith("ostinato-insert")}
    server = reverb.Server([reverb.Table.queue("q", 100)], max_workers=4)
    try:
        address = f"localhost:{server.port}"

        def write_one():
            c = grpc_client(address, unavailable_timeout=0.5)
            with c.trajectory_writer(1) as w:
                w.append({"x": np.int64(1)})
                w.create_item("q", 1.0, {"x": w.history["x"][-1:]})

        for _ in range(4):
            write_one()
        gc.collect()
        limit = _idle_close_seconds() + 3
        wait_until(lambda: server.service.active_streams == 0, limit, "abandoned streams to end")
        assert grpc_client(address).server_info(timeout=5)["q"].current_size == 4
        wait_until(
            lambda: (
                not [
                    t
                    for t in threading.enumerate()
                    if t.name.startswith("ostinato-insert") and t not in before
                ]
            ),
            3,
            "the abandoned writers' threads to end",
        )
    finally:
        server.stop()
        for t in threading.enumerate():  # should there be any left, let them give up
            if t.name.startswith("ostinato-insert"):
                t.join(3)


def test_chunk_store_counts_a_chunk_resent_after_an_idle_close():
    table = uniform_table()
    server = reverb.Server([table])
    try:
        client = grpc_client(f"localhost:{server.port}")
        with writing(client, 10) as w:
            for i in range(6):
                w.append({"x": np.int64(i)})
                w.create_item("t", 1.0, {"x": w.history["x"][-1:]})
                if i == 2:  # the writer pauses mid-chunk; its stream is closed meanwhile
                    w.flush(timeout_ms=5000)
                    wait_until(
                        lambda: server.service.active_streams == 0,
                        _idle_close_seconds() + 3,
                        "the idle stream to close",
                    )
        from ostinato.core import items as items_lib

        held = {
            id(c): c
            for k in table.keys().tolist()
            for c in items_lib.chunk_refs(table.get(k)["trajectory"])
        }
        assert len(table) == 6
        assert len(server.chunk_store) == len(held), [(c.key, c.data.end) for c in held.values()]
    finally:
        server.stop()


def test_stopped_server_leaves_no_worker_threads():
    before = set(threading.enumerate())
    server = reverb.Server([reverb.Table.queue("q", 100)])
    client = grpc_client(f"localhost:{server.port}")
    calls = [Blocked(f"info{i}", lambda: client.server_info(timeout=5)) for i in range(4)]
    for b in calls:
        b.join(5)
    assert any(t.name.startswith("ostinato-rpc") for t in set(threading.enumerate()) - before)
    client.close()
    server.stop()
    wait_until(
        lambda: (
            not [
                t for t in set(threading.enumerate()) - before if t.name.startswith("ostinato-rpc")
            ]
        ),
        2,
        "the stopped server's worker threads to end",
    )


# A child that blocks in Sample on an empty table.
BLOCKED_SAMPLER = """
import sys, ostinato as reverb
client = reverb.Client(sys.argv[1], in_process=False, unavailable_timeout=5)
client.server_info(timeout=5)
print("CALLING", flush=True)
next(client.sample("q"))
print("SAMPLED", flush=True)
"""


def test_sampler_killed_while_waiting_gets_nothing_later():
    """Items inserted well after a blocked sampler died go to the living, not the dead."""
    server = reverb.Server([reverb.Table.queue("q", 10)])
    address = f"localhost:{server.port}"
    children = [Child(BLOCKED_SAMPLER, address) for _ in range(3)]
    try:
        for ch in children:
            ch.wait_line(lambda ln: ln == "CALLING", 20, "CALLING")
        wait_until(
            lambda: server.metrics()["tables"]["q"]["blocked_samplers"] == 3,
            20,
            "three samplers blocked on the server",
        )
        for ch in children:
            ch.kill()
        time.sleep(1.5)  # > the service's 0.5 s wait slice: the dead calls have noticed
        local = server.localhost_client()
        for i in range(3):
            local.insert(np.int64(i), {"q": 1.0}, timeout=5)
        time.sleep(0.3)
        assert drain_ids(grpc_client(address), "q", batch=1) == [0, 1, 2]
    finally:
        for ch in children:
            ch.kill()
        server.stop()


def test_item_inserted_right_after_a_blocked_sampler_died_is_not_lost():
    server = reverb.Server([reverb.Table.queue("q", 10)])
    address = f"localhost:{server.port}"
    children = [Child(BLOCKED_SAMPLER, address) for _ in range(3)]
    try:
        for ch in children:
            ch.wait_line(lambda ln: ln == "CALLING", 20, "CALLING")
        wait_until(
            lambda: server.metrics()["tables"]["q"]["blocked_samplers"] == 3,
            20,
            "three samplers blocked on the server",
        )
        for ch in children:
            ch.kill()
        time.sleep(0.05)  # the kernel has closed their connections
        local = server.localhost_client()
        for i in range(3):
            local.insert(np.int64(i), {"q": 1.0}, timeout=5)
        time.sleep(1.0)
        assert len(server.tables_by_name["q"]) == 3
    finally:
        for ch in children:
            ch.kill()
        server.stop()

"""A vector writer's items, which go into an in-process table in batches with their locations
(writers.vector_rows), seen through every path that reads or drops items: samples, lookups,
deletes, evictions, resets, checkpoints, and items that wait for their rate limiter.

Each step's values say where they come from (``a`` = step, ``r`` = 100 * step + env), so an
item is right when its rows are consecutive steps of one environment."""

from __future__ import annotations

import threading
import time

import numpy as np

import ostinato as reverb
from _helpers import check_chunk_refs, uniform_table
from ostinato import checkpointers, errors, testing
from ostinato.core import items as items_lib

N = 4
LENGTH = 3


def _write(client, table, steps, *, flush=True, writer=None):
    """Returns the writer and the number of items it created."""
    w = writer or client.vector_writer(N, LENGTH)
    made = 0
    for t in range(steps):
        w.append({"a": np.full(N, t, np.int32), "r": 100.0 * t + np.arange(N)})
        h = w.history
        made += w.create_items(
            table, 1.0, {"a": h["a"][-LENGTH:], "r": h["r"][-LENGTH:]}, mask=w.episode_steps >= 3
        )
        if t % 11 == 10:
            w.end_episode(np.arange(N) == t % N)  # lanes' episodes end at different steps
    if flush:
        w.flush()
    return w, made


def _rows(packed):
    cols = []
    for col in items_lib.columns(packed):
        cols.append(np.concatenate([c.data[o : o + n] for c, o, n in col]))
    return cols


def _check_item(packed):
    a, r = _rows(packed)
    assert len(a) == LENGTH
    t0 = int(a[0])
    env = int(r[0]) - 100 * t0
    assert a.tolist() == list(range(t0, t0 + LENGTH)), a
    assert r.tolist() == [100.0 * t + env for t in range(t0, t0 + LENGTH)], r


def test_items_hold_their_own_steps():
    with testing.in_process_server(uniform_table("t", 10_000)) as (server, client):
        _write(client, "t", 60)[0].close()
        slots = server.tables_by_name["t"]._slots
        live = list(slots.key_to_slot.values())
        loc = slots.locations
        located = sum(loc.array[s * loc._stride] == 1 for s in live)
        assert located > len(live) // 2  # most went in with their writer's locations
        for p in map(slots.traj.__getitem__, live):
            assert items_lib.is_flat(p) or len(p) == 2
            _check_item(p)
        check_chunk_refs(server)
        for s in client.sample("t", 50, emit_timesteps=False):
            a, r = s.data  # the columns in the order of their keys
            assert np.all(np.diff(a) == 1)
            assert np.all(np.diff(r) == 100)


def test_deletes_evictions_and_reset_release_the_items_chunks():
    with testing.in_process_server(uniform_table("t", 40)) as (server, client):
        _write(client, "t", 80)[0].close()  # the table holds 40: each batch evicts the oldest
        table = server.tables_by_name["t"]
        assert table.info.current_size == 40
        check_chunk_refs(server)
        keys = table.keys().tolist()
        client.mutate_priorities("t", deletes=keys[::3])
        assert table.info.current_size == 40 - len(keys[::3])
        for k in table.keys().tolist():
            _check_item(table.get(k)["trajectory"])
        check_chunk_refs(server)
        client.reset("t")
        slots = table._slots
        assert len(slots) == 0
        assert len(server._store) == 0


def test_checkpoint_round_trip(tmp_path):
    def server():
        return reverb.Server(
            [uniform_table("t", 10_000)],
            checkpointer=checkpointers.DefaultCheckpointer(str(tmp_path)),
        )

    s1 = server()
    try:
        client = s1.localhost_client()
        _write(client, "t", 40)[0].close()
        t1 = s1.tables_by_name["t"]
        before = [(k, [c.tolist() for c in _rows(t1.get(k)["trajectory"])]) for k in t1.keys()]
        client.checkpoint()
    finally:
        s1.stop()
    s2 = server()
    try:
        t2 = s2.tables_by_name["t"]
        after = [(k, [c.tolist() for c in _rows(t2.get(k)["trajectory"])]) for k in t2.keys()]
        assert after == before
    finally:
        s2.stop()


def test_items_waiting_for_their_rate_limiter():
    """A Queue table admits 10 items at a time: the rest of a batch waits in the writer's
    stream and goes in as samples make room; none is lost or mixed up."""
    table = reverb.Table(
        "q",
        reverb.selectors.Fifo(),
        reverb.selectors.Fifo(),
        1000,
        reverb.rate_limiters.Queue(10),
        max_times_sampled=1,
    )
    with testing.in_process_server(table) as (server, client):
        w = client.vector_writer(N, LENGTH)
        got = []
        made = [-1]  # set when the writer is done

        def drain():
            deadline = time.monotonic() + 30
            while len(got) != made[0] and time.monotonic() < deadline:
                try:
                    got.extend(client.sample("q", 1, emit_timesteps=False, timeout=0.2))
                except errors.RateLimiterTimeout:
                    pass

        th = threading.Thread(target=drain)
        th.start()
        made[0] = _write(client, "q", 22, writer=w)[1]
        th.join(40)
        assert not th.is_alive()
        w.close()
        seen = set()
        for s in got:
            seen.add(int(s.info.key))
            a, r = s.data  # the columns in the order of their keys
            assert np.all(np.diff(a) == 1)
            assert np.all(np.diff(r) == 100)
        assert len(seen) == len(got) == made[0]
        check_chunk_refs(server)

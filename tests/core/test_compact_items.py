"""A vector writer's items stored compact (ostinato.core.compact): no packed trajectory per item
in the table, packed on demand. Every path that reads or drops items sees the same items as
if they had been stored packed: lookups, samples, deletes, evictions, resets, checkpoints, and
items that wait for their rate limiter (packed before they are queued).

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


def test_items_are_stored_compact_and_packed_on_demand():
    with testing.in_process_server(uniform_table("t", 10_000)) as (server, client):
        _write(client, "t", 60)[0].close()
        slots = server.tables_by_name["t"]._slots
        live = list(slots.key_to_slot.values())
        compact = [s for s in live if slots.traj[s] is None]
        assert len(compact) > len(live) // 2  # most went in located
        packed = slots.trajs_of(live)
        assert packed == [slots.traj_of(s) for s in live]
        for p in packed:
            assert items_lib.is_flat(p) or len(p) == 2
            _check_item(p)
        check_chunk_refs(server)
        for s in client.sample("t", 50, emit_timesteps=False):
            a, r = s.data  # the columns in the order of their keys
            assert np.all(np.diff(a) == 1)
            assert np.all(np.diff(r) == 100)


def test_deletes_evictions_and_reset_release_compact_items():
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
        assert all(v is None for col in slots.compact.chunks for v in col)
        assert len(server._store) == 0


def test_checkpoint_round_trip_of_compact_items(tmp_path):
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
        assert any(t1._slots.traj[s] is None for s in t1._slots.key_to_slot.values())
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


def test_items_waiting_for_their_rate_limiter_are_packed():
    """A Queue table admits 10 items at a time: the rest of a batch waits in the writer's
    stream, packed, and goes in as samples make room; none is lost or mixed up."""
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

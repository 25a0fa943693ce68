"""Where a vector writer's items have their rows, worked out by the writer (writers.vector_rows).

In process, a vector writer hands its table each call's locations as arrays, and the table
writes them without looking at the items. Whatever the calls -- masks, items that reach back
to other chunks, ends of episodes with and without clearing, blocks that fill up while some
lanes still write into the old one -- every location the table holds must be the one it would
have worked out itself from the item (``Locations.add``), and a sampled batch must hold the
same data whether gathered by location or read chunk by chunk.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from _helpers import check_chunk_refs, gathered_both_ways, uniform_table
from ostinato import testing
from ostinato.core import items as items_lib
from ostinato.core import locations
from ostinato.core.deadline import Deadline
from ostinato.writers import lanes as lanes_mod

KEYS = ("obs", "a", "r")


@pytest.fixture
def small_blocks(monkeypatch):
    """Blocks of 2 KiB: they fill up every few chunks, so lanes are often in different ones."""
    monkeypatch.setattr(lanes_mod, "BLOCK_BYTES", 2048)


@pytest.fixture
def puts(monkeypatch):
    """Counts the table's writes of locations made by writers (``Locations.put``)."""
    calls = []
    put = locations.Locations.put

    def counted(self, where, runs, firsts):
        calls.append(firsts.shape[1])
        return put(self, where, runs, firsts)

    monkeypatch.setattr(locations.Locations, "put", counted)
    return calls


def _table(name="t", max_size=100_000):
    return uniform_table(name, max_size)


def _step(rng, n, t):
    return {
        "obs": rng.standard_normal((n, 3)).astype(np.float32),
        "a": np.full(n, t, np.int32),
        "r": np.arange(n, dtype=np.float64) + 100 * t,
    }


def _check_table(server, client, table="t"):
    """Every stored item's location is what the table would work out itself; sampled batches
    gather the same data by location and chunk by chunk."""
    check_chunk_refs(server)
    slots = server.tables_by_name[table]._slots
    loc = slots.locations
    fresh = locations.Locations(slots.capacity)
    for slot in slots.key_to_slot.values():
        fresh.add(slot, slots.traj[slot])
    for slot in slots.key_to_slot.values():
        assert loc.array[slot * loc._stride : (slot + 1) * loc._stride].tolist() == (
            fresh.array[slot * fresh._stride : (slot + 1) * fresh._stride].tolist()
        ), slot
    n = len(slots)
    if n:  # None: items of different lengths in one batch, either way
        gathered_both_ways(client.transport.sample(table, min(n, 64), Deadline.never()))


OPS = st.lists(
    st.tuples(
        st.sampled_from(["append"] * 4 + ["items"] * 3 + ["end", "keep"]),
        st.lists(st.booleans(), min_size=6, max_size=6),
        st.integers(0, 10),
        st.integers(0, 10),
    ),
    min_size=20,
    max_size=120,
)


@settings(max_examples=60, deadline=None)
@given(ops=OPS, keep=st.integers(1, 6), chunk=st.sampled_from([None, 1, 3, 8, 16, 40]))
def test_locations_from_the_writer_are_the_tables_own(ops, keep, chunk):
    n = 6
    rng = np.random.default_rng(1)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(lanes_mod, "BLOCK_BYTES", 2048)
        with testing.in_process_server(_table()) as (server, client):
            w = client.vector_writer(n, keep, max_chunk_length=chunk)
            t = 0
            for op, mask, a, b in ops:
                m = np.array(mask, bool)
                if op == "append":
                    w.append(_step(rng, n, t), mask=None if a % 2 else m)
                    t += 1
                elif op == "items" and t:
                    back = 1 + a % keep
                    length = 1 + b % back
                    ok = w.episode_steps >= back
                    sel = ok if a % 4 else ok & m
                    sl = slice(-back, None if back == length else -back + length)
                    traj = {k: w.history[k][sl] for k in KEYS}
                    w.create_items("t", 1.0, traj, mask=sel)
                    if b % 4:
                        w.flush()  # the call's items go in as one batch (often located)
                elif op in ("end", "keep"):
                    w.end_episode(m, clear_buffers=op == "end")
            w.flush()
            _check_table(server, client)
            w.close()


@pytest.mark.parametrize(("chunk", "max_size"), [(None, 100_000), (16, 100_000), (None, 500)])
def test_the_table_takes_the_writers_locations(small_blocks, puts, chunk, max_size):
    """A long run with masks, episode ends and blocks that fill up while other lanes still
    write into the old one: many items' locations come from the writer, and all are right."""
    n = 8
    rng = np.random.default_rng(3)
    # max_size 500: full tables, each batch evicting the oldest items (and their chunks).
    with testing.in_process_server(_table("t", max_size), _table("u", max_size)) as (
        server,
        client,
    ):
        with client.vector_writer(n, 5, max_chunk_length=chunk) as w:
            for t in range(600):
                some = rng.random(n) < 0.5 if t % 2 else None  # lanes fall out of step
                w.append(_step(rng, n, t), mask=some)
                h = w.history
                w.create_items("t", 1.0, {k: h[k][-5:] for k in KEYS}, mask=w.episode_steps >= 5)
                if t % 3 == 0:  # another table in between: the held items go in at once
                    w.create_items("u", 1.0, {k: h[k][-1] for k in KEYS}, mask=w.episode_steps >= 1)
                if t % 37 == 36:
                    w.end_episode(rng.random(n) < 0.3)
        for table in ("t", "u"):
            _check_table(server, client, table)
        stored = sum(client.server_info()[table].current_size for table in ("t", "u"))
        assert sum(puts) >= 200, (sum(puts), stored)  # hundreds took the writer's path


def test_full_chunks_pass_their_newest_rows_on():
    """A chunk that fills up mid-episode starts the lane's next one with a copy of its newest
    ``keep - 1`` rows (``Lanes.carry``): every item of up to ``keep`` steps is one slice per
    column, located, with its steps in order, and the lane's history is unchanged."""
    n, keep, rows = 4, 5, 40  # carry 4: at most 1/8 of the rows
    with testing.in_process_server(_table()) as (server, client):
        with client.vector_writer(n, keep, max_chunk_length=rows) as w:
            for t in range(300):
                w.append({"a": 1000 * np.arange(n) + t})  # environment and step, in one value
                if t % 97 == 50:  # episodes end at different steps in different lanes
                    w.end_episode(np.array([True, False, False, True]))
                w.create_items("t", 1.0, {"a": w.history["a"][-keep:]}, mask=w.steps_at_least(keep))
                if t % 7 == 0:
                    got = w.history["a"].numpy(1)
                    assert got.tolist() == list(range(1000 + t - len(got) + 1, 1000 + t + 1))
            assert [c.carry for c in w._columns] == [keep - 1]
        _check_table(server, client)
        slots = server.tables_by_name["t"]._slots
        trajs = [slots.traj[s] for s in slots.key_to_slot.values()]
        assert len(trajs) > 1000
        assert all(items_lib.is_flat(tr) for tr in trajs)
        for s in client.sample("t", len(trajs), emit_timesteps=False):
            a = np.asarray(s.data[0])
            assert (np.diff(a) == 1).all() and a[0] // 1000 == a[-1] // 1000, a


def test_no_carry_where_it_would_cost_more_than_an_eighth():
    """Chunks of fewer than 8 * (keep - 1) rows pass nothing on: items reach back into the
    closed chunk (several slices), as one writer per environment would store them."""
    with testing.in_process_server(_table()) as (server, client):
        with client.vector_writer(2, 5, max_chunk_length=31) as w:
            for t in range(100):
                w.append({"a": np.array([t, 1000 + t])})
                w.create_items("t", 1.0, {"a": w.history["a"][-5:]}, mask=w.steps_at_least(5))
            assert [c.carry for c in w._columns] == [0]
        _check_table(server, client)
        slots = server.tables_by_name["t"]._slots
        assert not all(items_lib.is_flat(slots.traj[s]) for s in slots.key_to_slot.values())


def test_carried_rows_are_met_once_walking_back_across_episodes():
    """A chunk whose rows were all carried over is not kept again: walking back from the next
    chunk, through an episode ended without clearing, meets every step once."""
    with testing.in_process_server(_table()) as (server, client):
        with client.vector_writer(1, 5, max_chunk_length=40) as w:  # carry 4
            for t in range(38):
                w.append({"a": np.array([t])})
            w.end_episode(clear_buffers=False)  # the chunk's region has 2 rows left
            for t in range(38, 41):  # 2 fill the region; the 3rd opens a chunk carrying both
                w.append({"a": np.array([t])})
            assert w.history["a"].numpy(0).tolist() == [36, 37, 38, 39, 40]
            w.create_items("t", 1.0, {"a": w.history["a"][-5:]})
        _check_table(server, client)
        (s,) = client.sample("t", 1, emit_timesteps=False)
        assert np.asarray(s.data[0]).tolist() == [36, 37, 38, 39, 40]

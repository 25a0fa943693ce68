"""Stored items' trajectories of one slice per column are kept out of the cyclic garbage
collector (:mod:`ostinato.core.untrack`), and reference counting still frees what they held."""

from __future__ import annotations

import gc
import sys

import numpy as np
import pytest

import ostinato as reverb
from _helpers import uniform_table
from ostinato import checkpointers
from ostinato.core import items as items_lib
from ostinato.core import slots as slots_lib
from ostinato.core import untrack

pytestmark = pytest.mark.skipif(not untrack.available(), reason="CPython only")


@pytest.fixture(autouse=True)
def _untrack_from_the_first_item(monkeypatch):
    monkeypatch.setattr(slots_lib, "UNTRACK_FROM", 0)


def _stored(table):
    slots = table._slots
    return [slots.traj[s] for s in slots.key_to_slot.values()]


def _assert_untracked(table, n):
    """Items of one slice per column are untracked; those of several are left tracked."""
    trajs = _stored(table)
    assert len(trajs) == n
    for traj in trajs:
        assert gc.is_tracked(traj) != items_lib.is_flat(traj), traj


def test_items_of_every_insert_path_are_untracked(tmp_path):
    table = uniform_table(max_size=1000)
    server = reverb.Server([table], checkpointer=checkpointers.DefaultCheckpointer(str(tmp_path)))
    try:
        client = server.localhost_client()
        client.insert([np.float32(1.0), np.arange(3)], priorities={"t": 1.0})  # one at a time
        with client.trajectory_writer(num_keep_alive_refs=5, max_chunk_length=2) as w:
            for i in range(20):
                w.append({"x": np.float32(i), "y": np.arange(3) + i})
                if i >= 4:  # 5 steps over chunks of 2: several slices per column
                    w.create_item("t", 1.0, {"x": w.history["x"][-5:], "y": w.history["y"][-1]})
        nested = [t for t in _stored(table) if not items_lib.is_flat(t)]
        assert nested, "the writer should have made items of several slices per column"
        _assert_untracked(table, 17)
        for s in client.sample("t", num_samples=4, emit_timesteps=False):  # read as before
            assert s.info.key
        client.checkpoint()
    finally:
        server.stop()
    restored = uniform_table(max_size=1000)
    server = reverb.Server(
        [restored], checkpointer=checkpointers.DefaultCheckpointer(str(tmp_path))
    )
    try:
        _assert_untracked(restored, 17)
    finally:
        server.stop()


def test_evicted_items_free_their_chunks_without_the_collector():
    table = uniform_table(max_size=10)
    server = reverb.Server([table])
    gc.disable()
    try:
        client = server.localhost_client()
        with client.trajectory_writer(num_keep_alive_refs=1, max_chunk_length=1) as w:
            w.append({"x": np.float32(0)})
            w.create_item("t", 1.0, {"x": w.history["x"][-1]})
            w.flush()
            first = items_lib.chunk_refs(_stored(table)[0])[0]
            held = sys.getrefcount(first)
            for i in range(1, 30):  # the first item is evicted long before the end
                w.append({"x": np.float32(i)})
                w.create_item("t", 1.0, {"x": w.history["x"][-1]})
        assert len(table) == 10
        # Only this test's reference is left (and getrefcount's own): the item and the
        # writer let go of the chunk by reference counting alone.
        assert held > 2 and sys.getrefcount(first) == 2
    finally:
        gc.enable()
        server.stop()


def test_a_small_tables_items_stay_tracked(monkeypatch):
    monkeypatch.setattr(slots_lib, "UNTRACK_FROM", 10)
    table = uniform_table(max_size=100)
    server = reverb.Server([table])
    try:
        with server.localhost_client().trajectory_writer(num_keep_alive_refs=1) as w:
            for i in range(30):
                w.append({"x": np.float32(i)})
                w.create_item("t", 1.0, {"x": w.history["x"][-1]})
                if i in (5, 25):
                    w.flush()  # one by one up to here, then a batch
        tracked = sum(map(gc.is_tracked, _stored(table)))
        assert 0 < tracked < 30
    finally:
        server.stop()

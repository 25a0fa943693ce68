"""Located items (ostinato.core.locations): rows gathered out of writer blocks with one take.

Whatever the path -- located, or read chunk by chunk -- a sampled batch must hold the same
data. These tests build batches both ways and compare them.
"""

from __future__ import annotations

import gc

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ostinato as reverb
from _helpers import gathered_both_ways
from ostinato import testing
from ostinato.core import assemble, locations
from ostinato.core.deadline import Deadline


def _table(name: str = "t", max_size: int = 100_000, remover=None) -> reverb.Table:
    return reverb.Table(
        name,
        reverb.selectors.Uniform(),
        remover or reverb.selectors.Fifo(),
        max_size,
        reverb.rate_limiters.MinSize(1),
    )


def _same(batch, unsqueeze: bool = False) -> list[np.ndarray]:
    """The batch's columns, checked equal whether gathered from locations or from chunks."""
    cols = gathered_both_ways(batch, unsqueeze)
    assert cols is not None
    return cols


def test_items_of_a_writer_are_located_and_gathered_with_take():
    with testing.in_process_server(_table()) as (server, client):
        with client.trajectory_writer(3) as w:
            for i in range(2000):
                w.append({"obs": np.full(4, i, np.float32), "a": np.int32(i)})
                if i >= 2:
                    w.create_item("t", 1.0, {"obs": w.history["obs"][-3:], "a": w.history["a"][-1]})
        batch = client.transport.sample("t", 256, Deadline.never())
        assert batch.located is not None
        for unsqueeze in (False, True):
            cols = _same(batch, unsqueeze)
        a, obs = cols
        assert obs.shape == (256, 3, 4) and a.shape == (256, 1)
        np.testing.assert_array_equal(obs[:, -1, 0], a[:, 0])  # the item's newest step
        np.testing.assert_array_equal(obs[:, 0, 0] + 2, a[:, 0])


def test_items_of_several_writers_and_blocks_in_one_batch():
    with testing.in_process_server(_table()) as (server, client):
        for seed in range(3):  # writers with their own blocks (and one of float64 rows)
            dtype = np.float64 if seed == 2 else np.float32
            with client.trajectory_writer(1, max_chunk_length=7) as w:
                for i in range(500):
                    w.append({"x": np.full(3, seed * 1000 + i, dtype)})
                    w.create_item("t", 1.0, {"x": w.history["x"][-1:]})
                    if i % 97 == 0:
                        w.end_episode()  # trims the chunk: the block's rows are reused
        for _ in range(20):
            batch = client.transport.sample("t", 64, Deadline.never())
            # None: float64 and float32 rows in one batch, not alike either way.
            gathered_both_ways(batch)


def test_unlocated_items_fall_back_to_the_chunks():
    with testing.in_process_server(_table()) as (server, client):
        client.insert([np.arange(3, dtype=np.float32)], {"t": 1.0})  # its own buffer, no block
        with client.trajectory_writer(1) as w:
            w.append({"x": np.arange(3, dtype=np.float32)})
            w.create_item("t", 1.0, {"x": w.history["x"][-1:]})
        batch = client.transport.sample("t", 64, Deadline.never())
        assert batch.located is None  # not every item is located
        np.testing.assert_array_equal(
            assemble.gather(batch)[0][:, 0], np.tile(np.arange(3, dtype=np.float32), (64, 1))
        )


def test_strings_and_large_rows_are_not_carved_out_of_blocks():
    with testing.in_process_server(_table()) as (server, client):
        with client.trajectory_writer(1) as w:
            w.append({"s": b"abc", "img": np.zeros((64, 64, 2), np.uint8)})
            w.create_item("t", 1.0, {"s": w.history["s"][-1], "img": w.history["img"][-1]})
        traj = server.tables_by_name["t"].get(int(server.tables_by_name["t"].keys()[0]))[
            "trajectory"
        ]
        assert all(c.origin is None for c in traj[0::3])
        assert client.transport.sample("t", 4, Deadline.never()).located is None


def test_blocks_are_released_with_their_items_and_codes_forgotten():
    with testing.in_process_server(_table(max_size=10)) as (server, client):
        with client.trajectory_writer(1) as w:
            for i in range(50):
                w.append({"x": np.float32(i)})
                w.create_item("t", 1.0, {"x": w.history["x"][-1]})
        table = server.tables_by_name["t"]
        (code,) = {
            c.origin[0]
            for k in table.keys().tolist()
            for c in table.get(int(k))["trajectory"][0::3]
        }
        assert locations.registered_block(code) is not None
        client.reset("t")
        del w
        gc.collect()
        assert locations.registered_block(code) is None


def test_restored_items_are_not_located_but_sample_the_same(tmp_path):
    ckpt = reverb.checkpointers.DefaultCheckpointer(str(tmp_path))
    with testing.in_process_server(_table(), checkpointer=ckpt) as (server, client):
        with client.trajectory_writer(2) as w:
            for i in range(300):
                w.append({"x": np.full(2, i, np.int64)})
                if i:
                    w.create_item("t", 1.0, {"x": w.history["x"][-2:]})
        client.checkpoint()
    with testing.in_process_server(_table(), checkpointer=ckpt) as (server, client):
        batch = client.transport.sample("t", 32, Deadline.never())
        assert batch.located is None
        x = assemble.gather(batch)[0]
        np.testing.assert_array_equal(x[:, 1, 0] - x[:, 0, 0], np.ones(32))


@settings(max_examples=40, deadline=None)
@given(
    keep=st.integers(1, 4),
    chunk=st.one_of(st.none(), st.integers(1, 5)),
    episode=st.integers(1, 9),
    n=st.integers(1, 60),
    seed=st.integers(0, 2**16),
)
def test_gather_matches_reading_the_chunks(keep, chunk, episode, n, seed):
    rng = np.random.default_rng(seed)
    with testing.in_process_server(_table(remover=reverb.selectors.Uniform())) as (server, client):
        with client.trajectory_writer(keep, max_chunk_length=chunk) as w:
            for i in range(n):
                w.append({"f": rng.standard_normal(2).astype(np.float32), "i": np.int16(i)})
                k = min(w.episode_steps, keep)
                w.create_item("t", 1.0, {"f": w.history["f"][-k:], "i": w.history["i"][-k:]})
                if (i + 1) % episode == 0:
                    w.end_episode(clear_buffers=bool(i % 2))
        for _ in range(3):
            batch = client.transport.sample("t", 16, Deadline.never())
            gathered_both_ways(batch)  # None: items of different lengths, either way


@pytest.mark.parametrize("ncols", [1, 2, 5])
def test_adders_for_any_number_of_columns(ncols):
    from ostinato.core.chunks import Chunk

    block = np.arange(100, dtype=np.float32)
    code = locations.register_block(block)
    chunks = [Chunk(i, block[10 * i : 10 * i + 10], origin=(code, 10 * i)) for i in range(ncols)]
    traj = tuple(x for i, c in enumerate(chunks) for x in (c, i, 1))
    loc = locations.Locations(4)
    loc.add(2, traj)
    assert loc.ncols == ncols
    located = loc.take(np.array([2]))
    assert located is not None
    assert located.rows[0].tolist() == [1] + [v for i in range(ncols) for v in (code, 11 * i, 1)]
    loc.remove(2)
    assert loc.take(np.array([2])) is None

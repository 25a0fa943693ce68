"""A writer's history knows its steps by value index (no ref object per appended value).

The history of a column whose every step has a value maps step ``i`` to the chunker's value
``base + i``; ``history[path][-k:]`` is a run of value indices and a step's ref is made when the
step is read. These tests hold the parts of that design the list-model property test
(``test_writer_history_props.py``) does not reach: columns kept across later appends and
chunk changes, expiry, the chunks a writer lets go, partial steps and resized histories.
"""

from __future__ import annotations

import numpy as np
import pytest

import ostinato as reverb
from ostinato.writers.trajectory_column import RunColumn


@pytest.fixture()
def client(make_server):
    server = make_server(reverb.Table.queue("queue", 1000))
    return server.localhost_client()


def _step(i: int) -> dict:
    return {"a": np.full(2, i, np.float32), "b": np.int64(i)}


def _drain(client, n: int) -> list:
    """The sampled items' columns by name (a dict trajectory's columns, in sorted key order)."""
    out = []
    for s in client.sample("queue", n, emit_timesteps=False):
        names = sorted(("a", "b", "last")[: len(s.data)])
        out.append(dict(zip(names, s.data)))
    return out


def _chunker(w, name: str = "a"):
    return w._path_to_column[(name,)].chunker


@pytest.mark.parametrize("later", range(0, 6))
def test_a_run_kept_while_the_writer_appends_packs_the_steps_it_was_read_at(client, later):
    # Chunks of 3 rows: the run of steps 2..4 spans two chunks; the appends after the read
    # start further chunks before the item is made (the packer's slow path, from the spans).
    w = client.trajectory_writer(8, max_chunk_length=3)
    for i in range(5):
        w.append(_step(i))
        # Items of the same keys before: the writer's generated packer takes the later one.
        h = w.history
        w.create_item("queue", 1.0, {"a": h["a"][-1:], "b": h["b"][-1:], "last": h["b"][-1]})
    run_a, run_b = w.history["a"][-3:], w.history["b"][-3:]
    last = w.history["b"][-1]
    assert type(run_a) is RunColumn and len(run_a) == 3
    for i in range(5, 5 + later):
        w.append(_step(i))
    w.create_item("queue", 1.0, {"a": run_a, "b": run_b, "last": last})
    w.flush()
    got = _drain(client, 6)[-1]
    np.testing.assert_array_equal(got["a"], [[2, 2], [3, 3], [4, 4]])
    np.testing.assert_array_equal(got["b"], [2, 3, 4])
    assert int(got["last"]) == 4
    np.testing.assert_array_equal(run_a.numpy(), [[2, 2], [3, 3], [4, 4]])
    w.close()


def test_a_kept_run_expires_with_its_oldest_step(client):
    w = client.trajectory_writer(3)
    for i in range(3):
        w.append(_step(i))
        w.create_item("queue", 1.0, {"a": w.history["a"][-1:]})  # the generated packer next
    run = w.history["a"][-3:]
    newest = w.history["a"][-1]
    assert not run.expired and not newest.expired
    w.append(_step(3))  # step 0 leaves the keep-alive window
    assert run.expired and not newest.expired
    with pytest.raises(ValueError, match="expired"):
        w.create_item("queue", 1.0, {"a": run})
    with pytest.raises(RuntimeError, match="expired"):
        run.numpy()
    w.append(_step(4))
    w.append(_step(5))
    assert newest.expired
    w.end_episode(clear_buffers=True)
    assert len(w.history["a"]) == 0
    w.close()


def test_refs_to_one_value_are_equal_and_hash_alike(client):
    w = client.trajectory_writer(2)
    w.append(_step(0))
    w.append(_step(1))
    h = w.history["a"]
    assert h[-1] == h[1] and hash(h[-1]) == hash(h[1]) and h[-1] is not h[1]
    assert h[-1] != h[-2] and h[-1] != w.history["b"][-1]
    assert list(h[-2:]) == [h[0], h[1]]
    assert len({h[0], h[1], h[-1]}) == 2
    w.close()


@pytest.mark.parametrize(("keep", "rows"), [(2, 2), (3, 2), (5, 3), (4, 1)])
def test_a_writer_lets_go_of_chunks_without_live_values(client, keep, rows):
    w = client.trajectory_writer(keep, max_chunk_length=rows)
    for i in range(60):
        w.append(_step(i))
        ch = _chunker(w)
        h = w.history["a"]
        n = min(i + 1, keep)
        refs = [h[-k] for k in range(1, n + 1)]
        # Every live value's chunk is still known, and only chunks of live values are kept.
        assert all(r.chunk is not None for r in refs)
        live = {r.chunk.key for r in refs}
        assert ch.live_chunk_keys() == live
        assert len(ch._spans) <= -(-keep // rows) + 2
        assert h[-n:].numpy()[:, 0].tolist() == list(range(i + 1 - n, i + 1))
        if i % 7 == 0:
            w.create_item("queue", 1.0, {"a": h[-n:]})
    w.close()


def test_steps_without_values_then_a_cleared_episode(client):
    # Partial steps and a missing column put the history into its buffer of value indices;
    # clearing the episode's buffers returns it to plain counting.
    w = client.trajectory_writer(4)
    w.append({"a": np.full(2, 0, np.float32)}, partial_step=True)
    w.append({"b": np.int64(0)})
    w.append({"a": np.full(2, 1, np.float32)})  # no b at step 1
    w.append(_step(2))
    w.append(_step(3))
    h = w.history["b"]
    assert len(h) == 4 and h._buf is not None
    with pytest.raises(ValueError, match="None"):
        h[-3:]
    w.create_item("queue", 1.0, {"a": w.history["a"][-4:], "b": h[-2:]})
    w.end_episode(clear_buffers=True)
    assert h._buf is None and len(h) == 0
    w.append(_step(10))
    w.append(_step(11))
    w.create_item("queue", 1.0, {"a": w.history["a"][-2:], "b": w.history["b"][-2:]})
    w.flush()
    first, second = _drain(client, 2)
    np.testing.assert_array_equal(first["a"][:, 0], [0, 1, 2, 3])
    np.testing.assert_array_equal(first["b"], [2, 3])
    np.testing.assert_array_equal(second["b"], [10, 11])
    w.close()


def test_a_column_first_written_late_is_aligned_with_the_others(client):
    w = client.trajectory_writer(3)
    w.append({"a": np.full(2, 0, np.float32)})
    w.append(_step(1))
    w.append(_step(2))
    hb = w.history["b"]
    assert len(hb) == 3 and len(w.history["a"]) == 3
    with pytest.raises(ValueError, match="None"):
        hb[0]
    w.create_item("queue", 1.0, {"b": hb[-2:], "a": w.history["a"][-3:]})
    w.flush()
    (got,) = _drain(client, 1)
    np.testing.assert_array_equal(got["b"], [1, 2])
    w.close()


def test_a_history_that_shrinks_does_not_get_its_steps_back_when_it_grows(client):
    w = client.trajectory_writer(4)
    for i in range(4):
        w.append(_step(i))
    w.configure(("a",), num_keep_alive_refs=2, max_chunk_length=None)
    w.configure(("b",), num_keep_alive_refs=2, max_chunk_length=None)
    w._num_keep_alive_refs = 2  # the writer's own default no longer holds more
    for c in w._columns:
        c.history.resize(2)
    w.configure(("a",), num_keep_alive_refs=4, max_chunk_length=None)
    h = w.history["a"]
    assert len(h) == 4
    with pytest.raises(ValueError, match="None"):
        h[-3]  # dropped when the history held 2 steps
    assert h[-2:].numpy()[:, 0].tolist() == [2, 3]
    w.append(_step(4))
    assert h[-3:].numpy()[:, 0].tolist() == [2, 3, 4]
    w.close()


def test_bounded_slices_are_runs_of_values_in_either_form_of_history(client):
    # h[a:b] (the structured writer's patterns read such slices) is a run of value indices,
    # without a ref per step, whether the history counts its steps or keeps a buffer.
    w = client.trajectory_writer(6)
    for i in range(8):
        w.append(_step(i))
    h = w.history["a"]
    for col, want in ((h[-6:-1], [2, 3, 4, 5, 6]), (h[3:5], [3, 4]), (h[-1:8], [7])):
        assert type(col) is RunColumn
        assert col.numpy()[:, 0].tolist() == want
    w.append({"a": np.full(2, 8, np.float32)})  # no b: b's history keeps a buffer now
    w.append(_step(9))
    hb = w.history["b"]
    assert type(hb[-5:-2]) is RunColumn and hb[-5:-2].numpy().tolist() == [5, 6, 7]
    with pytest.raises(ValueError, match="None"):
        hb[-3:-1]  # step 8 has no b
    picks = hb[-6::3]  # steps 4 and 7: not a run
    assert type(picks) is not RunColumn and picks.numpy().tolist() == [4, 7]
    with pytest.raises(ValueError, match="None"):
        hb[0:3]  # steps the history no longer holds
    w.close()


def test_partial_steps_keep_counting_their_values(client):
    # Acme's adders write each step in two appends; the reservation the first one makes for
    # the other columns (also for columns the second append creates) is filled by the second:
    # the histories go on counting (no buffer), and read the open step's unset column as None.
    w = client.trajectory_writer(3)
    for i in range(5):
        w.append({"a": np.full(2, i, np.float32)}, partial_step=True)
        if i:
            hb = w.history["b"]
            assert len(hb) == i + 1 and hb._buf is None
            with pytest.raises(ValueError, match="None"):
                hb[-1]
            assert hb[-3:-1].numpy().tolist() == list(range(max(0, i - 2), i))
        w.append({"b": np.int64(i)})
        assert w.history["b"]._buf is None and w.history["a"]._buf is None
    assert w.history["b"][-3:].numpy().tolist() == [2, 3, 4]
    # A step left without a value for b: from then on b keeps its values' indices.
    w.append({"a": np.full(2, 5, np.float32)}, partial_step=True)
    w.append({"b": None})
    w.append(_step(6))
    hb = w.history["b"]
    assert hb._buf is not None and len(hb) == 7
    with pytest.raises(ValueError, match="None"):
        hb[-2]
    assert hb[-1].numpy() == 6 and hb[-3].numpy() == 4
    w.create_item("queue", 1.0, {"a": w.history["a"][-3:], "b": hb[-1:]})
    w.flush()
    (got,) = _drain(client, 1)
    assert got["a"][:, 0].tolist() == [4, 5, 6] and got["b"].tolist() == [6]
    w.close()

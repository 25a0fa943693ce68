"""The column path: numpy conversion against tf.data's, TableSink against TrajectoryObserver."""

from __future__ import annotations

import numpy as np
import optree
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ostinato as reverb
from ostinato import observers
from ostinato.rlds import Trajectory
from ostinato.rlds.ingest import TableSink
from ostinato.rlds.steps import Converter

F, M, L = 0, 1, 2


def trajectories_of(lengths, obs_dim=2):
    """TF-Agents-style trajectories for episodes of ``lengths`` transitions (+ a boundary)."""
    rows = []
    for e, n in enumerate(lengths):
        for t in range(n + 1):
            step_type = F if t == 0 else (L if t == n else M)
            next_type = F if t == n else (L if t == n - 1 else M)
            rows.append(
                Trajectory(
                    np.int32(step_type),
                    np.full(obs_dim, 100 * e + t, np.float32),
                    np.array([t], np.int64),
                    (),
                    np.int32(next_type),
                    np.float32(t),
                    np.float32(1.0),
                )
            )
    return rows


def stacked(rows):
    return optree.tree_map(lambda *xs: np.stack(xs), *rows, none_is_leaf=False)


def items(client, table):
    out = []
    for _ in range(client.server_info()[table].current_size):
        data = client.sample_batch(table, 1).data
        out.append([np.asarray(x)[0].tolist() for x in data])
    return out


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    lengths=st.lists(st.integers(1, 6), min_size=1, max_size=4),
    length=st.integers(1, 4),
    stride=st.integers(1, 3),
    pad=st.booleans(),
    tile=st.booleans(),
    cuts=st.lists(st.integers(0, 30), max_size=4),
)
def test_table_sink_writes_the_observers_items(lengths, length, stride, pad, tile, cuts):
    tile = tile and pad
    rows = trajectories_of(lengths)
    server = reverb.Server([reverb.Table.queue("a", 10_000), reverb.Table.queue("b", 10_000)])
    try:
        client = server.localhost_client()
        with observers.TrajectoryObserver(
            client,
            "a",
            length,
            stride_length=stride,
            pad_end_of_episodes=pad,
            tile_end_of_episodes=tile,
        ) as observer:
            for row in rows:
                observer(row)
        sink = TableSink(client, "b", length, stride, 1.0, pad, tile)
        bounds = sorted({0, len(rows), *[c for c in cuts if c < len(rows)]})
        for a, b in zip(bounds, bounds[1:]):  # units of any size
            sink.write(stacked(rows[a:b]))
        sink.close()
        assert items(client, "b") == items(client, "a")
    finally:
        server.stop()


def test_table_sink_checks_its_arguments():
    server = reverb.Server([reverb.Table.queue("a", 10)])
    try:
        client = server.localhost_client()
        with pytest.raises(ValueError, match=r"sequence_length \(0\) must be a positive"):
            TableSink(client, "a", 0)
        with pytest.raises(ValueError, match="pad_end_of_episodes=True"):
            TableSink(client, "a", 2, tile_end_of_episodes=True)
        with pytest.raises(ValueError, match=r"timeout \(-1\)"):
            TableSink(client, "a", 2, timeout=-1)
        with pytest.raises(ValueError, match=r"client \(None\)"):
            TableSink(None, "a", 2)
    finally:
        server.stop()


# -- numpy conversion against tf.data's ------------------------------------------------------


def _random_episodes(rng, corrupt):
    """Flags per episode, sometimes corrupted; returns ``[(first, last, terminal), ...]``."""
    out = []
    for _ in range(rng.integers(1, 5)):
        n = int(rng.integers(1, 6))
        first, last = np.zeros(n, bool), np.zeros(n, bool)
        first[0], last[-1] = True, True
        terminal = last & bool(rng.integers(2))
        if corrupt and rng.random() < 0.5:
            which = [first, last, terminal][rng.integers(3)]
            k = rng.integers(n)
            which[k] = ~which[k]
        out.append((first, last, terminal))
    return out


def _rlds(tf, episodes, nested):
    datasets = []
    base = 0
    for first, last, terminal in episodes:
        n = len(first)
        obs = np.arange(base, base + n, dtype=np.float32)[:, None] * [1.0, -1.0]
        base += 100
        observation = {"a": obs, "b": obs[:, :1].astype(np.int32)} if nested else obs
        datasets.append(
            tf.data.Dataset.from_tensor_slices(
                dict(
                    observation=observation,
                    action=np.arange(n, dtype=np.int64)[:, None],
                    reward=np.arange(n, dtype=np.float32),
                    discount=np.full(n, 0.5, np.float32),
                    is_first=first,
                    is_last=last,
                    is_terminal=terminal,
                )
            )
        )
    return tf.data.Dataset.from_tensor_slices({"steps": datasets})


def _tf_results(rlds_data):
    from ostinato.rlds.convert import _indexed_trajectories

    out = []
    for i, j, error, traj in _indexed_trajectories(
        rlds_data, None, lazy_errors=False
    ).as_numpy_iterator():
        if error:
            return out, error.decode()
        out.append((int(i), int(j), optree.tree_map(np.asarray, tuple(traj))))
    return out, None


def _numpy_results(rlds_data, read_batch):
    from ostinato.rlds.tf_reader import step_chunks

    converter, out = Converter(), []
    chunks = [converter.feed(c) for c in step_chunks(rlds_data, read_batch)]
    for chunk in [*chunks, converter.finish()]:
        if chunk is None:
            continue
        limit = chunk.error[0] if chunk.error else len(chunk)
        leaves, treedef = optree.tree_flatten(tuple(chunk.trajectory), none_is_leaf=False)
        for k in range(limit):
            out.append(
                (
                    int(chunk.episode[k]),
                    int(chunk.step[k]),
                    optree.tree_unflatten(treedef, [x[k] for x in leaves]),
                )
            )
        if chunk.error:
            return out, chunk.error[1]
    return out, None


def _same(a, b):
    assert len(a) == len(b)
    for (i, j, x), (k, m, y) in zip(a, b):
        assert (i, j) == (k, m)
        for u, v in zip(optree.tree_leaves(x), optree.tree_leaves(y)):
            np.testing.assert_array_equal(u, v)
            assert np.asarray(u).dtype == np.asarray(v).dtype


@pytest.mark.parametrize("seed", range(12))
def test_numpy_conversion_is_tf_datas(seed):
    tf = pytest.importorskip("tensorflow")
    rng = np.random.default_rng(seed)
    data = _rlds(tf, _random_episodes(rng, corrupt=seed % 3 != 0), nested=seed % 4 == 1)
    expected, error = _tf_results(data)
    for read_batch in (1, 3, 4096):  # chunk boundaries anywhere
        got, got_error = _numpy_results(data, read_batch)
        assert got_error == error
        _same(got, expected)


def test_numpy_conversion_of_a_dataset_of_steps():
    tf = pytest.importorskip("tensorflow")
    rng = np.random.default_rng(7)
    episodes = _rlds(tf, _random_episodes(rng, corrupt=False), nested=False)
    data = episodes.flat_map(lambda e: e["steps"])  # episodes flattened: a dataset of steps
    expected, error = _tf_results(data)
    for read_batch in (1, 2, 4096):
        got, got_error = _numpy_results(data, read_batch)
        assert got_error == error
        _same(got, expected)

"""Every reader's batches are as fresh as uniform sampling at consumption time (issue 22).

Each test runs a DQN-style loop -- write one item, take one batch -- and checks that the newest
100 items' share of what was sampled is within ``TOLERANCE`` of uniform's share (see
``_freshness``), embedded and networked. TF-Agents' ``as_dataset`` pipeline is rebuilt here
from plain tf.data ops (an interleave of 32 TrajectoryDatasets, 3 parallel calls, batch 64,
prefetch 3), so the test needs no TF-Agents.
"""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest
from _freshness import BATCH, TOLERANCE, ItemWriter, freshness

import ostinato as reverb
import ostinato.datasets as datasets

TABLES_CODE = """
import sys
sys.path.insert(0, {path!r})
from _freshness import uniform_table
TABLES = [uniform_table("fresh")]
"""


def _has(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


@pytest.fixture()
def loop(serve):
    """loop(make_take) -> freshness, where make_take(client) returns a callable giving one
    batch's item ids."""
    import os

    client = serve(TABLES_CODE.format(path=os.path.dirname(os.path.abspath(__file__))))
    closers = []

    def run(make_take):
        writer = ItemWriter(client, "fresh")
        closers.append(writer.close)
        writer()  # readers that check the table at start see a non-empty table
        take, close = make_take(client)
        closers.append(close)
        return freshness(writer, take)

    yield run
    for close in reversed(closers):
        close()


def _check(ratio: float) -> None:
    print(f"freshness {ratio:.3f}")
    assert abs(ratio - 1.0) <= TOLERANCE, (
        f"the newest items' share of sampled batches is {ratio:.3f} of uniform sampling's "
        f"(tolerance {TOLERANCE})"
    )


def _iterator_take(it, ids):
    def take():
        return ids(next(it))

    return take


def test_numpy(loop):
    def make(client):
        it = datasets.numpy(client, "fresh", batch_size=BATCH)
        return _iterator_take(it, lambda b: b.data["step"][:, -1]), it.close

    _check(loop(make))


@pytest.mark.skipif(not _has("torch"), reason="PyTorch is not installed")
def test_torch(loop):
    def make(client):
        it = iter(datasets.TorchDataset(client, "fresh", batch_size=BATCH))
        return _iterator_take(it, lambda b: b.data["step"][:, -1].numpy()), it.close

    _check(loop(make))


@pytest.mark.skipif(not _has("jax"), reason="JAX is not installed")
def test_jax(loop):
    def make(client):
        it = datasets.JaxIterator(client, "fresh", batch_size=BATCH)
        return _iterator_take(it, lambda b: np.asarray(b.data["step"])[:, -1]), it.close

    _check(loop(make))


@pytest.mark.skipif(not _has("tensorflow"), reason="TensorFlow is not installed")
def test_trajectory_dataset(loop):
    def make(client):
        ds = datasets.TrajectoryDataset.from_table_signature(client, "fresh", BATCH)
        it = iter(ds.batch(BATCH))
        return _iterator_take(it, lambda b: b.data["step"].numpy()[:, -1]), lambda: None

    _check(loop(make))


@pytest.mark.skipif(not _has("tensorflow"), reason="TensorFlow is not installed")
def test_timestep_dataset(loop):
    import tensorflow as tf

    def make(client):
        ds = datasets.TimestepDataset(client, "fresh", {"step": tf.int64}, {"step": []}, BATCH)
        it = iter(ds.batch(2 * BATCH))  # 2 steps per item: rows [i - 1, i]
        return _iterator_take(
            it, lambda b: b.data["step"].numpy().reshape(-1, 2)[:, 1]
        ), lambda: None

    _check(loop(make))


def tf_agents_pipeline(
    client: reverb.Client,
    table: str,
    batch: int = BATCH,
    num_parallel_calls: int = 3,
    max_cycle_length: int = 32,
):
    """TF-Agents 0.19's ``ReverbReplayBuffer.as_dataset(sample_batch_size=batch, num_steps=2,
    num_parallel_calls=3).prefetch(3)`` for a ``sequence_length=2`` table, in plain tf.data."""
    import tensorflow as tf

    cycle_length = min(batch, max_cycle_length)
    per_interleave = batch // cycle_length

    def make_stream(_):
        ds = datasets.TrajectoryDataset(
            client,
            table,
            {"step": tf.int64},
            {"step": [2]},
            max_in_flight_samples_per_worker=3 * per_interleave,
            num_workers_per_iterator=min(-1, per_interleave),
        )

        def broadcast_info(sample):  # TF-Agents' per-sequence map: info along time
            info = tf.nest.map_structure(lambda t: tf.broadcast_to(t, [2]), sample.info)
            return sample.data, info

        return ds.map(broadcast_info)

    ds = tf.data.Dataset.range(cycle_length).interleave(
        make_stream, cycle_length=cycle_length, num_parallel_calls=num_parallel_calls
    )
    options = tf.data.Options()
    options.experimental_deterministic = False
    return ds.with_options(options).batch(batch, drop_remainder=True).prefetch(3)


@pytest.mark.skipif(not _has("tensorflow"), reason="TensorFlow is not installed")
def test_tf_agents_as_dataset_pipeline(loop):
    def make(client):
        it = iter(tf_agents_pipeline(client, "fresh"))
        return _iterator_take(it, lambda b: b[0]["step"].numpy()[:, -1]), lambda: None

    _check(loop(make))

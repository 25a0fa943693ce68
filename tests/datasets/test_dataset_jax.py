"""The JAX iterator: batches arrive as device arrays, prefetched ahead of the consumer."""

from __future__ import annotations

import time

import numpy as np
import pytest
from _dataset_helpers import TABLES_CODE, write_queue, write_trajectories

jax = pytest.importorskip("jax")
import ostinato.datasets as datasets  # noqa: E402
from _helpers import wait_until  # noqa: E402


def test_returns_device_arrays_shaped_like_the_signature(serve):
    client = serve(TABLES_CODE)
    write_trajectories(client, "uniform", 30)
    device = jax.devices()[0]
    with datasets.JaxIterator(client, "uniform", batch_size=8, max_samples=24, device=device) as it:
        batches = list(it)
    assert len(batches) == 3
    b = batches[0]
    assert isinstance(b.data["obs"], jax.Array) and isinstance(b.data["act"], jax.Array)
    assert b.data["obs"].devices() == {device}
    assert b.data["obs"].shape == (8, 3, 4) and b.data["obs"].dtype == np.float32
    assert b.data["act"].dtype == np.int32
    # info stays on the host, where keys (uint64) are needed for priority updates.
    assert isinstance(b.info.key, np.ndarray) and b.info.key.dtype == np.uint64


def test_prefetches_ahead_of_the_consumer(serve):
    client = serve(TABLES_CODE)
    write_queue(client, "queue", range(40))
    it = datasets.JaxIterator(client, "queue", batch_size=5, prefetch=2)
    first = next(it)
    assert np.asarray(first.data["x"]).tolist() == [0, 1, 2, 3, 4]
    wait_until(lambda: len(it._ahead) >= 2, 10, "two batches prefetched")
    assert len(it._ahead) == 2  # two more batches already on the device
    time.sleep(0.2)
    assert len(it._ahead) == 2  # and no more than that
    # A ready batch is returned even though the table cannot fill the ones behind it.
    rest = np.concatenate([np.asarray(next(it).data["x"]) for _ in range(7)])
    assert rest.tolist() == list(range(5, 40))
    t0 = time.monotonic()
    it.close()
    assert time.monotonic() - t0 < 5


def test_prefetch_zero_transfers_on_demand(serve):
    client = serve(TABLES_CODE)
    write_queue(client, "queue", range(10))
    with datasets.JaxIterator(client, "queue", batch_size=5, prefetch=0, max_samples=10) as it:
        assert [np.asarray(b.data["x"]).tolist() for b in it] == [[0, 1, 2, 3, 4], [5, 6, 7, 8, 9]]


def test_timeout_ends_the_stream_with_the_partial_batch(serve):
    client = serve(TABLES_CODE)
    write_queue(client, "queue", range(7))
    it = datasets.JaxIterator(client, "queue", batch_size=5, rate_limiter_timeout_ms=200)
    assert [b.data["x"].shape[0] for b in it] == [5, 2]
    assert it.timed_out


def test_arguments_are_checked(serve):
    client = serve(TABLES_CODE)
    with pytest.raises(ValueError, match=r"prefetch \(-1\)"):
        datasets.JaxIterator(client, "queue", batch_size=5, prefetch=-1)
    if not jax.config.read("jax_enable_x64"):
        with pytest.raises(ValueError, match="jax_enable_x64"):
            datasets.JaxIterator(client, "queue", batch_size=5, info_on_device=True)


def test_info_on_device_with_x64(serve):
    client = serve(TABLES_CODE)
    write_queue(client, "queue", range(4))
    before = jax.config.read("jax_enable_x64")
    jax.config.update("jax_enable_x64", True)
    try:
        with datasets.JaxIterator(
            client, "queue", batch_size=4, max_samples=4, info_on_device=True
        ) as it:
            b = next(it)
        assert isinstance(b.info.key, jax.Array) and b.info.key.dtype == np.uint64
        assert b.info.probability.dtype == np.float64
        assert np.asarray(b.data["x"]).tolist() == [0, 1, 2, 3]
    finally:
        jax.config.update("jax_enable_x64", before)

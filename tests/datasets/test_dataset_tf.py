"""TrajectoryDataset, TimestepDataset and TFClient with real TensorFlow (Reverb's §3.7-3.10)."""

from __future__ import annotations

import time

import numpy as np
import pytest
from _dataset_helpers import (
    TABLES_CODE,
    samples_completed,
    table_size,
    write_queue,
    write_trajectories,
)

tf = pytest.importorskip("tensorflow")
import ostinato as reverb  # noqa: E402
import ostinato.datasets as datasets  # noqa: E402
from _helpers import wait_until  # noqa: E402

TrajectoryDataset = datasets.TrajectoryDataset
TimestepDataset = datasets.TimestepDataset
DATASETS = [TrajectoryDataset, TimestepDataset]

OBS = {"obs": tf.float32, "act": tf.int32}


# -- constructor validation (Reverb's test_sampler_parameter_validation matrix) ---------------
@pytest.mark.parametrize("cls", DATASETS)
@pytest.mark.parametrize(
    "kwargs, ok",
    [
        ({}, True),
        ({"num_workers_per_iterator": 0}, False),
        ({"num_workers_per_iterator": -2}, False),
        ({"num_workers_per_iterator": 1}, True),
        ({"num_workers_per_iterator": -1}, True),
        ({"max_samples_per_stream": 0}, False),
        ({"max_samples_per_stream": 1}, True),
        ({"max_samples_per_stream": -1}, True),
        ({"max_in_flight_samples_per_worker": 0}, False),
        ({"max_in_flight_samples_per_worker": -1}, False),
        ({"max_in_flight_samples_per_worker": 1}, True),
        ({"rate_limiter_timeout_ms": -2}, False),
        ({"max_samples": 0}, False),
    ],
)
def test_parameter_validation(make_server, cls, kwargs, ok):
    server = make_server(reverb.Table.queue("q", 10))
    args = dict(
        server_address=f"localhost:{server.port}",
        table="q",
        dtypes=tf.float32,
        shapes=tf.TensorShape([]),
        max_in_flight_samples_per_worker=100,
    )
    args.update(kwargs)
    if ok:
        cls(**args)
    else:
        with pytest.raises(ValueError):
            cls(**args)


def test_dtypes_and_shapes_must_match_in_structure(make_server):
    server = make_server(reverb.Table.queue("q", 10))
    with pytest.raises(ValueError, match="same structure"):
        TrajectoryDataset(
            f"localhost:{server.port}", "q", {"a": tf.float32, "b": tf.int32}, {"a": [3]}, 10
        )


# -- elements ---------------------------------------------------------------------------------
def test_trajectory_elements_match_the_signature(serve):
    client = serve(TABLES_CODE)
    write_trajectories(client, "uniform", 20)
    ds = TrajectoryDataset.from_table_signature(client, "uniform", 8, max_samples=12)
    assert isinstance(ds, tf.data.Dataset)
    spec = ds.element_spec
    assert isinstance(spec, reverb.ReplaySample) and isinstance(spec.info, reverb.SampleInfo)
    assert spec.data == {
        "obs": tf.TensorSpec([3, 4], tf.float32),
        "act": tf.TensorSpec([3], tf.int32),
    }
    assert [s.dtype for s in spec.info] == [tf.uint64, tf.float64, tf.int64, tf.float64, tf.int32]
    elements = list(ds)
    assert len(elements) == 12
    e = elements[0]
    assert e.data["obs"].shape == (3, 4) and e.data["obs"].dtype == tf.float32
    assert e.data["act"].dtype == tf.int32 and e.info.key.dtype == tf.uint64
    batches = list(ds.batch(5))
    assert [b.info.key.shape[0] for b in batches] == [5, 5, 2]
    assert batches[0].data["obs"].shape == (5, 3, 4)


def test_explicit_specs_with_lists_become_tuples(serve):
    client = serve(TABLES_CODE)
    write_trajectories(client, "nosig", 5)
    ds = TrajectoryDataset(client, "nosig", [tf.int32, tf.float32], [[3], [3, 4]], 4, max_samples=2)
    assert isinstance(ds.element_spec.data, tuple)
    got = list(ds)
    assert len(got) == 2 and isinstance(got[0].data, tuple)
    assert got[0].data[1].shape == (3, 4)


def test_empty_nests_are_empty_nests_in_dtypes_and_shapes(serve):
    # TF-Agents' DQN: policy_info=() in the data spec gives () in both the dtypes and the
    # shapes; it is an empty nest in both, not a scalar shape.
    client = serve(TABLES_CODE)
    write_trajectories(client, "nosig", 5)
    dtypes = {"act": tf.int32, "info": (), "obs": tf.float32, "more": {"x": ()}}
    shapes = {
        "act": tf.TensorShape([3]),
        "info": (),
        "obs": tf.TensorShape([3, 4]),
        "more": {"x": ()},
    }
    ds = TrajectoryDataset(client, "nosig", dtypes, shapes, 4, max_samples=3)
    assert ds.element_spec.data["info"] == () and ds.element_spec.data["more"] == {"x": ()}
    got = list(ds.batch(3))
    assert got[0].data["info"] == () and got[0].data["obs"].shape == (3, 3, 4)
    # () where a dtype stands is a scalar shape
    ds = TrajectoryDataset(client, "queue", {"x": tf.int64}, {"x": ()}, 1, max_samples=1)
    assert ds.element_spec.data["x"].shape == ()


def test_variable_length_trajectories(serve):
    client = serve(TABLES_CODE)
    from _dataset_helpers import write_varlen

    write_varlen(client, "varlen", list(range(1, 11)))
    ds = TrajectoryDataset(client, "varlen", [tf.float64], [[None, 2]], 5, max_samples=200)
    lengths = {int(e.data[0].shape[0]) for e in ds}
    assert lengths == set(range(1, 11))


def test_timestep_dataset_yields_steps(serve):
    client = serve(TABLES_CODE)
    write_trajectories(client, "uniform", 10)
    ds = TimestepDataset(client, "uniform", OBS, {"obs": [4], "act": []}, 10, max_samples=2)
    steps = list(ds)
    assert len(steps) == 6
    assert steps[0].data["obs"].shape == (4,)
    assert int(steps[1].data["act"]) == int(steps[0].data["act"]) + 1
    assert steps[0].info.key == steps[2].info.key
    b = next(iter(ds.batch(3, drop_remainder=True)))
    assert b.info.key.shape == (3,) and b.data["obs"].shape == (3, 4)


def test_multiple_iterators_are_independent(serve):
    client = serve(TABLES_CODE)
    write_queue(client, "fifo_keep", range(1))
    ds = TimestepDataset(client, "fifo_keep", tf.int64, [], 1).batch(5)
    for _ in range(3):
        assert next(iter(ds)).data.shape == (5,)


# -- max_samples and timeouts (Reverb's test_max_samples and test_timeout) -------------------
@pytest.mark.parametrize("cls", DATASETS)
@pytest.mark.parametrize("workers, in_flight", [(1, 1), (1, 5), (3, 1), (3, 5)])
def test_max_samples(serve, cls, workers, in_flight):
    client = serve(TABLES_CODE)
    write_queue(client, "queue", range(10))
    ds = cls(
        client,
        "queue",
        {"x": tf.int64},
        {"x": []},
        in_flight,
        num_workers_per_iterator=workers,
        max_samples=4,
    )
    got = [int(e.data["x"]) for e in ds]
    assert got == [0, 1, 2, 3]
    time.sleep(0.1)
    assert table_size(client, "queue") == 6
    nxt = next(iter(cls(client, "queue", {"x": tf.int64}, {"x": []}, 1, max_samples=1)))
    assert int(nxt.data["x"]) == 4


@pytest.mark.parametrize("in_flight", [1, 3, 7])
def test_respects_max_in_flight_samples_per_worker(serve, in_flight):
    client = serve(TABLES_CODE)
    write_trajectories(client, "uniform", 20)
    ds = TrajectoryDataset.from_table_signature(
        client, "uniform", in_flight, num_workers_per_iterator=1
    )
    before = samples_completed(client, "uniform")
    it = iter(ds)
    for _ in range(8):
        next(it)
        assert (samples_completed(client, "uniform") - before) % in_flight == 0


@pytest.mark.parametrize("timeout_ms", [0, 1000])
def test_timeout_ends_the_sequence(serve, timeout_ms):
    client = serve(TABLES_CODE)
    ds = TimestepDataset(
        client, "empty", OBS, {"obs": [4], "act": []}, 10, rate_limiter_timeout_ms=timeout_ms
    )
    t0 = time.monotonic()
    assert list(ds) == []
    dt = time.monotonic() - t0
    assert timeout_ms / 1000 <= dt < 10


def test_timeout_delivers_sampled_items_then_ends(serve):
    client = serve(TABLES_CODE)
    write_queue(client, "queue", range(7))
    ds = TrajectoryDataset(
        client, "queue", {"x": tf.int64}, {"x": []}, 3, rate_limiter_timeout_ms=200
    ).batch(5)
    got = [b.data["x"].numpy().tolist() for b in ds]
    assert got == [[0, 1, 2, 3, 4], [5, 6]]


# -- signature checks -------------------------------------------------------------------------
def test_incompatible_dtype_is_rejected(serve):
    client = serve(TABLES_CODE)
    write_trajectories(client, "uniform", 3)
    ds = TrajectoryDataset(
        client, "uniform", {"obs": tf.int64, "act": tf.int32}, {"obs": [3, 4], "act": [3]}, 4
    )
    with pytest.raises(
        tf.errors.InvalidArgumentError, match="Requested incompatible tensor at flattened index 1"
    ):
        next(iter(ds))


def test_inconsistent_signature_size_is_rejected(serve):
    client = serve(TABLES_CODE)
    write_trajectories(client, "uniform", 3)
    ds = TrajectoryDataset(client, "uniform", [tf.float32], [[3, 4]], 4)
    with pytest.raises(
        tf.errors.InvalidArgumentError,
        match="Requested 1 tensors, but table signature shows 2 tensors",
    ):
        next(iter(ds))


def test_received_data_is_checked_without_a_signature(serve):
    client = serve(TABLES_CODE)
    write_trajectories(client, "nosig", 3)
    ds = TrajectoryDataset(client, "nosig", [tf.int32, tf.float32], [[3], []], 4)
    with pytest.raises(
        tf.errors.InvalidArgumentError, match=r"Specification has \(dtype, shape\): \(float, \[\]\)"
    ):
        next(iter(ds))


# -- from_table_signature errors ----------------------------------------------------------------
def test_from_table_signature_errors(serve):
    client = serve(TABLES_CODE)
    with pytest.raises(
        ValueError,
        match="does not contain any table named not_found. Found: "
        "empty, fifo_keep, nosig, queue, uniform, varlen.",
    ):
        TrajectoryDataset.from_table_signature(client, "not_found", 10)
    with pytest.raises(ValueError, match="Table nosig at .* does not have a signature."):
        TimestepDataset.from_table_signature(client, "nosig", 10)


def test_from_table_signature_server_not_found():
    with pytest.raises(reverb.DeadlineExceededError):
        TrajectoryDataset.from_table_signature("localhost:1", "t", 10, get_signature_timeout_secs=1)


def test_bounded_specs_become_plain_specs(make_server):
    class BoundedTensorSpec(reverb.TensorSpec):
        __slots__ = ("minimum", "maximum")

        def __init__(self, shape, dtype, minimum, maximum):
            super().__init__(shape, dtype)
            self.minimum, self.maximum = minimum, maximum

    server = make_server(
        reverb.Table.queue("q", 10, signature={"a": BoundedTensorSpec([2], np.int32, 0, 3)})
    )
    ds = TrajectoryDataset.from_table_signature(f"localhost:{server.port}", "q", 10)
    assert ds.element_spec.data == {"a": tf.TensorSpec([2], tf.int32)}


# -- TFClient ---------------------------------------------------------------------------------
def test_tf_client_insert_sample_update_inside_tf_function(serve):
    client = serve(TABLES_CODE)
    tfc = datasets.TFClient(client)
    tfc.insert(
        [tf.constant(7, tf.int64)], tf.constant(["fifo_keep"]), tf.constant([1.0], tf.float64)
    )

    @tf.function
    def step():
        s = tfc.sample("fifo_keep", [tf.int64])
        tfc.update_priorities(
            "fifo_keep", tf.reshape(s.info.key, [1]), tf.constant([3.0], tf.float64)
        )
        tfc.insert([s.data[0] + 1], tf.constant(["fifo_keep"]), tf.constant([1.0], tf.float64))
        return s

    s = step()
    assert int(s.data[0]) == 7 and s.info.key.dtype == tf.uint64
    assert int(s.info.times_sampled) == 1
    s2 = tfc.sample("fifo_keep", [tf.int64])
    assert float(s2.info.priority) == 3.0 and int(s2.info.times_sampled) == 2
    assert table_size(client, "fifo_keep") == 2


def test_tf_client_errors(serve):
    client = serve(TABLES_CODE)
    tfc = datasets.TFClient(client)
    tfc.insert(
        [tf.constant(1.0, tf.float32)], tf.constant(["nosig"]), tf.constant([1.0], tf.float64)
    )
    with pytest.raises(tf.errors.NotFoundError):
        tfc.sample("missing", [tf.float32])
    with pytest.raises(tf.errors.InternalError):
        tfc.sample("nosig", [tf.int64])
    with pytest.raises(tf.errors.InvalidArgumentError):
        tfc.sample("nosig", [tf.float32, tf.float32])
    with pytest.raises(tf.errors.InvalidArgumentError):
        tfc.update_priorities(
            "nosig", tf.constant([1, 2], tf.uint64), tf.constant([1.0], tf.float64)
        )
    with pytest.raises(ValueError, match="tf.float64"):
        tfc.insert([tf.constant(1.0)], tf.constant(["nosig"]), tf.constant([1.0], tf.float32))
    with pytest.raises(ValueError, match="rank 1"):
        tfc.insert([tf.constant(1.0)], tf.constant("nosig"), tf.constant(1.0, tf.float64))
    with pytest.raises(ValueError, match="same shape"):
        tfc.insert([tf.constant(1.0)], tf.constant(["nosig"]), tf.constant([1.0, 2.0], tf.float64))


def test_tf_client_server_address(make_server):
    server = make_server(reverb.Table.queue("q", 10))
    address = f"localhost:{server.port}"
    assert datasets.TFClient(address).server_address == address
    assert datasets.TFClient(reverb.Client(address)).server_address == address
    assert reverb.TFClient(address).server_address == address


def _bounded(fn, timeout):
    """Runs fn on a daemon thread; returns its result, or fails the test if it hangs."""
    import threading

    out = {}

    def run():
        try:
            out["value"] = fn()
        except BaseException as e:  # noqa: BLE001
            out["error"] = e

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(timeout)
    assert not t.is_alive(), f"still blocked after {timeout}s"
    if "error" in out:
        raise out["error"]
    return out.get("value")


@pytest.mark.parametrize("remote", [False, True])
def test_deleting_an_iterator_waiting_on_an_empty_table_returns_promptly(make_server, remote):
    server = make_server(reverb.Table.queue("q", 10))
    client = reverb.Client(
        f"localhost:{server.port}", in_process=not remote, unavailable_timeout=10
    )
    client.insert([np.int64(1)], {"q": 1.0})
    ds = TrajectoryDataset(client, "q", (tf.int64,), (tf.TensorShape([1]),), 2)
    it = iter(ds.batch(1).prefetch(2))
    assert int(next(it).data[0][0, 0]) == 1
    # The prefetch thread is now waiting on the empty table.
    wait_until(
        lambda: client.metrics()["tables"]["q"]["blocked_samplers"] >= 1,
        10,
        "the prefetch thread to wait on the empty table",
    )

    def delete():
        nonlocal it
        t0 = time.monotonic()
        del it
        return time.monotonic() - t0

    assert _bounded(delete, 20) < 5


def test_interleaved_streams_deliver_every_sampled_item(make_server):
    # TF-Agents' as_dataset(sample_batch_size=3, num_parallel_calls=3) over a table whose 3
    # items may each be sampled 10 times: all 30 samples reach the consumer.
    table = reverb.Table(
        "t",
        sampler=reverb.selectors.Uniform(),
        remover=reverb.selectors.Fifo(),
        max_size=3,
        max_times_sampled=10,
        rate_limiter=reverb.rate_limiters.MinSize(1),
    )
    server = make_server(table)
    client = reverb.Client(f"localhost:{server.port}")
    with client.trajectory_writer(1) as w:
        for i in range(3):
            w.append(np.int64(i))
            w.create_item("t", 1.0, w.history[-1:])

    def make(_):
        return TrajectoryDataset(client, "t", tf.int64, tf.TensorShape([1]), 1)

    ds = tf.data.Dataset.range(3).interleave(make, cycle_length=3, num_parallel_calls=3)
    options = tf.data.Options()
    options.experimental_deterministic = False
    it = iter(ds.with_options(options).batch(3, drop_remainder=True))

    def take():
        counts = [0, 0, 0]
        for _ in range(10):
            for x in next(it).data.numpy().reshape(-1):
                counts[int(x)] += 1
        return counts

    assert _bounded(take, 60) == [10, 10, 10]
    assert table.size == 0


@pytest.mark.parametrize("remote", [False, True])
def test_interleaved_readers_get_small_chunks_from_a_bounded_shared_stream(make_server, remote):
    # Issue 22: TF-Agents interleaves 32 copies of one dataset. Each reader is handed at most
    # max_in_flight items per fetch (a larger chunk waits in its unbatch while the other 31
    # are read, and goes stale), and the shared stream holds no more than the readers' own
    # streams would.
    server = make_server(
        reverb.Table(
            "t",
            sampler=reverb.selectors.Uniform(),
            remover=reverb.selectors.Fifo(),
            max_size=1000,
            rate_limiter=reverb.rate_limiters.MinSize(1),
        )
    )
    client = reverb.Client(f"localhost:{server.port}", in_process=not remote)
    with client.trajectory_writer(1) as w:
        for i in range(500):
            w.append(np.int64(i))
            w.create_item("t", 1.0, w.history[-1:])
    ds = TrajectoryDataset(client, "t", tf.int64, tf.TensorShape([1]), 6)
    source = ds._source
    sids = [source.open() for _ in range(32)]
    before = samples_completed(client, "t")
    handed = 0
    for _ in range(5):
        for sid in sids:
            deadline = time.monotonic() + 10
            while True:
                chunk = source.fetch(sid)
                if len(chunk[1]) or time.monotonic() > deadline:
                    break
            assert 1 <= len(chunk[1]) <= 6
            handed += len(chunk[1])
    time.sleep(0.3)  # the shared stream fills up to what it may hold
    shared = source._shared
    held = samples_completed(client, "t") - before - handed
    assert held <= 32 * 6 * shared.num_workers
    source.close()

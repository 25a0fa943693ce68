"""The ReplayBuffer facade: TF-Agents' ReverbReplayBuffer semantics for numpy, torch, jax, tf."""

from __future__ import annotations

import numpy as np
import pytest

import ostinato as reverb
from ostinato import errors, observers

SPEC = reverb.TensorSpec((), np.int64)


def _fifo_once(name="t", size=1000):
    return reverb.Table(
        name,
        reverb.selectors.Fifo(),
        reverb.selectors.Fifo(),
        size,
        reverb.rate_limiters.MinSize(1),
        max_times_sampled=1,
    )


def _write(client, table, episodes, priority=1.0):
    with client.trajectory_writer(16) as w:
        for ep in episodes:
            for x in ep:
                w.append(np.int64(x))
            w.create_item(table, priority, w.history[-len(ep) :])
            w.end_episode()


def _as_lists(ds, limit=None):
    out = []
    for i, (data, _) in enumerate(ds):
        if limit is not None and i >= limit:
            break
        out.append(np.asarray(data).tolist())
    return out


@pytest.fixture()
def uniform(make_server):
    server = make_server(
        reverb.Table(
            "u",
            reverb.selectors.Uniform(),
            reverb.selectors.Fifo(),
            100,
            reverb.rate_limiters.MinSize(1),
        )
    )
    return server


# -- construction ---------------------------------------------------------------------------------
def test_exactly_one_of_server_address_or_local_server(uniform):
    with pytest.raises(ValueError, match="Exactly one of the server_address or local_server"):
        observers.ReplayBuffer(SPEC, "u", 2)
    with pytest.raises(ValueError, match="Exactly one"):
        observers.ReplayBuffer(
            SPEC, "u", 2, server_address=uniform.localhost_client(), local_server=uniform
        )


@pytest.mark.parametrize(
    "kwargs,name",
    [
        (dict(sequence_length=0), "sequence_length"),
        (dict(dataset_buffer_size=0), "dataset_buffer_size"),
        (dict(max_cycle_length=0), "max_cycle_length"),
        (dict(num_workers_per_iterator=0), "num_workers_per_iterator"),
        (dict(max_samples_per_stream=-2), "max_samples_per_stream"),
        (dict(rate_limiter_timeout_ms=-5), "rate_limiter_timeout_ms"),
        (dict(data_spec=[SPEC]), "lists"),
        (dict(data_spec={"x": 3}), "data_spec"),
        (dict(table_name=""), "table_name"),
    ],
)
def test_constructor_arguments(uniform, kwargs, name):
    kwargs = {"table_name": "u", **kwargs}
    with pytest.raises(ValueError, match=name):
        observers.ReplayBuffer(local_server=uniform, **kwargs)


def test_unknown_table(uniform):
    with pytest.raises(errors.TableNotFoundError, match="nope"):
        observers.ReplayBuffer(SPEC, "nope", 2, local_server=uniform)


def test_table_methods(uniform):
    client = uniform.localhost_client()
    rb = observers.ReplayBuffer(SPEC, "u", 3, server_address=client)
    assert rb.capacity == 100 and rb.num_frames() == 0
    assert rb.get_table_info().name == "u" and rb.py_client is client
    with observers.TrajectoryObserver(client, "u", 3) as obs:
        for i in range(6):
            obs({"step_type": np.int32(1), "x": np.int64(i)})
    assert rb.num_frames() == 4  # items, not steps (TF-Agents' meaning)
    rb.clear()
    assert rb.num_frames() == 0
    with pytest.raises(NotImplementedError, match="add_batch"):
        rb.add_batch(None)
    with pytest.raises(NotImplementedError, match="get_next"):
        rb.get_next()
    with pytest.raises(NotImplementedError, match="gather_all"):
        rb.gather_all()
    assert rb.stateful_dataset and rb.local_server is None


# -- as_dataset -----------------------------------------------------------------------------------
def test_num_steps_checks(uniform):
    rb = observers.ReplayBuffer(SPEC, "u", 4, local_server=uniform)
    with pytest.raises(ValueError, match=r"num_steps > sequence_length \(5 vs. 4\)"):
        rb.as_dataset(num_steps=5)
    with pytest.raises(ValueError, match=r"not a multiple of num_steps \(3 vs. 4\)"):
        rb.as_dataset(num_steps=3)
    with pytest.raises(ValueError, match="num_parallel_calls cannot be bigger"):
        rb.as_dataset(2, num_parallel_calls=3)
    with pytest.raises(ValueError, match="single deterministic pass"):
        rb.as_dataset(single_deterministic_pass=True)
    with pytest.raises(ValueError, match="framework"):
        rb.as_dataset(framework="mxnet")
    with pytest.raises(ValueError, match="sample_batch_size"):
        rb.as_dataset(0)
    with pytest.raises(ValueError, match="sequence_preprocess_fn"):
        rb.as_dataset(sequence_preprocess_fn=3)


def test_single_deterministic_pass_splits_variable_length_items(make_server):
    """TF-Agents' test: [1,2,3] and [10,20,30,40,50] read with num_steps=2."""
    server = make_server(_fifo_once())
    _write(server.localhost_client(), "t", [[1, 2, 3], [10, 20, 30, 40, 50]])
    rb = observers.ReplayBuffer(SPEC, "t", None, local_server=server, rate_limiter_timeout_ms=100)
    ds = rb.as_dataset(num_steps=2, single_deterministic_pass=True)
    assert _as_lists(ds) == [[1, 2], [10, 20], [30, 40]]


def test_whole_items_and_info_broadcast(make_server):
    server = make_server(_fifo_once())
    _write(server.localhost_client(), "t", [[1, 2, 3], [4, 5, 6], [7, 8, 9]], priority=2.0)
    rb = observers.ReplayBuffer(SPEC, "t", 3, local_server=server, rate_limiter_timeout_ms=100)
    elements = list(rb.as_dataset(2, single_deterministic_pass=True))
    assert len(elements) == 1  # the incomplete last batch is dropped
    data, info = elements[0]
    assert data.tolist() == [[1, 2, 3], [4, 5, 6]]
    for field in info:
        assert field.shape == (2, 3)  # every info field repeated along time
    assert (info.key[:, 0] != info.key[1, 0]).any() and (info.key == info.key[:, :1]).all()
    assert info.priority.tolist() == [[2.0] * 3] * 2 and info.key.dtype == np.uint64


def test_split_batches_and_preprocess(make_server):
    server = make_server(_fifo_once())
    _write(server.localhost_client(), "t", [[i * 10 + j for j in range(4)] for i in range(4)])
    rb = observers.ReplayBuffer(SPEC, "t", 4, local_server=server, rate_limiter_timeout_ms=100)
    ds = rb.as_dataset(
        3, num_steps=2, single_deterministic_pass=True, sequence_preprocess_fn=lambda x: x * 2
    )
    got = [np.asarray(d).tolist() for d, _ in ds]
    assert got == [[[0, 2], [4, 6], [20, 22]], [[24, 26], [40, 42], [44, 46]]]


def test_shuffled_split_keeps_chunks_whole(uniform):
    client = uniform.localhost_client()
    _write(client, "u", [[i * 10 + j for j in range(4)] for i in range(5)])
    rb = observers.ReplayBuffer(SPEC, "u", 4, local_server=uniform)
    data, info = next(iter(rb.as_dataset(8, num_steps=2, seed=1)))
    assert data.shape == (8, 2) and info.key.shape == (8, 2)
    assert ((data[:, 1] - data[:, 0]) == 1).all() and (data[:, 0] % 2 == 0).all()


def test_sequence_length_mismatch_raises_when_iterated(uniform):
    _write(uniform.localhost_client(), "u", [[1, 2, 3]])
    rb = observers.ReplayBuffer(SPEC, "u", 2, local_server=uniform)
    with pytest.raises(ValueError, match="sequence_length is 2"):
        next(iter(rb.as_dataset(1)))


def test_structure_from_data_spec_or_signature(make_server):
    sig = {"a": reverb.TensorSpec([2], np.int64), "b": reverb.TensorSpec([2, 3], np.float32)}
    server = make_server(
        reverb.Table(
            "s",
            reverb.selectors.Uniform(),
            reverb.selectors.Fifo(),
            10,
            reverb.rate_limiters.MinSize(1),
            signature=sig,
        ),
        reverb.Table(
            "n",
            reverb.selectors.Uniform(),
            reverb.selectors.Fifo(),
            10,
            reverb.rate_limiters.MinSize(1),
        ),
    )
    client = server.localhost_client()
    with client.trajectory_writer(2) as w:
        for t in range(2):
            w.append({"a": np.int64(t), "b": np.full(3, t, np.float32)})
        for table in ("s", "n"):
            w.create_item(table, 1.0, {k: h[:] for k, h in w.history.items()})
    step_spec = {"a": reverb.TensorSpec([], np.int64), "b": reverb.TensorSpec([3], np.float32)}
    for table, spec in (("s", None), ("n", step_spec)):
        rb = observers.ReplayBuffer(spec, table, 2, local_server=server)
        data, info = next(iter(rb.as_dataset(4)))
        assert data["a"].shape == (4, 2) and data["b"].shape == (4, 2, 3)
    rb = observers.ReplayBuffer(None, "n", 2, local_server=server)
    data, _ = next(iter(rb.as_dataset(4)))
    assert isinstance(data, list) and len(data) == 2  # no spec, no signature: flat columns


def test_torch_dataset_and_update_priorities(make_server):
    torch = pytest.importorskip("torch")
    server = make_server(
        reverb.Table(
            "p",
            reverb.selectors.Prioritized(1.0),
            reverb.selectors.Fifo(),
            100,
            reverb.rate_limiters.MinSize(1),
        )
    )
    client = server.localhost_client()
    _write(client, "p", [[i, i + 1] for i in range(0, 20, 2)])
    rb = observers.ReplayBuffer(SPEC, "p", 2, local_server=server)
    ds = rb.as_dataset(4, framework="torch")
    assert isinstance(ds, torch.utils.data.IterableDataset)
    data, info = next(iter(ds))
    assert isinstance(data, torch.Tensor) and data.shape == (4, 2) and data.dtype == torch.int64
    assert info.key.dtype == torch.uint64 and info.key.shape == (4, 2)
    # Priorities updated from the [B, T] keys a dataset gives: the item of key k gets 0.
    keys = info.key
    rb.update_priorities(keys, torch.zeros(4, dtype=torch.float64))
    stored = {
        int(s.info.key): float(s.info.priority)
        for s in client.sample("p", 200, emit_timesteps=False)
    }
    for k in np.unique(keys[:, 0].numpy()):
        assert int(k) not in stored  # priority 0: never sampled again
    with pytest.raises(ValueError, match="do not fit"):
        rb.update_priorities(np.zeros((2, 2), np.uint64), np.zeros(3))
    loader = torch.utils.data.DataLoader(ds, batch_size=None)
    batch, _ = next(iter(loader))
    assert batch.shape == (4, 2)


def test_jax_dataset(uniform):
    jax = pytest.importorskip("jax")
    _write(uniform.localhost_client(), "u", [[1, 2], [3, 4]])
    rb = observers.ReplayBuffer(SPEC, "u", 2, local_server=uniform)
    data, info = next(iter(rb.as_dataset(3, framework="jax")))
    assert isinstance(data, jax.Array) and data.shape == (3, 2)
    assert isinstance(info.key, np.ndarray) and info.key.dtype == np.uint64


def test_tf_dataset_matches_numpy(make_server):
    pytest.importorskip("tensorflow")
    episodes = [[1, 2, 3], [10, 20, 30, 40, 50], [7], [4, 5, 6, 7]]
    server = make_server(_fifo_once("np"), _fifo_once("tf"))
    client = server.localhost_client()
    _write(client, "np", episodes)
    _write(client, "tf", episodes)
    got = {}
    for name, fw in (("np", "numpy"), ("tf", "tf")):
        rb = observers.ReplayBuffer(
            SPEC, name, None, local_server=server, rate_limiter_timeout_ms=100
        )
        ds = rb.as_dataset(num_steps=2, single_deterministic_pass=True, framework=fw)
        got[name] = [(np.asarray(d).tolist(), np.asarray(i.key).shape) for d, i in ds]
    assert (
        got["np"]
        == got["tf"]
        == [([1, 2], (2,)), ([10, 20], (2,)), ([30, 40], (2,)), ([4, 5], (2,)), ([6, 7], (2,))]
    )


def test_observers_end_to_end_to_dataset(queue_server):
    gym = pytest.importorskip("gymnasium")
    envs = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1")] * 4)
    client = queue_server.localhost_client()
    observer = observers.BatchedTrajectoryObserver(client, "a", 2, env=envs)
    obs, info = envs.reset(seed=0)
    observer.on_reset(obs, info)
    for _ in range(50):
        actions = envs.action_space.sample()
        obs, rewards, terminated, truncated, info = envs.step(actions)
        observer.on_step(obs, actions, rewards, terminated, truncated, info)
    observer.flush()
    spec = observers.gym_step_spec(envs.single_observation_space, envs.single_action_space)
    rb = observers.ReplayBuffer(spec, "a", 2, local_server=queue_server, rate_limiter_timeout_ms=50)
    n = rb.num_frames()
    batches = list(rb.as_dataset(16, single_deterministic_pass=True))
    assert len(batches) == n // 16
    data, info = batches[0]
    assert data["observation"].shape == (16, 2, 4) and info.key.shape == (16, 2)
    observer.close()


def test_torch_dataloader_worker_processes(uniform):
    torch = pytest.importorskip("torch")
    _write(uniform.localhost_client(), "u", [[i, i + 1] for i in range(10)])
    rb = observers.ReplayBuffer(SPEC, "u", 2, local_server=uniform)
    loader = torch.utils.data.DataLoader(
        rb.as_dataset(4, framework="torch"),
        batch_size=None,
        num_workers=1,
        multiprocessing_context="spawn",
    )
    it = iter(loader)
    data, info = next(it)  # the worker reached the server over gRPC
    assert data.shape == (4, 2) and ((data[:, 1] - data[:, 0]) == 1).all()
    assert info.key.dtype == torch.uint64
    del it

"""The batched trajectory observers (one VectorTrajectoryWriter for all environments) write
exactly the items of one TrajectoryObserver per environment, in the same order environment by
environment: gymnasium transitions in every autoreset mode, and batched step dicts, for every
combination of sequence_length, stride_length, padding and tiling."""

from __future__ import annotations

import numpy as np
import pytest
from _observer_helpers import FIRST, LAST, MID
from hypothesis import given, settings
from hypothesis import strategies as st

import ostinato as reverb
from ostinato import observers

MODES = ["NextStep", "SameStep", "Disabled"]


def _per_env(client, table, n):
    """Items of ``table`` by environment (the first observation's tag), in table order."""
    size = client.server_info()[table].current_size
    out: dict[int, list] = {i: [] for i in range(n)}
    if not size:
        return out
    for s in client.sample(table, size, emit_timesteps=False):
        data = [np.asarray(x) for x in s.data]
        obs = data[3] if len(data) == 6 else data[1]  # sorted keys: observation, x
        env = int(np.asarray(obs).reshape(len(obs), -1)[0, 0]) - 1
        out[env].append(tuple(x.tobytes() for x in data))
    return out


def _observers(client, kind, n, mode, **kw):
    cls = {
        "traj": (observers.BatchedTrajectoryObserver, observers.TrajectoryObserver),
        "seq": (observers.BatchedTrajectorySequenceObserver, observers.TrajectorySequenceObserver),
    }[kind]
    ours = cls[0](client, "a", num_envs=n, autoreset_mode=mode, **kw)
    ref = observers.BatchedObserver(
        lambda: cls[1](client, "b", **kw), num_envs=n, autoreset_mode=mode
    )
    return ours, ref


def _gym_run(ours, ref, n, mode, steps, seed):
    """A vector env whose env ``i`` observes ``[i + 1, t]``; episodes end at random."""
    rng = np.random.default_rng(seed)
    t = 0

    def obs():
        nonlocal t
        t += 1
        return np.stack([np.arange(1, n + 1), np.full(n, t)], axis=1).astype(np.float32)

    o = obs()
    for x in (ours, ref):
        x.on_reset(o, {})
    for _ in range(steps):
        actions = rng.integers(0, 3, n)
        rewards = rng.standard_normal(n)
        terminated = rng.random(n) < 0.15
        truncated = ~terminated & (rng.random(n) < 0.05)
        done = terminated | truncated
        o = obs()
        info = {}
        if mode == "SameStep" and done.any():
            final = np.empty(n, object)
            for i in range(n):
                final[i] = o[i] + np.float32([0, 1000])
            info["final_obs"] = final
        for x in (ours, ref):
            x.on_step(o, actions, rewards, terminated, truncated, info)
        if mode == "Disabled" and done.any():
            o2 = obs()
            for x in (ours, ref):
                x.on_reset(o2, {}, reset_mask=done)
            o = np.where(done[:, None], o2, o)
        if rng.random() < 0.03:  # an abandoned batch of episodes (envs.reset())
            o = obs()
            for x in (ours, ref):
                x.on_reset(o, {})


def _same_outcome(a, b):
    """Calls both; they must both return or both raise the same exception type."""
    errors = []
    for f in (a, b):
        try:
            f()
            errors.append(None)
        except ValueError as e:
            errors.append(type(e))
    assert errors[0] == errors[1]


CONFIGS = st.fixed_dictionaries(
    {
        "sequence_length": st.integers(1, 4),
        "stride_length": st.integers(1, 3),
        "pad": st.booleans(),
        "tile": st.booleans(),
    }
)


def _window_kwargs(cfg):
    return {
        "sequence_length": cfg["sequence_length"],
        "stride_length": cfg["stride_length"],
        "pad_end_of_episodes": cfg["pad"],
        "tile_end_of_episodes": cfg["pad"] and cfg["tile"],
    }


@settings(max_examples=30, deadline=None)
@given(
    cfg=CONFIGS,
    kind=st.sampled_from(["traj", "seq"]),
    mode=st.sampled_from(MODES),
    n=st.integers(1, 4),
    seed=st.integers(0, 10_000),
)
def test_gym_transitions_like_one_observer_per_env(cfg, kind, mode, n, seed):
    server = reverb.Server([reverb.Table.queue("a", 100_000), reverb.Table.queue("b", 100_000)])
    try:
        client = server.localhost_client()
        kw = _window_kwargs(cfg)
        ours, ref = _observers(client, kind, n, mode, **kw)
        _gym_run(ours, ref, n, mode, 40, seed)
        ours.flush()
        ref.flush()
        assert _per_env(client, "a", n) == _per_env(client, "b", n)
        running = ours.episodes_in_progress
        assert running.tolist() == [o._gym.in_progress for o in ref.observers]
        _same_outcome(ours.reset, ref.reset)
        ours.close()
        ref.close()
        assert _per_env(client, "a", n) == _per_env(client, "b", n)
    finally:
        server.stop()


@settings(max_examples=30, deadline=None)
@given(
    cfg=CONFIGS,
    kind=st.sampled_from(["traj", "seq"]),
    seed=st.integers(0, 10_000),
    # step types as environments give them: any integer dtype
    st_type=st.sampled_from([np.int32, np.int64, np.uint8, np.int16]),
)
def test_batched_step_dicts_like_one_observer_per_env(cfg, kind, seed, st_type):
    n = 3
    server = reverb.Server([reverb.Table.queue("a", 100_000), reverb.Table.queue("b", 100_000)])
    try:
        client = server.localhost_client()
        kw = _window_kwargs(cfg)
        ours, ref = _observers(client, kind, n, None, **kw)
        rng = np.random.default_rng(seed)
        prev_last = np.ones(n, bool)
        for t in range(40):
            last = ~prev_last & (rng.random(n) < 0.2)
            st_ = np.where(prev_last, FIRST, np.where(last, LAST, MID))
            st_ = st_.astype(st_type)
            prev_last = last
            step = {
                "step_type": st_,
                "x": np.stack([np.arange(1, n + 1), np.full(n, t + 1)], axis=1).astype(np.int64),
            }
            ours(step)
            ref(step)
        ours.flush()
        ref.flush()
        assert _per_env(client, "a", n) == _per_env(client, "b", n)
        assert ours.cached_steps.tolist() == [o.cached_steps for o in ref.observers]
        ours.close()
        ref.close()
    finally:
        server.stop()


def test_errors_write_nothing(queue_server):
    client = queue_server.localhost_client()
    observer = observers.BatchedTrajectoryObserver(client, "a", 1, num_envs=2)
    with pytest.raises(ValueError, match="open episode"):
        observer.on_step(np.zeros((2, 3)), np.zeros(2), np.zeros(2), np.zeros(2), np.zeros(2))
    observer.on_reset(np.zeros((2, 3)))
    with pytest.raises(ValueError, match="observation"):
        observer.on_step(np.zeros((3, 3)), np.zeros(2), np.zeros(2), np.zeros(2), np.zeros(2))
    with pytest.raises(ValueError, match="step_type"):
        observer({"x": np.zeros(2)})
    with pytest.raises(ValueError, match="num_envs"):
        observer({"step_type": np.zeros(3, np.int32), "x": np.zeros(3)})
    with pytest.raises(ValueError, match="num_envs"):
        observer({"step_type": np.zeros((2, 1), np.int32), "x": np.zeros(2)})
    observer.flush()
    assert client.server_info()["a"].current_size == 0
    observer.close()
    with pytest.raises(ValueError, match="closed"):
        observer({"step_type": np.zeros(2, np.int32), "x": np.zeros(2)})
    observer.open()
    observer({"step_type": np.zeros(2, np.int32), "x": np.zeros(2)})
    observer.close()
    assert client.server_info()["a"].current_size == 2


def test_reverb_like_client_falls_back_to_one_writer_per_env(queue_server):
    """A client without vector_writer (dm-reverb's) gets one observer per environment."""

    class ReverbLike:
        def __init__(self, client):
            self._c = client

        def trajectory_writer(self, *args, **kwargs):
            return self._c.trajectory_writer(*args, **kwargs)

        def server_info(self):
            return self._c.server_info()

    client = queue_server.localhost_client()
    with observers.BatchedTrajectoryObserver(ReverbLike(client), "a", 2, num_envs=2) as o:
        for t in range(3):
            o({"step_type": np.full(2, FIRST if t == 0 else MID, np.int32), "x": np.ones(2) * t})
        assert o.cached_steps.tolist() == [3, 3]
    assert client.server_info()["a"].current_size == 4

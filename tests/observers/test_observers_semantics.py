"""Observer semantics beyond TF-Agents' vectors: gymnasium transitions, deliberate fixes,
argument validation (every argument named in its error), lifecycle."""

from __future__ import annotations

import math

import numpy as np
import pytest
from _observer_helpers import (
    FIRST,
    LAST,
    MID,
    Trajectory,
    counting_trajectories,
    drain,
    observations,
)

from ostinato import observers
from ostinato.observers import GymEpisode, StepType

gym = pytest.importorskip("gymnasium")


# -- gymnasium transitions -----------------------------------------------------------------------
class Counter(gym.Env):
    """Observation [episode, t]; terminates after ``length`` steps; reward t."""

    def __init__(self, length: int = 3):
        self.length = length
        self.observation_space = gym.spaces.Box(-1e9, 1e9, (2,), np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self.episode = -1
        self.t = 0

    def _obs(self):
        return np.array([self.episode, self.t], dtype=np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.episode += 1
        self.t = 0
        return self._obs(), {}

    def step(self, action):
        self.t += 1
        return self._obs(), float(self.t), self.t >= self.length, False, {}


def _run_gym(observer, env, episodes):
    obs, info = env.reset(seed=0)
    observer.on_reset(obs, info)
    done = 0
    while done < episodes:
        action = np.int64(1)
        obs, reward, terminated, truncated, info = env.step(action)
        observer.on_step(obs, action, reward, terminated, truncated, info)
        if terminated or truncated:
            done += 1
            obs, info = env.reset()
            observer.on_reset(obs, info)


def _columns(item):
    # Gym step dict columns in sorted key order.
    keys = sorted(observers.GYM_STEP_KEYS)
    return {k: np.asarray(c) for k, c in zip(keys, item.data)}


def test_gym_transitions_become_two_step_items(queue_server):
    client = queue_server.localhost_client()
    with observers.TrajectoryObserver(client, "a", 2) as observer:
        _run_gym(observer, Counter(3), episodes=2)
    items = [_columns(s) for s in drain(client)]
    assert len(items) == 6  # 3 transitions per episode, each a [t, t+1] item
    for i, item in enumerate(items):
        episode, t = divmod(i, 3)
        np.testing.assert_array_equal(item["observation"], [[episode, t], [episode, t + 1]])
        assert item["reward"][0] == t + 1
        assert item["step_type"][0] == (FIRST if t == 0 else MID)
        last = t == 2
        assert item["next_step_type"][0] == (LAST if last else MID)
        assert item["discount"][0] == (0.0 if last else 1.0)
        if last:  # the boundary step carries the final observation
            assert item["step_type"][1] == LAST and item["next_step_type"][1] == FIRST
            assert item["action"][1] == 0 and item["discount"][1] == 1.0
    assert items[0]["step_type"].dtype == np.int32
    assert items[0]["reward"].dtype == np.float32 and items[0]["discount"].dtype == np.float32


def test_gym_truncation_keeps_discount_one(queue_server):
    client = queue_server.localhost_client()
    env = gym.wrappers.TimeLimit(Counter(100), max_episode_steps=2)
    with observers.EpisodeObserver(client, "a", 10) as observer:
        _run_gym(observer, env, episodes=1)
    (item,) = [_columns(s) for s in drain(client)]
    np.testing.assert_array_equal(item["discount"], [1.0, 1.0, 1.0])
    np.testing.assert_array_equal(item["step_type"], [FIRST, MID, LAST])
    np.testing.assert_array_equal(item["next_step_type"], [MID, LAST, FIRST])


def test_gym_cartpole_with_signature(make_server):
    import ostinato as reverb

    env = gym.make("CartPole-v1")
    spec = observers.gym_step_spec(env.observation_space, env.action_space)
    server = make_server(
        reverb.Table.queue("a", 10_000, signature=observers.add_outer_dim(spec, 2))
    )
    client = server.localhost_client()
    with observers.TrajectoryObserver(client, "a", 2) as observer:
        _run_gym(observer, env, episodes=3)
    batch = client.sample_batch("a", 10)
    assert batch.data["observation"].shape == (10, 2, 4)
    assert batch.data["action"].dtype == np.int64


def test_on_step_needs_on_reset(queue_server):
    observer = observers.TrajectoryObserver(queue_server.localhost_client(), "a", 2)
    with pytest.raises(ValueError, match="on_reset"):
        observer.on_step(np.zeros(2), 0, 1.0, False, False)
    observer.on_reset(np.zeros(2))
    observer.on_step(np.zeros(2), 0, 1.0, True, False)
    with pytest.raises(ValueError, match="on_reset"):  # the episode ended
        observer.on_step(np.zeros(2), 0, 1.0, False, False)


def test_on_reset_mid_episode_drops_the_unfinished_episode(queue_server):
    client = queue_server.localhost_client()
    with observers.EpisodeObserver(client, "a", 10) as observer:
        observer.on_reset(np.float32(0))
        observer.on_step(np.float32(1), 0, 0.0, False, False)
        observer.on_reset(np.float32(10))  # the env was reset before the episode ended
        observer.on_step(np.float32(11), 0, 0.0, True, False)
    assert observations(drain(client), column=3) == [[10.0, 11.0]]


def test_gym_episode_copies_observations():
    ep = GymEpisode()
    buf = np.zeros(2)
    ep.reset(buf)
    buf[:] = 5  # an environment reusing its buffer
    (step,) = ep.step(buf, 0, 1.0, False, False)
    np.testing.assert_array_equal(step["observation"], [0, 0])


# -- deliberate differences from TF-Agents ---------------------------------------------------------
def test_reset_without_padding_does_not_duplicate_the_last_window(queue_server):
    client = queue_server.localhost_client()
    observer = observers.TrajectoryObserver(client, "a", 2)
    for t in counting_trajectories(5, 3):
        observer(t)
    observer.reset()  # TF-Agents wrote window [1, 2] a second time here
    observer.close()
    assert observations(drain(client)) == [[0, 1], [1, 2]]


def test_reset_without_padding_raises_when_no_window_is_due(queue_server):
    observer = observers.TrajectoryObserver(
        queue_server.localhost_client(), "a", 4, stride_length=4
    )
    for t in counting_trajectories(5, 3):
        observer(t)
    with pytest.raises(ValueError, match="pad_end_of_episodes"):
        observer.reset()
    observer.reset(write_cached_steps=False)
    observer.reset()  # nothing cached: nothing to write, no error


def test_reset_during_overflowed_episode_writes_nothing(queue_server):
    client = queue_server.localhost_client()
    observer = observers.EpisodeObserver(client, "a", 2, bypass_partial_episodes=True)
    for t in counting_trajectories(5, 4):
        observer(t)
    observer.reset()  # TF-Agents wrote the episode's first 2 steps here
    observer.close()
    assert drain(client) == []


def test_open_after_close_starts_a_fresh_episode(queue_server):
    client = queue_server.localhost_client()
    observer = observers.EpisodeObserver(client, "a", 3)
    trajs = counting_trajectories(2, 5)
    observer(trajs[0])
    observer(trajs[1])
    observer.close()
    with pytest.raises(ValueError, match="Could not obtain writer"):
        observer(trajs[2])
    with pytest.raises(ValueError, match="Could not obtain writer"):
        observer.flush()
    observer.open()
    assert observer.cached_steps == 0  # TF-Agents kept counting the closed episode
    for t in trajs[3:]:
        observer(t)
    observer.close()
    assert observations(drain(client)) == [[10, 11, 12]]


# -- validation ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "kwargs,name",
    [
        (dict(sequence_length=0), "sequence_length"),
        (dict(sequence_length=2.0), "sequence_length"),
        (dict(sequence_length=True), "sequence_length"),
        (dict(sequence_length=2, stride_length=0), "stride_length"),
        (dict(sequence_length=2, priority=math.nan), "priority"),
        (dict(sequence_length=2, priority="high"), "priority"),
        (dict(sequence_length=2, pad_end_of_episodes="yes"), "pad_end_of_episodes"),
        (dict(sequence_length=2, tile_end_of_episodes=1), "tile_end_of_episodes"),
        (dict(sequence_length=2, tile_end_of_episodes=True), "pad_end_of_episodes=True"),
        (dict(sequence_length=2, validate_items=None), "validate_items"),
        (dict(sequence_length=2, table_name=[]), "table_name"),
        (dict(sequence_length=2, table_name=3), "table_name"),
        (dict(sequence_length=2, table_name=["a", "a"]), "table_name"),
    ],
)
def test_trajectory_observer_arguments(queue_server, kwargs, name):
    kwargs.setdefault("table_name", "a")
    with pytest.raises(ValueError, match=name):
        observers.TrajectoryObserver(queue_server.localhost_client(), **kwargs)


@pytest.mark.parametrize(
    "kwargs,name",
    [
        (dict(max_sequence_length=0), "max_sequence_length"),
        (dict(max_sequence_length=-1), "max_sequence_length"),
        (dict(max_sequence_length=None), "max_sequence_length"),
        (dict(max_sequence_length=3, bypass_partial_episodes="no"), "bypass_partial_episodes"),
        (dict(max_sequence_length=3, priority=math.inf), "priority"),
    ],
)
def test_episode_observer_arguments(queue_server, kwargs, name):
    with pytest.raises(ValueError, match=name):
        observers.EpisodeObserver(queue_server.localhost_client(), "a", **kwargs)


def test_py_client_must_be_a_client():
    with pytest.raises(ValueError, match="py_client"):
        observers.TrajectoryObserver("localhost:1234", "a", 2)


def test_update_priority(queue_server):
    client = queue_server.localhost_client()
    observer = observers.EpisodeObserver(client, "a", 5, priority=3)
    assert observer.priority == 3
    with pytest.raises(ValueError, match="priority"):
        observer.update_priority(float("nan"))
    for t in counting_trajectories(2, 2):
        observer(t)
    observer.update_priority(4)  # items created from now on
    observer(
        Trajectory(
            np.int32(LAST),
            np.int32(2),
            np.int32(0),
            (),
            np.int32(FIRST),
            np.float32(0),
            np.float32(1),
        )
    )
    observer.close()
    assert [float(s.info.priority) for s in drain(client)] == [4.0]


@pytest.mark.parametrize(
    "cls,args",
    [
        (observers.TrajectoryObserver, (2,)),
        (observers.EpisodeObserver, (5,)),
        (observers.TrajectorySequenceObserver, (2,)),
    ],
)
def test_steps_that_cannot_be_written(queue_server, cls, args):
    observer = cls(queue_server.localhost_client(), "a", *args)
    batched = {"step_type": np.array([0, 1], np.int32), "observation": np.zeros(2)}
    with pytest.raises(ValueError, match="Batched"):
        observer(batched)
    with pytest.raises(TypeError, match="Trajectory"):
        observer([np.int32(0), np.zeros(2)])
    if cls is not observers.TrajectorySequenceObserver:
        with pytest.raises(ValueError, match="step_type"):
            observer({"observation": np.zeros(2)})
    observer.close()


def test_sequence_observer_takes_dicts_without_step_type(queue_server):
    client = queue_server.localhost_client()
    with observers.TrajectorySequenceObserver(client, "a", 2, stride_length=2) as o:
        for i in range(5):
            o({"x": np.int64(i)})
    assert [np.asarray(s.data[0]).tolist() for s in drain(client)] == [[0, 1], [2, 3]]


def test_get_table_signature_and_properties(make_server):
    import ostinato as reverb

    sig = {"x": reverb.TensorSpec([None], np.int64)}
    server = make_server(reverb.Table.queue("a", 10, signature=sig), reverb.Table.queue("b", 10))
    observer = observers.TrajectoryObserver(
        server.localhost_client(), ("a", "b"), 3, stride_length=2
    )
    assert observer.get_table_signature() == sig
    assert observer.table_names == ("a", "b")
    assert (observer.sequence_length, observer.stride_length) == (3, 2)
    assert observer.py_client is not None
    observer.close()
    observer.close()  # idempotent


def test_padding_step():
    t = Trajectory(
        np.int32(MID),
        np.ones(3, np.float32),
        np.int64(1),
        (),
        np.int32(LAST),
        np.float32(1),
        np.float32(0),
    )
    p = observers.padding_step(t)
    assert type(p) is Trajectory and int(p.step_type) == StepType.LAST
    assert int(p.next_step_type) == StepType.FIRST and p.step_type.dtype == np.int32
    np.testing.assert_array_equal(p.observation, np.zeros(3, np.float32))
    d = observers.padding_step({"step_type": np.int64(1), "obs": np.ones(2)})
    assert d["step_type"] == 2 and d["step_type"].dtype == np.int64
    np.testing.assert_array_equal(d["obs"], [0, 0])


def test_reset_after_close_reopens(queue_server):
    client = queue_server.localhost_client()
    observer = observers.TrajectoryObserver(client, "a", 4, pad_end_of_episodes=True)
    trajs = counting_trajectories(5, 4)
    for t in trajs[:2]:
        observer(t)
    observer.close()  # the unfinished episode is dropped
    assert observer.cached_steps == 0
    observer.reset()  # nothing cached: reopens (TF-Agents padded into the closed writer)
    for t in trajs[2:]:
        observer(t)
    observer.reset()
    observer.close()
    assert observations(drain(client)) == [[2, 3, 0, 0]]

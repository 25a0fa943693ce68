"""Batched observers: one writer per environment index, gymnasium autoreset modes, TF-Agents
batched trajectories."""

from __future__ import annotations

import numpy as np
import pytest
from _observer_helpers import FIRST, LAST, MID, Trajectory, counting_trajectories, drain

from ostinato import observers

gym = pytest.importorskip("gymnasium")
AutoresetMode = pytest.importorskip("gymnasium.vector").AutoresetMode

KEYS = sorted(observers.GYM_STEP_KEYS)


class Tagged(gym.Env):
    """Observation [env index, episode, t]; episodes of ``length`` steps, truncated every
    third episode (the others terminate)."""

    def __init__(self, index: int, length: int):
        self.index, self.length = index, length
        self.observation_space = gym.spaces.Box(-1e9, 1e9, (3,), np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self.episode, self.t = -1, 0

    def _obs(self):
        return np.array([self.index, self.episode, self.t], dtype=np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.episode += 1
        self.t = 0
        return self._obs(), {}

    def step(self, action):
        self.t += 1
        end = self.t >= self.length
        truncated = end and self.episode % 3 == 2
        return self._obs(), 1.0, end and not truncated, truncated, {}


def _envs(lengths, mode):
    fns = [lambda i=i, n=n: Tagged(i, n) for i, n in enumerate(lengths)]
    return gym.vector.SyncVectorEnv(fns, autoreset_mode=mode)


def _collect(observer, envs, steps, seed=0):
    obs, info = envs.reset(seed=seed)
    observer.on_reset(obs, info)
    rng = np.random.default_rng(seed)
    for _ in range(steps):
        actions = rng.integers(2, size=envs.num_envs)
        obs, rewards, terminated, truncated, info = envs.step(actions)
        observer.on_step(obs, actions, rewards, terminated, truncated, info)
        done = terminated | truncated
        if envs.metadata["autoreset_mode"] == AutoresetMode.DISABLED and done.any():
            obs, info = envs.reset(options={"reset_mask": done})
            observer.on_reset(obs, info, reset_mask=done)


def _items(client, table="a"):
    return [dict(zip(KEYS, map(np.asarray, s.data))) for s in drain(client, table)]


def _expected_transitions(lengths, steps):
    """The [t, t+1] windows each environment's completed transitions give, as tuples."""
    out = set()
    for i, n in enumerate(lengths):
        # In NextStep mode an ended episode costs one extra vector step (the reset step);
        # the other modes reset at once. Tests compare modes on episodes both complete.
        for episode in range(steps // (n + 1)):
            for t in range(n):
                out.add((i, episode, t))
    return out


@pytest.mark.parametrize(
    "mode", [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP, AutoresetMode.DISABLED]
)
def test_gym_vector_env_items_never_mix(queue_server, mode):
    lengths = [2, 3, 5, 4]
    envs = _envs(lengths, mode)
    client = queue_server.localhost_client()
    observer = observers.BatchedTrajectoryObserver(client, "a", 2, env=envs)
    assert observer.autoreset_mode == mode.value and observer.num_envs == 4
    _collect(observer, envs, 60)
    observer.close()
    items = _items(client)
    seen = set()
    for item in items:
        (i0, e0, t0), (i1, e1, t1) = item["observation"]
        assert (i0, e0) == (i1, e1) and t1 == t0 + 1  # one env, one episode, consecutive
        n = lengths[int(i0)]
        last = t1 == n
        assert item["step_type"][0] == (FIRST if t0 == 0 else MID)
        assert item["next_step_type"][0] == (LAST if last else MID)
        assert item["step_type"][1] == (LAST if last else MID)
        truncated = last and e0 % 3 == 2
        assert item["discount"][0] == (0.0 if last and not truncated else 1.0)
        key = (int(i0), int(e0), int(t0))
        assert key not in seen  # every transition once (autoreset steps are not written)
        seen.add(key)
    assert _expected_transitions(lengths, 60) <= seen
    # Every transition gives an item but an unfinished episode's latest one.
    per_env = {i: {(e, t) for (j, e, t) in seen if j == i} for i in range(4)}
    for i in range(len(lengths)):
        episodes = {e for e, _ in per_env[i]}
        for e in episodes:
            ts = sorted(t for ee, t in per_env[i] if ee == e)
            assert ts == list(range(len(ts)))  # no gap inside an episode


@pytest.mark.parametrize("mode", [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP])
def test_episode_items_per_mode(queue_server, mode):
    lengths = [3, 4]
    envs = _envs(lengths, mode)
    client = queue_server.localhost_client()
    observer = observers.BatchedEpisodeObserver(client, "a", 10, env=envs)
    _collect(observer, envs, 30)
    observer.close()
    episodes = {}
    for item in _items(client):
        o = item["observation"]
        i, e = int(o[0, 0]), int(o[0, 1])
        assert (o[:, 0] == i).all() and (o[:, 1] == e).all()
        np.testing.assert_array_equal(o[:, 2], np.arange(lengths[i] + 1))
        np.testing.assert_array_equal(
            item["step_type"], [FIRST] + [MID] * (lengths[i] - 1) + [LAST]
        )
        episodes.setdefault(i, []).append(e)
    # NextStep spends one step per episode on the reset, SameStep none.
    extra = 1 if mode == AutoresetMode.NEXT_STEP else 0
    for i, n in enumerate(lengths):
        assert episodes[i] == list(range(30 // (n + extra)))


def test_cartpole_sync_vector_env(queue_server):
    envs = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1")] * 8)
    client = queue_server.localhost_client()
    observer = observers.BatchedTrajectoryObserver(client, "a", 2, env=envs)
    obs, info = envs.reset(seed=3)
    observer.on_reset(obs, info)
    transitions = 0
    skip = np.zeros(8, bool)  # NextStep: the step after an episode's end only resets
    for _ in range(200):
        actions = envs.action_space.sample()
        obs, rewards, terminated, truncated, info = envs.step(actions)
        observer.on_step(obs, actions, rewards, terminated, truncated, info)
        transitions += int((~skip).sum())
        skip = terminated | truncated
    observer.flush()
    running = int(observer.episodes_in_progress.sum())
    # Each transition gives one item, except each running episode's latest.
    assert client.server_info()["a"].current_size == transitions - running
    for item in _items(client):
        # A terminal transition's next observation is the episode's final one; no item
        # pairs an episode's end with the next episode's start.
        assert item["step_type"][1] != FIRST
    observer.close()


def test_tf_agents_batched_trajectories(queue_server):
    """A batched PyEnvironment's trajectories, split per index, match unbatched observers."""
    streams = [counting_trajectories(3, 9), counting_trajectories(2, 11)]
    n = min(map(len, streams))
    batched = [
        Trajectory(
            *(
                np.stack([np.asarray(s[t][f]) if f != 3 else () for s in streams]) if f != 3 else ()
                for f in range(7)
            )
        )
        for t in range(n)
    ]
    client = queue_server.localhost_client()
    with observers.BatchedTrajectoryObserver(
        client, "a", 3, pad_end_of_episodes=True, num_envs=2
    ) as observer:
        for t in batched:
            observer(t)
    for stream in streams:
        with observers.TrajectoryObserver(client, "b", 3, pad_end_of_episodes=True) as o:
            for t in stream[:n]:
                o(t)
    ours = sorted(np.asarray(s.data[1]).tolist() for s in drain(client, "a"))
    theirs = sorted(np.asarray(s.data[1]).tolist() for s in drain(client, "b"))
    assert ours == theirs and len(ours) > 4


def test_batched_dicts_and_sequence_observer(queue_server):
    client = queue_server.localhost_client()
    with observers.BatchedTrajectorySequenceObserver(
        client, "a", 2, stride_length=2, num_envs=3
    ) as observer:
        for t in range(4):
            observer({"x": np.arange(3) * 10 + t})
    got = sorted(np.asarray(s.data[0]).tolist() for s in drain(client))
    assert got == [[0, 1], [2, 3], [10, 11], [12, 13], [20, 21], [22, 23]]


def test_batched_reset_flush_priority(queue_server):
    client = queue_server.localhost_client()
    observer = observers.BatchedEpisodeObserver(client, "a", 10, num_envs=2)
    for t in range(3):
        st = np.array([FIRST if t == 0 else MID] * 2, np.int32)
        observer({"step_type": st, "x": np.array([t, 10 + t])})
    observer.update_priority(7)
    observer.reset()  # writes both unfinished episodes
    observer.flush()
    items = drain(client)
    assert sorted(np.asarray(s.data[1]).tolist() for s in items) == [[0, 1, 2], [10, 11, 12]]
    assert {float(s.info.priority) for s in items} == {7.0}
    assert len(observer) == 2 and len(list(observer)) == 2
    observer.close()


# -- validation ---------------------------------------------------------------------------------
def test_batched_arguments(queue_server):
    client = queue_server.localhost_client()
    with pytest.raises(ValueError, match="num_envs"):
        observers.BatchedTrajectoryObserver(client, "a", 2)
    with pytest.raises(ValueError, match="num_envs"):
        observers.BatchedTrajectoryObserver(client, "a", 2, num_envs=0)
    with pytest.raises(ValueError, match="autoreset_mode"):
        observers.BatchedTrajectoryObserver(client, "a", 2, num_envs=2, autoreset_mode="later")
    envs = _envs([2, 2], AutoresetMode.SAME_STEP)
    with pytest.raises(ValueError, match="num_envs"):
        observers.BatchedTrajectoryObserver(client, "a", 2, num_envs=3, env=envs)
    with pytest.raises(ValueError, match="autoreset_mode"):
        observers.BatchedTrajectoryObserver(client, "a", 2, env=envs, autoreset_mode="next_step")
    with pytest.raises(ValueError, match="sequence_length"):
        observers.BatchedTrajectoryObserver(client, "a", 0, num_envs=2)
    with pytest.raises(ValueError, match="max_sequence_length"):
        observers.BatchedEpisodeObserver(client, "a", 0, num_envs=2)
    assert observers.autoreset_mode_name("same_step") == "SameStep"


def test_batched_input_errors(queue_server):
    client = queue_server.localhost_client()
    observer = observers.BatchedTrajectoryObserver(
        client, "a", 2, num_envs=2, autoreset_mode=AutoresetMode.SAME_STEP
    )
    with pytest.raises(ValueError, match="num_envs"):
        observer({"step_type": np.zeros(3, np.int32)})
    with pytest.raises(TypeError, match="Trajectory"):
        observer([np.zeros(2)])
    observer.on_reset(np.zeros((2, 3)))
    with pytest.raises(ValueError, match="rewards"):
        observer.on_step(
            np.zeros((2, 3)), np.zeros(2, int), np.zeros(3), np.zeros(2, bool), np.zeros(2, bool)
        )
    with pytest.raises(ValueError, match="final_obs"):
        observer.on_step(
            np.zeros((2, 3)),
            np.zeros(2, int),
            np.zeros(2),
            np.array([True, False]),
            np.zeros(2, bool),
            {},
        )
    with pytest.raises(ValueError, match="reset_mask"):
        observer.on_reset(np.zeros((2, 3)), reset_mask=[1, 0])
    observer.close()

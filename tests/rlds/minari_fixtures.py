"""Small Minari datasets made in the tests with Minari's DataCollector (never downloaded),
with what TrajectoryObserver wrote while the same episodes were collected."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

minari = pytest.importorskip("minari")
gym = pytest.importorskip("gymnasium")

import ostinato as reverb  # noqa: E402
from ostinato import observers  # noqa: E402


def collect(dataset_id, env_id, episodes, *, seed=0, max_episode_steps=None):
    """Collects ``episodes`` random episodes with DataCollector into a local Minari dataset
    and, at the same time, through a TrajectoryObserver(2) into a queue table.

    Returns ``(dataset, observer_items)``: the items as dicts of arrays (oldest first).
    """
    env = gym.make(env_id, max_episode_steps=max_episode_steps)
    env = minari.DataCollector(env, record_infos=False)
    env.action_space.seed(seed)
    server = reverb.Server([reverb.Table.queue("online", 100_000)])
    try:
        client = server.localhost_client()
        observer = observers.TrajectoryObserver(client, "online", 2)
        for ep in range(episodes):
            obs, info = env.reset(seed=seed + ep)
            observer.on_reset(obs, info)
            while True:
                action = env.action_space.sample()
                obs, reward, terminated, truncated, info = env.step(action)
                observer.on_step(obs, action, reward, terminated, truncated, info)
                if terminated or truncated:
                    break
        observer.close()
        # Step dicts: the columns are in the order of their sorted keys.
        keys = sorted(observers.GYM_STEP_KEYS)
        items = [dict(zip(keys, item)) for item in drain(client, "online")]
    finally:
        server.stop()
    dataset = env.create_dataset(
        dataset_id,
        algorithm_name="random",
        author="ostinato tests",
        author_email="tests@example.org",
        code_permalink="https://example.org",
        description="test data",
        eval_env=env_id,
    )
    env.close()
    return dataset, items


def drain(client, table):
    """Every item of a queue table, oldest first (data as the table's structure gives it)."""
    out = []
    for _ in range(client.server_info()[table].current_size):
        data = client.sample_batch(table, 1).data
        out.append(_first(data))
    return out


def _first(tree):
    import optree

    return optree.tree_map(lambda x: np.asarray(x)[0], tree, none_is_leaf=False)


def episode(observations, actions, rewards, terminations, truncations, id=0):
    """A Minari-like episode (EpisodeData's fields) from lists."""
    return SimpleNamespace(
        id=id,
        observations=observations,
        actions=actions,
        rewards=np.asarray(rewards, np.float64),
        terminations=np.asarray(terminations, bool),
        truncations=np.asarray(truncations, bool),
        infos={},
    )


def counting_episode(n, id=0, start=0.0, terminated=True, obs_dim=2):
    """``n`` transitions; observation ``t`` is ``start + t`` everywhere, action ``10 * t``."""
    obs = (start + np.arange(n + 1, dtype=np.float32))[:, None].repeat(obs_dim, 1)
    actions = (10.0 * np.arange(n, dtype=np.float32))[:, None]
    ends, never = np.zeros(n, bool), np.zeros(n, bool)
    ends[-1] = True
    return episode(
        obs,
        actions,
        np.arange(n) + 1.0,
        ends if terminated else never,
        never if terminated else ends,
        id=id,
    )

"""Helpers for the observer tests: TF-Agents-like step streams, reading queue tables, writers
that count their calls."""

from __future__ import annotations

from collections import namedtuple
from typing import Any

import numpy as np

from ostinato.observers import StepType

FIRST, MID, LAST = int(StepType.FIRST), int(StepType.MID), int(StepType.LAST)


class Trajectory(
    namedtuple(
        "Trajectory",
        [
            "step_type",
            "observation",
            "action",
            "policy_info",
            "next_step_type",
            "reward",
            "discount",
        ],
    )
):
    """Stands in for ``tf_agents.trajectories.Trajectory`` (duck-typed by the observers)."""

    def is_boundary(self) -> Any:
        return np.equal(self.step_type, LAST)


def counting_trajectories(
    steps_per_episode: int, driver_steps: int, as_dict: bool = False
) -> list[Any]:
    """What TF-Agents' PyDriver gives observers for ``CountingEnv(steps_per_episode)`` with
    ``max_steps=driver_steps``: ``k`` transitions per episode then a LAST->FIRST boundary
    step; the driver's step count leaves boundary steps out, and it stops right after its
    ``driver_steps``-th counted step.

    Observations count up within an episode and add ``10 * episode`` after the first one.
    """
    out: list[Any] = []
    episode, step = 0, 0
    counted = 0

    def obs() -> np.int32:
        return np.int32(10 * episode + step if episode else step)

    while counted < driver_steps:
        if step == steps_per_episode:  # boundary: LAST -> FIRST
            st, nst, o = LAST, FIRST, obs()
            episode, step = episode + 1, 0
            reward, discount = 0.0, 1.0
        else:
            st = FIRST if step == 0 else MID
            o = obs()
            step += 1
            nst = LAST if step == steps_per_episode else MID
            reward, discount = (1.0, 0.0) if nst == LAST else (0.0, 1.0)
            counted += 1
        t = Trajectory(
            np.int32(st),
            o,
            np.int32(counted % 2),
            (),
            np.int32(nst),
            np.float32(reward),
            np.float32(discount),
        )
        out.append(t._asdict() if as_dict else t)
    return out


def drain(client: Any, table: str = "a") -> list[Any]:
    """Every item of a queue table, in insertion order, as ReplaySample(info, data)."""
    n = client.server_info()[table].current_size
    if not n:
        return []
    return list(client.sample(table, n, emit_timesteps=False))


def observations(items: list[Any], column: int = 1) -> list[list[int]]:
    """The observation column of each item (flat item columns in Trajectory field order:
    step_type, observation, action, next_step_type, reward, discount)."""
    return [np.asarray(s.data[column]).tolist() for s in items]


class CountingWriter:
    """Delegates to a real TrajectoryWriter and counts appends and created items."""

    def __init__(self, writer: Any, counts: dict[str, int]):
        self._writer = writer
        self._counts = counts

    def append(self, *args: Any, **kwargs: Any) -> Any:
        self._counts["append"] += 1
        return self._writer.append(*args, **kwargs)

    def create_item(self, *args: Any, **kwargs: Any) -> Any:
        self._counts["create_item"] += 1
        return self._writer.create_item(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._writer, name)


class CountingClient:
    """A client whose writers count calls, like the mocks of TF-Agents' tests (but real)."""

    def __init__(self, client: Any):
        self._client = client
        self.counts = {"append": 0, "create_item": 0, "trajectory_writer": 0}

    def trajectory_writer(self, *args: Any, **kwargs: Any) -> CountingWriter:
        self.counts["trajectory_writer"] += 1
        return CountingWriter(self._client.trajectory_writer(*args, **kwargs), self.counts)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)

"""TF-Agents' RLDS-to-trajectory conversion with numpy, over chunks of a stream of steps.

The same rules as :func:`ostinato.rlds.convert_rlds_to_trajectories` (TF-Agents' semantics,
checked case by case against TF-Agents 0.19 in ``tests/rlds``), applied to whole columns at
once: a reader hands :class:`StepChunk` s (consecutive RLDS steps as arrays, episodes
flattened) to a :class:`Converter`, which pairs each step with the one after it -- holding the
last step of a chunk back until the next chunk (or the end of the data, padded with an
``is_first`` step as TF-Agents pads) -- and returns :class:`TrajectoryChunk` s. No TensorFlow.
"""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple

import numpy as np
import optree

from ostinato.rlds.trajectory import StepType, Trajectory

#: The RLDS step features the conversion reads (extra keys are not carried).
FEATURES = ("observation", "action", "reward", "discount")
FLAGS = ("is_first", "is_last", "is_terminal")

# The conversion's checks, in TF-Agents' order (the first three are TF-Agents' messages).
TERMINAL_NOT_LAST = "Terminal step must be the last step of an episode."
MID_BEFORE_FIRST = (
    "Mid step should not be followed by a first step. The episode does not end with is_last:"
)
LAST_NOT_BEFORE_FIRST = (
    "Last step of an episode must be followed by a first step. This step "
    "does not start an episode with is_first:"
)
NO_START = "The episode does not start with is_first:"


class MalformedEpisodeError(ValueError):
    """An episode of offline data that cannot become trajectories (the message names the
    episode and, where there is one, the step)."""


def where(episode: Any, step: Any) -> str:
    """``(episode E, step S)``, as every error names a step."""
    return f"(episode {episode}, step {step})"


def _tree_map(fn: Any, tree: Any, *rest: Any) -> Any:
    return optree.tree_map(fn, tree, *rest, none_is_leaf=False)


@dataclasses.dataclass
class StepChunk:
    """Consecutive RLDS steps of a stream, as columns.

    Attributes:
      episode: int64 ``(n,)``, each step's episode (the index reported in errors).
      step: int64 ``(n,)``, each step's index in its episode.
      columns: ``observation``, ``action``, ``reward``, ``discount`` (arrays, or nests of
        arrays), ``is_first``, ``is_last``, ``is_terminal`` (arrays), each with a leading
        dimension of ``n``.
    """

    episode: np.ndarray
    step: np.ndarray
    columns: dict[str, Any]

    def __len__(self) -> int:
        return len(self.episode)

    def take(self, index: Any) -> StepChunk:
        return StepChunk(
            self.episode[index],
            self.step[index],
            {k: _tree_map(lambda a: a[index], v) for k, v in self.columns.items()},
        )


def concat_steps(a: StepChunk, b: StepChunk) -> StepChunk:
    return StepChunk(
        np.concatenate([a.episode, b.episode]),
        np.concatenate([a.step, b.step]),
        {
            k: _tree_map(lambda x, y: np.concatenate([x, y]), a.columns[k], b.columns[k])
            for k in a.columns
        },
    )


def padding_step(example: StepChunk) -> StepChunk:
    """The step TF-Agents appends to the data: zeros everywhere, ``is_first`` True; episode
    and step -1."""
    one = example.take(slice(0, 1))
    columns = {k: _tree_map(np.zeros_like, v) for k, v in one.columns.items()}
    columns["is_first"] = np.ones_like(one.columns["is_first"])
    minus_one = np.full(1, -1, np.int64)
    return StepChunk(minus_one, minus_one.copy(), columns)


class TrajectoryChunk(NamedTuple):
    """Trajectories of consecutive steps, as columns.

    Attributes:
      episode, step: int64 ``(n,)``: where each trajectory's (current) step is.
      trajectory: a trajectory of arrays with a leading dimension of ``n``.
      error: ``None``, or ``(k, message)`` for the first malformed step (index ``k`` in this
        chunk); the trajectories from ``k`` on are not valid.
    """

    episode: np.ndarray
    step: np.ndarray
    trajectory: Any
    error: tuple[int, str] | None

    def __len__(self) -> int:
        return len(self.episode)


def _flag(x: Any) -> np.ndarray:
    return np.asarray(x).astype(bool, copy=False)


def _step_type(first: np.ndarray, last: np.ndarray) -> np.ndarray:
    return np.where(
        first,
        np.int32(StepType.FIRST),
        np.where(last, np.int32(StepType.LAST), np.int32(StepType.MID)),
    ).astype(np.int32, copy=False)


def _first_error(cur: StepChunk, nxt: StepChunk) -> tuple[int, str] | None:
    first, last = _flag(cur.columns["is_first"]), _flag(cur.columns["is_last"])
    terminal = _flag(cur.columns["is_terminal"])
    next_first = _flag(nxt.columns["is_first"])
    mid = ~first & ~last
    here, there = (cur.episode, cur.step), (nxt.episode, nxt.step)
    rules = [
        (~terminal | last, TERMINAL_NOT_LAST, here),
        (~mid | ~next_first, MID_BEFORE_FIRST, here),
        # A next step that starts an episode of an episodes dataset (step 0) is left to the
        # episode-start check on the next pair, so that this episode is complete.
        (~last | next_first | (nxt.step == 0), LAST_NOT_BEFORE_FIRST, there),
        # Beyond TF-Agents: an episode (and the data) must start with is_first.
        ((cur.step != 0) | first, NO_START, here),
    ]
    bad = ~np.logical_and.reduce([ok for ok, _, _ in rules])
    if not bad.any():
        return None
    k = int(np.argmax(bad))
    for ok, message, (episodes, steps) in rules:
        if not ok[k]:
            return k, f"{message} {where(episodes[k], steps[k])}"
    raise AssertionError("unreachable")  # pragma: no cover


def convert_pairs(
    cur: StepChunk,
    nxt: StepChunk,
    trajectory_cls: type = Trajectory,
    *,
    stack_dict_features: bool = True,
) -> TrajectoryChunk:
    """One trajectory per ``(cur[k], nxt[k])`` pair, with TF-Agents' rules (see
    :func:`ostinato.rlds.convert_rlds_to_trajectories`).

    ``stack_dict_features`` keeps TF-Agents' quirk for RLDS data: a feature that is a dict is
    not split; both steps of the pair get the pair of values, stacked.
    """
    c, n = dict(cur.columns), dict(nxt.columns)
    for key in FEATURES:
        if stack_dict_features and isinstance(c[key], dict):
            c[key] = n[key] = _tree_map(lambda a, b: np.stack([a, b], axis=1), c[key], n[key])
    first, last = _flag(c["is_first"]), _flag(c["is_last"])
    step_type = _step_type(first, last)
    next_step_type = _step_type(_flag(n["is_first"]), _flag(n["is_last"]))
    # A one-step episode (FIRST followed by FIRST) is LAST -> LAST, as in TF-Agents.
    single = (step_type == StepType.FIRST) & (next_step_type == StepType.FIRST)
    step_type[single] = StepType.LAST
    next_step_type[single] = StepType.LAST
    discount = np.asarray(c["discount"])
    complete = last & _flag(c["is_terminal"])
    if complete.any():
        shape = complete.shape + (1,) * (discount.ndim - 1)
        discount = np.where(complete.reshape(shape), np.zeros((), discount.dtype), discount)
    trajectory = trajectory_cls(
        step_type=step_type,
        observation=c["observation"],
        action=c["action"],
        policy_info=(),
        next_step_type=next_step_type,
        reward=c["reward"],
        discount=discount,
    )
    return TrajectoryChunk(cur.episode, cur.step, trajectory, _first_error(cur, nxt))


class Converter:
    """Turns a stream of :class:`StepChunk` s into :class:`TrajectoryChunk` s.

    Each step is paired with the step after it, so the last step of every chunk is held back
    until the next chunk arrives; :meth:`finish` pairs it with TF-Agents' padding step.

    Args:
      trajectory_cls: the trajectory class (see :func:`~ostinato.rlds.trajectory_class`).
      stack_dict_features: TF-Agents' quirk for dict features (see :func:`convert_pairs`).
    """

    def __init__(self, trajectory_cls: type = Trajectory, *, stack_dict_features: bool = True):
        self._cls = trajectory_cls
        self._stack = stack_dict_features
        self._held: StepChunk | None = None

    def feed(self, chunk: StepChunk) -> TrajectoryChunk | None:
        """The trajectories of every step before ``chunk``'s last one not yet converted."""
        if not len(chunk):
            return None
        steps = chunk if self._held is None else concat_steps(self._held, chunk)
        self._held = steps.take(slice(len(steps) - 1, None))
        if len(steps) == 1:
            return None
        return convert_pairs(
            steps.take(slice(0, -1)),
            steps.take(slice(1, None)),
            self._cls,
            stack_dict_features=self._stack,
        )

    def finish(self) -> TrajectoryChunk | None:
        """The last step's trajectory (its next step: the padding step), if there is one."""
        held, self._held = self._held, None
        if held is None:
            return None
        return convert_pairs(held, padding_step(held), self._cls, stack_dict_features=self._stack)

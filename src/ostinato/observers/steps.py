"""What observers are given: TF-Agents trajectories, step dicts, gymnasium transitions.

An observer is called once per environment step with one *step*:

* a TF-Agents ``Trajectory`` (or anything with an ``is_boundary()`` method), written as it is;
* a mapping (a step dict), written as it is; its ``"step_type"`` entry marks episode
  boundaries with TF-Agents' ``StepType`` values (``0`` FIRST, ``1`` MID, ``2`` LAST);
* a gymnasium transition, through ``observer.on_reset(obs, info)`` and
  ``observer.on_step(obs, action, reward, terminated, truncated, info)``, which
  :class:`GymEpisode` turns into step dicts with TF-Agents' trajectory semantics.

**How a gymnasium transition becomes TF-Agents steps.** TF-Agents writes one trajectory per
environment transition, ``(step_type, observation, action, next_step_type, reward,
discount)`` where ``observation`` is the one the action was taken in and ``next_step_type``,
``reward`` and ``discount`` come from the step that followed; after the last transition of an
episode it writes one *boundary* trajectory (``step_type`` LAST, ``next_step_type`` FIRST)
that carries the final observation. An episode of ``k`` transitions is therefore ``k + 1``
steps. Gymnasium transitions map onto this exactly:

=================  ==========================================================================
``step_type``      FIRST (0) for the episode's first transition, MID (1) after it (int32)
``observation``    the observation the action was taken in (``on_reset``'s or the previous
                   ``on_step``'s ``obs``)
``action``         the action passed to ``env.step``
``next_step_type`` LAST (2) if ``terminated or truncated``, else MID (1) (int32)
``reward``         the reward ``env.step`` returned (float32)
``discount``       0.0 if ``terminated`` else 1.0 (float32): a truncated episode keeps 1.0, so
                   a learner bootstraps from the final observation
=================  ==========================================================================

and when ``terminated or truncated``, a boundary step follows: ``step_type`` LAST,
``observation`` the final observation (``obs``), ``action`` zeros, ``reward`` 0.0,
``discount`` 1.0, ``next_step_type`` FIRST. ``info`` is not stored. A two-step item
``[t, t+1]`` is then a complete transition: ``observation[0], action[0], reward[0],
discount[0]`` and the next observation ``observation[1]``.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any

import numpy as np
import optree


class StepType(enum.IntEnum):
    """TF-Agents' step types (``tf_agents.trajectories.time_step.StepType``)."""

    FIRST = 0
    MID = 1
    LAST = 2


#: The keys of the step dicts made from gymnasium transitions, in TF-Agents' field order.
GYM_STEP_KEYS = ("step_type", "observation", "action", "next_step_type", "reward", "discount")

#: The step types as the int32 scalars step dicts hold.
FIRST_I32 = np.int32(StepType.FIRST)
MID_I32 = np.int32(StepType.MID)
LAST_I32 = np.int32(StepType.LAST)


def _scalar(value: Any, what: str) -> Any:
    a = np.asarray(value)
    if a.size != 1:
        raise ValueError(
            f"{what} has shape {a.shape}, but an observer takes one unbatched step at a time; "
            "use a Batched*Observer (ostinato.observers) for batched or vectorised environments"
        )
    return a.reshape(()).item()


def is_boundary(step: Any) -> bool:
    """True when ``step`` ends an episode in TF-Agents' sense (its ``step_type`` is LAST).

    Raises:
      ValueError: a step dict without ``"step_type"``, or a batched step.
      TypeError: ``step`` is neither a trajectory nor a mapping.
    """
    method = getattr(step, "is_boundary", None)
    if callable(method):
        return bool(_scalar(method(), "is_boundary()"))
    if isinstance(step, Mapping):
        if "step_type" not in step:
            raise ValueError(
                "a step dict needs a 'step_type' entry (TF-Agents StepType: 0 FIRST, 1 MID, "
                f"2 LAST) to mark episode boundaries; got keys {sorted(map(str, step))}"
            )
        return _scalar(step["step_type"], "step_type") == StepType.LAST
    raise TypeError(
        "a step must be a TF-Agents Trajectory (anything with is_boundary()) or a mapping "
        f"with a 'step_type' entry; got {type(step).__name__} (gymnasium transitions go "
        "through on_reset()/on_step())"
    )


def check_step(step: Any) -> None:
    """Refuses what no observer can write: a bare list or tuple, a scalar, a batched step
    (one whose step type is not a scalar). A step dict needs no ``"step_type"`` here."""
    if callable(getattr(step, "is_boundary", None)) or (
        isinstance(step, Mapping) and "step_type" in step
    ):
        is_boundary(step)
        return
    if isinstance(step, Mapping):
        return
    raise TypeError(
        "a step must be a TF-Agents Trajectory (anything with is_boundary()) or a mapping; "
        f"got {type(step).__name__} (gymnasium transitions go through on_reset()/on_step())"
    )


def _zeros(x: Any) -> np.ndarray:
    return np.zeros_like(np.asarray(x))


def _step_value(example: Any, value: StepType) -> np.ndarray:
    return np.asarray(int(value), dtype=np.asarray(example).dtype)


def padding_step(example: Any) -> Any:
    """TF-Agents' end-of-episode padding step shaped like ``example``.

    Every leaf is zeros (observation, action, policy info, reward and discount alike), except
    ``step_type`` (LAST) and ``next_step_type`` (FIRST) when the step has them: what
    ``trajectory.boundary(zeros_like(...))`` gives in TF-Agents.

    Raises:
      ValueError: ``example`` is a trajectory that is not a namedtuple (no way to rebuild it).
    """
    zeros = optree.tree_map(_zeros, example, none_is_leaf=False)
    if isinstance(example, Mapping):
        out = dict(zeros) if type(zeros) is not dict else zeros
        for key, value in (("step_type", StepType.LAST), ("next_step_type", StepType.FIRST)):
            if key in example:
                out[key] = _step_value(example[key], value)
        return out
    fields = getattr(example, "_fields", None)
    if fields is None:
        raise ValueError(
            f"pad_end_of_episodes needs steps that are mappings or namedtuples; got "
            f"{type(example).__name__}"
        )
    changes = {
        key: _step_value(getattr(example, key), value)
        for key, value in (("step_type", StepType.LAST), ("next_step_type", StepType.FIRST))
        if key in fields
    }
    return zeros._replace(**changes)


def copy_nest(x: Any) -> Any:
    # Environments may hand back a buffer they overwrite on the next step.
    return optree.tree_map(np.array, x, none_is_leaf=False)


class GymEpisode:
    """Turns one environment's gymnasium transitions into TF-Agents step dicts.

    See the module docstring for the mapping. It holds the observation the next action will
    be taken in and whether the episode has started.

    Example:
      >>> ep = GymEpisode()
      >>> ep.reset(obs)
      >>> steps = ep.step(next_obs, action, reward, terminated, truncated)  # 1 or 2 dicts
    """

    __slots__ = ("_obs", "_first", "_open")

    def __init__(self) -> None:
        self._obs: Any = None
        self._first = True
        self._open = False

    @property
    def started(self) -> bool:
        """True between ``reset`` and the step that ends the episode."""
        return self._open

    @property
    def in_progress(self) -> bool:
        """True once a step of an episode that has not ended was taken."""
        return self._open and not self._first

    def reset(self, obs: Any) -> None:
        """Starts an episode at ``obs`` (what ``env.reset()`` returned)."""
        self._obs = copy_nest(obs)
        self._first = True
        self._open = True

    def step(
        self, obs: Any, action: Any, reward: Any, terminated: Any, truncated: Any
    ) -> list[dict[str, Any]]:
        """The step dicts for one transition: one, or two when the episode ends.

        Raises:
          ValueError: no episode is open (``reset`` was not called, or the previous step
            ended the episode).
        """
        if not self._open:
            raise ValueError(
                "on_step() needs an open episode: call on_reset(obs, info) with what "
                "env.reset() returned first (and again after an episode ends)"
            )
        terminated = bool(terminated)
        done = terminated or bool(truncated)
        action = np.asarray(action)
        steps = [
            {
                "step_type": FIRST_I32 if self._first else MID_I32,
                "observation": self._obs,
                "action": action,
                "next_step_type": LAST_I32 if done else MID_I32,
                "reward": np.float32(reward),
                "discount": np.float32(0.0 if terminated else 1.0),
            }
        ]
        obs = copy_nest(obs)
        if done:
            steps.append(
                {
                    "step_type": LAST_I32,
                    "observation": obs,
                    "action": np.zeros_like(action),
                    "next_step_type": FIRST_I32,
                    "reward": np.float32(0.0),
                    "discount": np.float32(1.0),
                }
            )
            self._obs = None
            self._open = False
        else:
            self._obs = obs
            self._first = False
        return steps


def gym_step_spec(observation_space: Any, action_space: Any) -> dict[str, Any]:
    """The spec of one step dict made from gymnasium transitions (no time dimension).

    Args:
      observation_space, action_space: gymnasium spaces (anything with ``shape`` and
        ``dtype``; a ``Dict``/``Tuple`` observation space gives a nest of specs).

    Returns:
      ``{"step_type", "observation", "action", "next_step_type", "reward", "discount"}`` of
      :class:`ostinato.TensorSpec`. Give a table ``add_outer_dim(spec)`` as its signature.
    """
    from ostinato.core.specs import TensorSpec

    def space_spec(space: Any, name: str) -> Any:
        spaces = getattr(space, "spaces", None)
        if isinstance(spaces, Mapping):
            return {k: space_spec(v, f"{name}/{k}") for k, v in spaces.items()}
        if isinstance(spaces, tuple):
            return tuple(space_spec(v, f"{name}/{i}") for i, v in enumerate(spaces))
        shape, dtype = getattr(space, "shape", None), getattr(space, "dtype", None)
        if shape is None or dtype is None:
            raise ValueError(f"{name} space ({space!r}) has no shape or dtype")
        return TensorSpec(tuple(shape), dtype, name)

    return {
        "step_type": TensorSpec((), np.int32, "step_type"),
        "observation": space_spec(observation_space, "observation"),
        "action": space_spec(action_space, "action"),
        "next_step_type": TensorSpec((), np.int32, "step_type"),
        "reward": TensorSpec((), np.float32, "reward"),
        "discount": TensorSpec((), np.float32, "discount"),
    }


def add_outer_dim(spec: Any, dim: int | None = None) -> Any:
    """``spec`` with a leading dimension ``dim`` on every leaf (TF-Agents' ``add_outer_dim``).

    Leaves are :class:`ostinato.TensorSpec` or anything spec-like (``tf.TensorSpec``).
    """
    from ostinato.core.specs import TensorSpec, is_spec_like

    def add(s: Any) -> Any:
        s = TensorSpec.from_spec(s) if not isinstance(s, TensorSpec) else s
        return TensorSpec((dim, *s.shape), s.dtype, s.name)

    return optree.tree_map(add, spec, is_leaf=is_spec_like, none_is_leaf=False)

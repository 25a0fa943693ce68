"""Observers for vectorised environments: one writer per environment index.

TF-Agents' observers refuse batched trajectories. These take a batch of steps, one per
environment, and hand each environment's step to its own observer (with its own
``TrajectoryWriter``), so an environment's episodes are cut, padded and written exactly as the
unbatched observer does it, and steps of different environments never share an item.

Two kinds of input:

* **Batched steps** (``observer(step)``): a TF-Agents ``Trajectory`` from a batched
  ``PyEnvironment`` (``BatchedPyEnvironment``, ``ParallelPyEnvironment``) or a step dict,
  every leaf with a leading dimension of ``num_envs``. TF-Agents environments reset
  themselves and emit a boundary step per environment, so nothing else is needed.
* **Gymnasium** ``VectorEnv`` (``on_reset``/``on_step`` with what ``envs.reset()`` and
  ``envs.step(actions)`` return). Gymnasium 1.x resets an environment whose episode ended
  in one of three ways (``envs.metadata["autoreset_mode"]``), all handled:

  * ``NextStep`` (the default): the step that ends an episode returns its final
    observation; the *next* step of that environment only resets it (its action is
    ignored, reward 0) and is not written: its observation starts the next episode.
  * ``SameStep``: the step that ends an episode returns the *reset* observation and puts
    the final one in ``info["final_obs"][i]``, which ends the episode (and its boundary
    step); the returned observation starts the next one.
  * ``Disabled``: an environment whose episode ended must be reset by the caller
    (``envs.reset(options={"reset_mask": mask})``) and given to
    ``on_reset(obs, info, reset_mask=mask)`` before its next step.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

import numpy as np
import optree

from ostinato.observers.base import ObserverBase
from ostinato.observers.episode import EpisodeObserver
from ostinato.validate import positive_int

NEXT_STEP = "NextStep"
SAME_STEP = "SameStep"
DISABLED = "Disabled"
_MODES = {"nextstep": NEXT_STEP, "samestep": SAME_STEP, "disabled": DISABLED}


def autoreset_mode_name(mode: Any) -> str:
    """Gymnasium's autoreset mode as ``"NextStep"``, ``"SameStep"`` or ``"Disabled"``.

    Accepts ``gymnasium.vector.AutoresetMode`` members and strings in any case, with or
    without underscores (``"next_step"``).
    """
    value = getattr(mode, "value", mode)
    if isinstance(value, str):
        name = _MODES.get(value.replace("_", "").replace("-", "").lower())
        if name is not None:
            return name
    raise ValueError(
        f"autoreset_mode ({mode!r}) must be a gymnasium AutoresetMode or one of 'NextStep', "
        "'SameStep', 'Disabled'"
    )


def _leading(leaves: list[np.ndarray], paths: list[Any], n: int, what: str) -> None:
    for path, leaf in zip(paths, leaves):
        if leaf.ndim == 0 or leaf.shape[0] != n:
            where = "/".join(map(str, path)) or "value"
            raise ValueError(
                f"{what} {where} has shape {leaf.shape}, but a batched observer with num_envs "
                f"({n}) needs a leading dimension of {n} on every leaf"
            )


class _Splitter:
    """Cuts a nest whose leaves have a leading dimension ``n`` into ``n`` nests."""

    def __init__(self, n: int):
        self._n = n

    def check(self, tree: Any, what: str) -> None:
        """Raises unless every leaf of ``tree`` has a leading dimension ``n``."""
        paths, leaves, _ = optree.tree_flatten_with_path(tree, none_is_leaf=False)
        _leading([np.asarray(x) for x in leaves], paths, self._n, what)

    def __call__(self, tree: Any, what: str) -> list[Any]:
        paths, leaves, treedef = optree.tree_flatten_with_path(tree, none_is_leaf=False)
        arrays = [np.asarray(x) for x in leaves]
        _leading(arrays, paths, self._n, what)
        if not arrays:
            return [tree] * self._n
        return [optree.tree_unflatten(treedef, [a[i] for a in arrays]) for i in range(self._n)]


class BatchedBase:
    """What every batched observer shares: the number of environments, gymnasium's autoreset
    mode and the checks of batched input.

    Args:
      num_envs: the number of environments (the leading dimension of every batched leaf).
      env: (alternative to ``num_envs``/``autoreset_mode``) a gymnasium ``VectorEnv``: its
        ``num_envs`` and ``metadata["autoreset_mode"]`` are used.
      autoreset_mode: gymnasium's autoreset mode (default ``"NextStep"``, gymnasium's
        default); only ``on_step`` uses it.

    Raises:
      ValueError: ``num_envs`` is not a positive integer, ``autoreset_mode`` is unknown, or
        ``env`` disagrees with ``num_envs``/``autoreset_mode``.
    """

    def __init__(
        self,
        *,
        num_envs: int | None = None,
        env: Any = None,
        autoreset_mode: Any = None,
    ):
        if env is not None:
            env_n = getattr(env, "num_envs", None)
            if env_n is None:
                raise ValueError(f"env ({env!r}) has no num_envs; pass num_envs instead")
            if num_envs is not None and num_envs != env_n:
                raise ValueError(f"num_envs ({num_envs!r}) differs from env.num_envs ({env_n})")
            num_envs = env_n
            env_mode = (getattr(env, "metadata", None) or {}).get("autoreset_mode", NEXT_STEP)
            if autoreset_mode is not None and autoreset_mode_name(
                autoreset_mode
            ) != autoreset_mode_name(env_mode):
                raise ValueError(
                    f"autoreset_mode ({autoreset_mode!r}) differs from the env's "
                    f"metadata['autoreset_mode'] ({env_mode!r})"
                )
            autoreset_mode = env_mode
        if num_envs is None:
            raise ValueError("num_envs (None) must be a positive integer (or pass env=)")
        self._num_envs = positive_int("num_envs", num_envs)
        self._mode = autoreset_mode_name(NEXT_STEP if autoreset_mode is None else autoreset_mode)
        self._split = _Splitter(self._num_envs)
        # NextStep mode: environments whose next step is the reset gymnasium does for them.
        self._autoreset = np.zeros(self._num_envs, dtype=bool)

    @property
    def num_envs(self) -> int:
        return self._num_envs

    @property
    def autoreset_mode(self) -> str:
        """``"NextStep"``, ``"SameStep"`` or ``"Disabled"``."""
        return self._mode

    def __len__(self) -> int:
        return self._num_envs

    @staticmethod
    def _check_batched_step(step: Any) -> None:
        if type(step) is dict:
            return
        if not (callable(getattr(step, "is_boundary", None)) or isinstance(step, Mapping)):
            raise TypeError(
                "a batched step must be a TF-Agents Trajectory or a mapping of arrays with a "
                f"leading dimension of num_envs; got {type(step).__name__} (gymnasium vector "
                "environments go through on_reset()/on_step())"
            )

    def _mask(self, reset_mask: Any) -> np.ndarray:
        if reset_mask is None:
            return np.ones(self._num_envs, dtype=bool)
        mask = np.asarray(reset_mask)
        if mask.shape != (self._num_envs,) or mask.dtype != bool:
            raise ValueError(
                f"reset_mask must be a bool array of shape ({self._num_envs},); "
                f"got {mask.dtype} {mask.shape}"
            )
        return mask

    def _outcomes(
        self, rewards: Any, terminated: Any, truncated: Any
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``rewards``, ``terminated`` (bool) and ``done`` (terminated or truncated), each
        checked to have shape ``(num_envs,)``."""
        rewards, terminated, truncated = (
            self._vector(v, name)
            for v, name in (
                (rewards, "rewards"),
                (terminated, "terminated"),
                (truncated, "truncated"),
            )
        )
        terminated = terminated.astype(bool)
        return rewards, terminated, terminated | truncated.astype(bool)

    def _vector(self, value: Any, name: str) -> np.ndarray:
        a = np.asarray(value)
        if a.shape != (self._num_envs,):
            raise ValueError(f"{name} has shape {a.shape}; expected ({self._num_envs},)")
        return a

    def _final_obs(self, info: Any, done: np.ndarray) -> Any:
        if not isinstance(info, Mapping) or "final_obs" not in info:
            raise ValueError(
                "autoreset_mode is 'SameStep' and an episode ended, but info has no "
                "'final_obs' (pass the info that envs.step() returned)"
            )
        final = info["final_obs"]
        if isinstance(final, np.ndarray) and final.dtype == object:
            return list(final)
        # A structured observation space: a nest of arrays with a leading num_envs dimension.
        return self._split(final, "info['final_obs']")

    def close(self) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class BatchedObserver(BatchedBase):
    """One observer per environment index; see the module docstring.

    :class:`BatchedEpisodeObserver` is one; give it any factory of observers.
    (:class:`~ostinato.observers.BatchedTrajectoryObserver` writes all environments through
    one ``VectorTrajectoryWriter`` instead, and uses this class only for clients without
    one, such as dm-reverb's.)

    Args:
      make_observer: called ``num_envs`` times; each observer owns a writer.
      num_envs, env, autoreset_mode: see :class:`BatchedBase`.
    """

    def __init__(
        self,
        make_observer: Callable[[], ObserverBase],
        *,
        num_envs: int | None = None,
        env: Any = None,
        autoreset_mode: Any = None,
    ):
        super().__init__(num_envs=num_envs, env=env, autoreset_mode=autoreset_mode)
        self._observers: list[ObserverBase] = []
        try:
            for _ in range(self._num_envs):
                self._observers.append(make_observer())
        except BaseException:
            for o in self._observers:
                o.close()
            raise

    # -- properties ------------------------------------------------------------------------------
    @property
    def observers(self) -> tuple[ObserverBase, ...]:
        """The per-environment observers, by index."""
        return tuple(self._observers)

    @property
    def py_client(self) -> Any:
        return self._observers[0].py_client

    @property
    def table_names(self) -> tuple[str, ...]:
        return self._observers[0].table_names

    def __iter__(self) -> Iterator[ObserverBase]:
        return iter(self._observers)

    # -- batched steps -------------------------------------------------------------------------
    def __call__(self, step: Any) -> None:
        """Hands each environment's part of a batched step to its observer.

        Args:
          step: a TF-Agents ``Trajectory`` or a step dict whose leaves all have a leading
            dimension of ``num_envs``.

        Raises:
          ValueError: a leaf without that leading dimension (the message names it).
          TypeError: ``step`` is neither a trajectory nor a mapping.
        """
        self._check_batched_step(step)
        for observer, part in zip(self._observers, self._split(step, "step leaf")):
            observer(part)

    # -- gymnasium -------------------------------------------------------------------------------
    def on_reset(self, obs: Any, info: Any = None, reset_mask: Any = None) -> None:
        """Starts episodes with what ``envs.reset()`` returned.

        Args:
          obs: the batched observations.
          info: accepted and not stored.
          reset_mask: (``Disabled`` mode, after ``envs.reset(options={"reset_mask": mask})``)
            the environments that were reset; default all.
        """
        parts = self._split(obs, "observation")
        mask = self._mask(reset_mask)
        for i in np.flatnonzero(mask):
            self._observers[i].on_reset(parts[i])
            self._autoreset[i] = False

    def on_step(
        self,
        obs: Any,
        actions: Any,
        rewards: Any,
        terminated: Any,
        truncated: Any,
        info: Any = None,
    ) -> None:
        """Writes one step of every environment (what ``envs.step(actions)`` returned).

        Args:
          obs, rewards, terminated, truncated, info: what ``envs.step(actions)`` returned.
          actions: the actions given to ``envs.step``.

        Raises:
          ValueError: a leaf without a leading dimension of ``num_envs``; in ``SameStep``
            mode, an episode ended without ``info["final_obs"]``; in ``Disabled`` mode, an
            environment stepped after its episode ended without ``on_reset``.
        """
        n = self._num_envs
        obs_parts = self._split(obs, "observation")
        action_parts = self._split(actions, "action")
        rewards, terminated, done = self._outcomes(rewards, terminated, truncated)
        final_obs = None
        if self._mode == SAME_STEP and done.any():
            final_obs = self._final_obs(info, done)
        for i in range(n):
            observer = self._observers[i]
            if self._autoreset[i]:  # NextStep: this step only reset the environment
                self._autoreset[i] = False
                observer.on_reset(obs_parts[i])
                continue
            if final_obs is not None and done[i]:
                observer.on_step(
                    final_obs[i], action_parts[i], rewards[i], terminated[i], truncated[i]
                )
                observer.on_reset(obs_parts[i])
                continue
            observer.on_step(obs_parts[i], action_parts[i], rewards[i], terminated[i], truncated[i])
            if done[i] and self._mode == NEXT_STEP:
                self._autoreset[i] = True

    # -- TF-Agents API, for every environment ------------------------------------------------------
    def _each(self, method: str, *args: Any) -> None:
        error: BaseException | None = None
        for observer in self._observers:
            try:
                getattr(observer, method)(*args)
            except Exception as e:  # noqa: BLE001 - all get the call; the first error is raised
                if error is None:
                    error = e
        if error is not None:
            raise error

    def reset(self, write_cached_steps: bool = True) -> None:
        """``reset(write_cached_steps)`` on every environment's observer (see theirs)."""
        self._each("reset", write_cached_steps)

    def flush(self) -> None:
        """Blocks until every item created so far, by every environment, is in its table."""
        self._each("flush")

    def open(self) -> None:
        self._each("open")

    def close(self) -> None:
        """Closes every environment's writer (cached, unwritten steps are dropped)."""
        self._each("close")
        self._autoreset[:] = False

    def update_priority(self, priority: float) -> None:
        """Sets the priority of the items created from now on, for every environment."""
        self._each("update_priority", priority)

    def get_table_signature(self) -> Any:
        return self._observers[0].get_table_signature()


class BatchedEpisodeObserver(BatchedObserver):
    """:class:`~ostinato.observers.EpisodeObserver` for ``num_envs`` environments.

    Arguments as for ``EpisodeObserver``, plus ``num_envs``/``env``/``autoreset_mode``.
    """

    def __init__(
        self,
        py_client: Any,
        table_name: Any,
        max_sequence_length: int,
        priority: float = 1,
        bypass_partial_episodes: bool = False,
        *,
        num_envs: int | None = None,
        env: Any = None,
        autoreset_mode: Any = None,
        validate_items: bool = True,
    ):
        def make() -> ObserverBase:
            return EpisodeObserver(
                py_client,
                table_name,
                max_sequence_length,
                priority,
                bypass_partial_episodes,
                validate_items=validate_items,
            )

        super().__init__(make, num_envs=num_envs, env=env, autoreset_mode=autoreset_mode)

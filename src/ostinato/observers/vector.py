"""Batched trajectory observers through one ``VectorTrajectoryWriter``.

:class:`BatchedTrajectoryObserver` and :class:`BatchedTrajectorySequenceObserver` give what
one :class:`~ostinato.observers.TrajectoryObserver` (or ``TrajectorySequenceObserver``) per
environment gives -- the same items, cut, padded and ordered the same way, environment by
environment -- but write all environments' steps of a vector step with one
:class:`~ostinato.writers.vector_writer.VectorTrajectoryWriter` call and create their items
with one more, instead of ``num_envs`` appends and item creations.

Gymnasium transitions are turned into TF-Agents steps as :class:`~.steps.GymEpisode` does,
for all environments at once (see :mod:`ostinato.observers.batched` for the autoreset modes).

With a client that has no ``vector_writer`` (dm-reverb's), the observer falls back to one
observer and writer per environment (:class:`~ostinato.observers.batched.BatchedObserver`).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import optree

from ostinato.observers.base import ObserverTargets, flag
from ostinato.observers.batched import NEXT_STEP, SAME_STEP, BatchedBase, BatchedObserver
from ostinato.observers.steps import (
    FIRST_I32,
    LAST_I32,
    MID_I32,
    StepType,
    copy_nest,
    padding_step,
)
from ostinato.observers.trajectory import (
    TrajectoryObserver,
    TrajectorySequenceObserver,
    window_arguments,
)
from ostinato.writers.vector_writer import VectorColumnHistory

_LAST_INT = int(StepType.LAST)  # compares with an array without the enum's overhead
_count = np.count_nonzero  # C-level (ndarray.any()/all() go through Python wrappers)


def _is_history(x: Any) -> bool:
    return isinstance(x, VectorColumnHistory)


class BatchedTrajectoryObserver(BatchedBase, ObserverTargets):
    """:class:`~ostinato.observers.TrajectoryObserver` for ``num_envs`` environments.

    Arguments as for ``TrajectoryObserver``, plus ``num_envs``/``env``/``autoreset_mode``
    (see :class:`~ostinato.observers.batched.BatchedBase`). Steps are batched TF-Agents
    ``Trajectory`` objects or step dicts (every leaf with a leading dimension of
    ``num_envs``; a ``"step_type"`` entry marks boundaries), or gymnasium ``VectorEnv``
    transitions through :meth:`on_reset`/:meth:`on_step`.

    Items are those of one ``TrajectoryObserver`` per environment, in the same order; one
    difference: an episode's end does not wait for the items already created to reach their
    tables (``TrajectoryObserver`` flushes there). :meth:`flush`, :meth:`reset` and
    :meth:`close` do wait.

    Example:
      >>> envs = gymnasium.make_vec("CartPole-v1", num_envs=8)
      >>> observer = BatchedTrajectoryObserver(client, "replay", 2, env=envs)
      >>> obs, info = envs.reset(seed=0)
      >>> observer.on_reset(obs, info)
      >>> for _ in range(1000):
      ...     actions = envs.action_space.sample()
      ...     obs, rewards, terminated, truncated, info = envs.step(actions)
      ...     observer.on_step(obs, actions, rewards, terminated, truncated, info)
    """

    #: Windows run across episode boundaries (:class:`BatchedTrajectorySequenceObserver`).
    _across_episodes = False
    _kind: type[TrajectoryObserver] = TrajectoryObserver

    def __init__(
        self,
        py_client: Any,
        table_name: Any,
        sequence_length: int,
        stride_length: int = 1,
        priority: float = 1,
        pad_end_of_episodes: bool = False,
        tile_end_of_episodes: bool = False,
        *,
        num_envs: int | None = None,
        env: Any = None,
        autoreset_mode: Any = None,
        validate_items: bool = True,
    ):
        super().__init__(num_envs=num_envs, env=env, autoreset_mode=autoreset_mode)
        self._set_targets(py_client, table_name, priority)
        self._length, self._stride, self._pad, self._tile = window_arguments(
            sequence_length, stride_length, pad_end_of_episodes, tile_end_of_episodes
        )
        self._validate_items = flag(validate_items, "validate_items")
        self._fallback: BatchedObserver | None = None
        if not callable(getattr(py_client, "vector_writer", None)):
            kind = self._kind

            def make() -> TrajectoryObserver:
                return kind(
                    py_client,
                    table_name,
                    sequence_length,
                    stride_length,
                    priority,
                    pad_end_of_episodes,
                    tile_end_of_episodes,
                    validate_items=validate_items,
                )

            self._fallback = BatchedObserver(
                make, num_envs=self._num_envs, env=None, autoreset_mode=self._mode
            )
        n = self._num_envs
        self._writer: Any = None
        self._window: Any = None  # the trajectory of an item: the newest ``length`` steps
        self._last: Any = None  # the latest batched step (the shape of padding steps)
        # Gymnasium: the observation the next action is taken in, per environment.
        self._obs: Any = None
        self._first = np.ones(n, bool)
        self._open = np.zeros(n, bool)
        self._lasts: dict[np.dtype, np.ndarray] = {}  # per integer dtype, LAST per environment
        if self._fallback is None:
            self.open()

    # -- properties ------------------------------------------------------------------------------
    @property
    def sequence_length(self) -> int:
        return self._length

    @property
    def stride_length(self) -> int:
        return self._stride

    @property
    def cached_steps(self) -> np.ndarray:
        """Steps appended since each environment's episode (or the last ``reset``) began."""
        if self._fallback is not None:
            return np.array([o.cached_steps for o in self._fallback.observers], np.int64)  # type: ignore[attr-defined]
        return self._steps()

    @property
    def episodes_in_progress(self) -> np.ndarray:
        """Per environment: a gymnasium episode has taken a step and not ended."""
        if self._fallback is not None:
            return np.array([o._gym.in_progress for o in self._fallback.observers], bool)
        return self._open & ~self._first

    # -- writing ---------------------------------------------------------------------------------
    def _steps(self) -> np.ndarray:
        """Steps appended since each environment's episode (or the last ``reset``) began: the
        writer's count, since every window boundary ends the writer's episode too."""
        if self._writer is None:
            return np.zeros(self._num_envs, np.int64)
        return self._writer.episode_steps

    def _get_writer(self) -> Any:
        if self._writer is None:
            raise ValueError(
                "Could not obtain writer from py_client: the observer is closed; call open() "
                "before using it again."
            )
        return self._writer

    def _append(self, step: Any, mask: np.ndarray | None) -> None:
        """Appends ``step`` to the environments in ``mask`` (None: all) and writes the windows
        that completes."""
        w = self._get_writer()
        w.append(step, mask=mask)
        self._last = step
        if self._window is None:
            s = slice(-self._length, None)
            self._window = optree.tree_map(
                lambda h: h[s], w.history, is_leaf=_is_history, none_is_leaf=False
            )
        # The writer counts each environment's steps since its reset.
        if mask is None and self._stride == 1 and w.min_episode_steps >= self._length:
            k, m = self._num_envs, None  # every environment has a window (no numpy call)
        else:
            due = self._due(w.episode_steps) if self._stride > 1 else w.steps_at_least(self._length)
            if mask is not None:
                due &= mask
            k = _count(due)
            m = None if k == len(due) else due
        if k:  # each selected environment has a window (reaching ``length`` steps back)
            for name in self._table_names:
                w._create_items(
                    name, self._priority, self._window, m, timeout_ms=None, steps_checked=True
                )

    def _due(self, steps: np.ndarray) -> np.ndarray:
        """Per environment, whether its ``steps`` since its reset end a window (every
        ``stride`` steps from ``length`` on)."""
        due = steps >= self._length
        if self._stride > 1:
            due &= (steps - self._length) % self._stride == 0
        return due

    def _padding(self) -> Any:
        """A batched padding step shaped like the latest step."""
        n = self._num_envs
        return optree.tree_map(
            lambda x: np.full(n, x) if np.ndim(x) == 0 else x,
            padding_step(self._last),
            none_is_leaf=False,
        )

    def _end(self, mask: np.ndarray, write: bool) -> None:
        """``TrajectoryObserver.reset(write)`` for the environments in ``mask``."""
        error = None
        c = self._steps()
        has = mask & (c > 0)
        if write and _count(has):
            if self._pad:
                n = np.where(has, self._length - 1 if self._tile else self._length - c, 0)
                pad = self._padding()
                for j in range(int(n.max(initial=0))):
                    self._append(pad, has & (n > j))
            else:
                if _count(has & ~self._due(c)):
                    error = ValueError(
                        "write_cached_steps is True, but not enough steps remain in the cache "
                        f"to write an item with sequence_length={self._length}, consider "
                        "enabling pad_end_of_episodes."
                    )
        self._get_writer().end_episode(mask)
        if error is not None:
            raise error

    def _boundaries(self, step: Any) -> np.ndarray | None:
        """Per environment, whether ``step`` ends its episode (None: not looked at)."""
        n = self._num_envs
        method = None if type(step) is dict else getattr(step, "is_boundary", None)
        if callable(method):
            b = np.asarray(method())
        elif "step_type" in step:
            st = np.asarray(step["step_type"])
            if st.shape == (n,) and st.dtype.kind in "iu":
                # Against an array of LAST of the same shape and dtype: numpy compares with a
                # Python int for about 1.7 times as much.
                last = self._lasts.get(st.dtype)
                if last is None:
                    last = self._lasts[st.dtype] = np.full(n, _LAST_INT, st.dtype)
                b = st == last
            else:
                b = st == _LAST_INT
        elif self._across_episodes:
            return None
        else:
            raise ValueError(
                "a step dict needs a 'step_type' entry (TF-Agents StepType: 0 FIRST, 1 MID, "
                f"2 LAST) to mark episode boundaries; got keys {sorted(map(str, step))}"
            )
        if b.shape != (n,):
            raise ValueError(
                f"step_type has shape {b.shape}, but a batched observer with num_envs ({n}) "
                f"needs a leading dimension of {n} on every leaf"
            )
        return b

    # -- batched steps -----------------------------------------------------------------------------
    def __call__(self, step: Any) -> None:
        """Appends a batched step (one per environment), writes the windows it completes and
        handles the environments whose episode it ends.

        Raises:
          ValueError: a leaf without a leading dimension of ``num_envs`` (the message names
            it), or a step dict without ``"step_type"``.
          TypeError: ``step`` is neither a trajectory nor a mapping.
        """
        if self._fallback is not None:
            return self._fallback(step)
        self._check_batched_step(step)
        boundary = self._boundaries(step)  # checked before anything is appended
        self._append(step, None)
        if boundary is not None and not self._across_episodes and _count(boundary):
            self._end(boundary, self._pad)
        return None

    # -- gymnasium -------------------------------------------------------------------------------
    def _set_obs(self, mask: np.ndarray, obs: Any) -> None:
        """The next actions of the environments in ``mask`` are taken in ``obs``'s rows."""
        if self._obs is None or mask.all():
            self._obs = copy_nest(obs)
            return
        optree.tree_map(
            lambda dst, src: dst.__setitem__(mask, np.asarray(src)[mask]),
            self._obs,
            obs,
            none_is_leaf=False,
        )

    def on_reset(self, obs: Any, info: Any = None, reset_mask: Any = None) -> None:
        """Starts episodes with what ``envs.reset()`` returned.

        An environment whose episode was still running is abandoned: its cached steps are
        dropped (as ``TrajectoryObserver.on_reset`` does).

        Args:
          obs: the batched observations.
          info: accepted and not stored.
          reset_mask: (``Disabled`` mode, after ``envs.reset(options={"reset_mask": mask})``)
            the environments that were reset; default all.
        """
        if self._fallback is not None:
            return self._fallback.on_reset(obs, info, reset_mask)
        self._split.check(obs, "observation")
        mask = self._mask(reset_mask)
        self._start(mask, obs)
        return None

    def _start(self, mask: np.ndarray, obs: Any) -> None:
        running = mask & self._open & ~self._first
        if running.any() and not self._across_episodes:
            self._end(running, False)
        self._set_obs(mask, obs)
        self._first[mask] = True
        self._open[mask] = True
        self._autoreset[mask] = False

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

        Raises:
          ValueError: a leaf without a leading dimension of ``num_envs``; in ``SameStep``
            mode, an episode ended without ``info["final_obs"]``; an environment stepped
            while no episode of it is open (``on_reset`` first). Nothing is written then.
        """
        if self._fallback is not None:
            return self._fallback.on_step(obs, actions, rewards, terminated, truncated, info)
        self._split.check(obs, "observation")
        self._split.check(actions, "action")
        rewards, terminated, done = self._outcomes(rewards, terminated, truncated)
        resets = self._autoreset.copy()  # NextStep: this step only reset these environments
        active = ~resets
        if (active & ~self._open).any():
            raise ValueError(
                "on_step() needs an open episode: call on_reset(obs, info) with what "
                "env.reset() returned first (and again after an episode ends)"
            )
        final_obs = None
        if self._mode == SAME_STEP and (done & active).any():
            final_obs = self._final_obs(info, done)
        actions = np.asarray(actions)
        step = {
            "step_type": np.where(self._first, FIRST_I32, MID_I32),
            "observation": self._obs,
            "action": actions,
            "next_step_type": np.where(done, LAST_I32, MID_I32),
            "reward": np.asarray(rewards, np.float32),
            "discount": np.where(terminated, np.float32(0.0), np.float32(1.0)),
        }
        self._append(step, None if not resets.any() else active)
        ended = done & active
        going = active & ~done
        if going.any():
            self._set_obs(going, obs)
            self._first[going] = False
        if ended.any():
            last_obs = obs if final_obs is None else self._with_rows(obs, ended, final_obs)
            boundary = {
                "step_type": np.full(self._num_envs, LAST_I32),
                "observation": copy_nest(last_obs),
                "action": np.zeros_like(actions),
                "next_step_type": np.full(self._num_envs, FIRST_I32),
                "reward": np.zeros(self._num_envs, np.float32),
                "discount": np.ones(self._num_envs, np.float32),
            }
            self._append(boundary, None if ended.all() else ended)
            if not self._across_episodes:
                self._end(ended, self._pad)
            self._open[ended] = False
            self._first[ended] = True
        if resets.any():
            self._start(resets, obs)
        if self._mode == NEXT_STEP:
            self._autoreset[ended] = True
        elif self._mode == SAME_STEP and ended.any():
            self._start(ended, obs)  # obs is the next episode's first observation
        return None

    def _with_rows(self, obs: Any, rows: np.ndarray, final: Any) -> Any:
        """``obs`` with row ``i`` replaced by ``final[i]`` for the environments in ``rows``."""
        out = copy_nest(obs)
        for i in np.flatnonzero(rows).tolist():
            optree.tree_map(
                lambda dst, src, i=i: dst.__setitem__(i, np.asarray(src)),
                out,
                final[i],
                none_is_leaf=False,
            )
        return out

    # -- TF-Agents API, for every environment ------------------------------------------------------
    def reset(self, write_cached_steps: bool = True) -> None:
        """``TrajectoryObserver.reset(write_cached_steps)`` for every environment, then waits
        for the items created so far.

        Raises:
          ValueError: ``write_cached_steps`` without ``pad_end_of_episodes`` and an environment
            whose cache holds no due window (every environment is reset regardless).
        """
        if self._fallback is not None:
            return self._fallback.reset(write_cached_steps)
        write = flag(write_cached_steps, "write_cached_steps")
        try:
            self._end(np.ones(self._num_envs, bool), write)
        finally:
            self._get_writer().flush()
        return None

    def flush(self) -> None:
        """Blocks until every item created so far, by every environment, is in its table."""
        if self._fallback is not None:
            return self._fallback.flush()
        self._get_writer().flush()
        return None

    def open(self) -> None:
        """Opens a new writer after ``close()``; does nothing while one is open."""
        if self._fallback is not None:
            return self._fallback.open()
        if self._writer is None:
            self._writer = self._py_client.vector_writer(
                self._num_envs, self._length, validate_items=self._validate_items
            )
            self._window = None
            self._last = None
        return None

    def close(self) -> None:
        """Delivers the items already created, then closes the writer (cached, unwritten steps
        are dropped; call ``reset()`` first to write them). ``open()`` makes the observer usable
        again."""
        if self._fallback is not None:
            return self._fallback.close()
        if self._writer is not None:
            try:
                self._writer.flush()
            finally:
                self._writer.close()
                self._writer = None
                self._obs = None
                self._first[:] = True
                self._open[:] = False
                self._autoreset[:] = False
        return None

    def update_priority(self, priority: float) -> None:
        """Sets the priority of the items created from now on, for every environment."""
        super().update_priority(priority)
        if self._fallback is not None:
            self._fallback.update_priority(priority)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(tables={self._table_names}, num_envs={self._num_envs}, "
            f"sequence_length={self._length}, stride_length={self._stride})"
        )


class BatchedTrajectorySequenceObserver(BatchedTrajectoryObserver):
    """:class:`~ostinato.observers.TrajectorySequenceObserver` for ``num_envs`` environments
    (windows run across one environment's episodes, never across environments)."""

    _across_episodes = True
    _kind = TrajectorySequenceObserver

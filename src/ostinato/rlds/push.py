"""Pushing RLDS data through an observer into tables, whole episodes at a time."""

from __future__ import annotations

import logging
import sys
import time
from typing import Any

import numpy as np
import optree
import tensorflow as tf

from ostinato.rlds.convert import (
    PolicyInfoFn,
    _indexed_trajectories,
    add_outer_dim,
    create_trajectory_data_spec,
)
from ostinato.rlds.trajectory import StepType

_log = logging.getLogger("ostinato.rlds")

_MISMATCH = "Replay buffer table signature spec should match RLDS data spec."


def _flat(tree: Any) -> list[tuple[str, Any]]:
    """``(path, leaf)`` pairs, the path written ``observation/a`` (field names for tuples)."""
    fields = getattr(tree, "_fields", None)
    if fields is not None:
        return [(f"{name}/{p}" if p else name, leaf)
                for name, value in zip(fields, tree) for p, leaf in _flat(value)]
    paths, leaves, _ = optree.tree_flatten_with_path(tree, none_is_leaf=False)
    return [("/".join(map(str, p)), leaf) for p, leaf in zip(paths, leaves)]


def _leaf(s: Any) -> tuple:
    from ostinato.core.specs import TensorSpec

    s = TensorSpec.from_spec(s)
    return s.shape, s.dtype, s.name


def _mismatch(table: Any, expected: Any, *, names: bool = True) -> str | None:
    """Why ``table`` differs from ``expected`` (shape, dtype and name per leaf), or None."""
    try:
        tf.nest.assert_same_structure(table, expected, check_types=False)
    except (ValueError, TypeError) as e:
        return f"structures differ: {e}"
    for (path, b), (_, a) in zip(_flat(expected), _flat(table)):
        la, lb = _leaf(a), _leaf(b)
        if not names:
            la, lb = la[:2], lb[:2]
        if la != lb:
            return f"{path}: the table has {la}, the data gives {lb}"
    return None


def check_table_signature(table_signature: Any, rlds_data: Any,
                          policy_info_fn: PolicyInfoFn | None = None) -> None:
    """Raises TF-Agents' ``ValueError`` unless the table takes these trajectories.

    The table's signature must equal ``create_trajectory_data_signature(rlds_data)`` (shape,
    dtype and name of each leaf; bounds are not compared). With ``policy_info_fn`` its
    ``policy_info`` may be ``()`` (what TF-Agents compares with) or the shapes and dtypes the
    function gives. A table without a signature (``None``) takes anything.
    """
    if table_signature is None:
        return
    expected = add_outer_dim(create_trajectory_data_spec(rlds_data))
    why = _mismatch(table_signature, expected)
    if why is not None and policy_info_fn is not None and hasattr(table_signature, "_replace"):
        # The rest as expected and policy_info with the function's shapes and dtypes.
        if _mismatch(table_signature._replace(policy_info=()), expected) is None:
            element = _indexed_trajectories(rlds_data, policy_info_fn).element_spec[3]
            if _mismatch(table_signature.policy_info, add_outer_dim(element.policy_info),
                         names=False) is None:
                why = None
    if why is not None:
        err = ValueError(_MISMATCH)  # TF-Agents' message, exactly; the difference as a note
        err.detail = why  # type: ignore[attr-defined]
        if hasattr(err, "add_note"):
            err.add_note(why)
        raise err


class _Progress:
    """A rich progress line (steps, episodes, steps/s) when shown; a log line otherwise."""

    def __init__(self, show: bool | None):
        self.show = sys.stderr.isatty() if show is None else bool(show)
        self.start = time.perf_counter()
        self._bar: Any = None
        if self.show:
            from rich.console import Console
            from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

            self._bar = Progress(SpinnerColumn(), TextColumn("{task.description}"),
                                 TextColumn("{task.fields[steps]:,} steps"),
                                 TextColumn("{task.fields[episodes]:,} episodes"),
                                 TextColumn("{task.fields[rate]:,.0f} steps/s"),
                                 TimeElapsedColumn(), console=Console(stderr=True),
                                 transient=False)
            self._bar.start()
            self._task = self._bar.add_task("RLDS -> table", steps=0, episodes=0, rate=0.0)

    def update(self, steps: int, episodes: int) -> None:
        if self._bar is not None:
            rate = steps / max(time.perf_counter() - self.start, 1e-9)
            self._bar.update(self._task, steps=steps, episodes=episodes, rate=rate)

    def finish(self, steps: int, episodes: int, failed: bool) -> None:
        elapsed = time.perf_counter() - self.start
        rate = steps / max(elapsed, 1e-9)
        line = (f"{'Stopped after pushing' if failed else 'Pushed'} {steps:,} steps "
                f"({episodes:,} episodes) in {elapsed:.2f} s, {rate:,.0f} steps/s")
        if self._bar is not None:
            self.update(steps, episodes)
            self._bar.stop()
            self._bar.console.print(line)
        _log.info("%s", line)


def _shapes(traj: Any) -> list[tuple[int, ...]]:
    return [np.shape(x) for _, x in _flat(traj)]


_BATCH = 256


def _fully_defined(dataset: Any) -> bool:
    return all(s.shape.is_fully_defined() for s in tf.nest.flatten(dataset.element_spec))


def _elements(dataset: Any) -> Any:
    """``(episode, step, error, trajectory)`` as numpy, read from TensorFlow in batches when
    every shape is fully known (tf.data's per-element Python cost is paid once a batch)."""
    if not _fully_defined(dataset):
        yield from dataset.as_numpy_iterator()
        return
    for episodes, steps, errors, trajs in dataset.batch(_BATCH).as_numpy_iterator():
        leaves, treedef = optree.tree_flatten(trajs, none_is_leaf=False)
        for k in range(len(episodes)):
            yield (episodes[k], steps[k], errors[k],
                   optree.tree_unflatten(treedef, [leaf[k] for leaf in leaves]))


def push_rlds_to_reverb(rlds_data: Any, reverb_observer: Any,
                        policy_info_fn: PolicyInfoFn | None = None, *,
                        progress: bool | None = None) -> int:
    """Writes ``rlds_data`` through ``reverb_observer`` as TF-Agents trajectories.

    TF-Agents' ``push_rlds_to_reverb``: the observer's table signature is checked (see
    :func:`check_table_signature`), then every trajectory of
    :func:`~ostinato.rlds.convert_rlds_to_trajectories` is given to the observer, and the
    number of trajectories written (one per RLDS step) is returned. The observer is not
    flushed, reset or closed (the caller does that, as with TF-Agents).

    Beyond TF-Agents, trajectories reach the observer one whole episode at a time, after the
    episode was checked: a malformed episode raises, naming ``(episode E, step S)``, before
    any of its steps reach the observer, so nothing of it is written to the table (episodes
    before it are written).

    Args:
      rlds_data: a ``tf.data.Dataset`` of RLDS episodes or steps.
      reverb_observer: anything called with one trajectory at a time: an
        :mod:`ostinato.observers` observer (embedded or networked client), or TF-Agents'
        ``ReverbAddTrajectoryObserver``/``ReverbAddEpisodeObserver``. Its
        ``get_table_signature()`` is used when it has one.
      policy_info_fn: optional ``fn(current_step, next_step) -> nest`` for ``policy_info``.
      progress: show a progress line (steps, episodes, steps/s) and a summary on stderr;
        ``None`` (the default): only when stderr is a terminal.

    Raises:
      ValueError: no RLDS steps or an invalid step spec (as TF-Agents); the table signature
        does not match; a step whose shapes differ from the earlier steps' (naming episode
        and step).
      tf.errors.InvalidArgumentError: a malformed episode (TF-Agents' messages, plus an
        episode that does not start with ``is_first``), naming episode and step.
    """
    get_signature = getattr(reverb_observer, "get_table_signature", None)
    if callable(get_signature):
        check_table_signature(get_signature(), rlds_data, policy_info_fn)
    else:
        create_trajectory_data_spec(rlds_data)  # the eager ValueErrors
    dataset = _indexed_trajectories(rlds_data, policy_info_fn, lazy_errors=False)
    check_shapes = not _fully_defined(dataset)  # else tf.data guarantees them
    bar = _Progress(progress)
    written = episodes = 0
    pending: list[Any] = []
    pending_episode: Any = None
    shapes: list[tuple[int, ...]] | None = None
    failed = True

    def deliver() -> None:
        nonlocal written, episodes
        for traj in pending:
            reverb_observer(traj)
        written += len(pending)
        episodes += 1
        pending.clear()
        bar.update(written, episodes)

    try:
        for episode, step, error, traj in _elements(dataset):
            if error:
                raise tf.errors.InvalidArgumentError(
                    None, None,
                    f"{error.decode()} -- nothing of this episode was written; "
                    f"{written} trajectories of {episodes} earlier episodes were.")
            if episode != pending_episode and pending:
                deliver()
            pending_episode = episode
            if check_shapes:
                got = _shapes(traj)
                if shapes is None:
                    shapes = got
                elif got != shapes:
                    paths = [p for p, _ in _flat(traj)]
                    path, a, b = next((p, a, b) for p, a, b in zip(paths, got, shapes)
                                      if a != b)
                    raise ValueError(
                        f"Inconsistent shapes (episode {episode}, step {step}): {path} has "
                        f"shape {a}, but earlier steps have {b}. Nothing of this episode was "
                        f"written; {written} trajectories of {episodes} earlier episodes were.")
            pending.append(traj)
            if traj.step_type == StepType.LAST:  # the episode's boundary: it is complete
                deliver()
        if pending:
            deliver()
        failed = False
    finally:
        bar.finish(written, episodes, failed)
    return written


def push_rlds_to_table(rlds_data: Any, client: Any, table: Any, *, sequence_length: int = 2,
                       stride_length: int = 1, priority: float = 1.0,
                       pad_end_of_episodes: bool = False, tile_end_of_episodes: bool = False,
                       policy_info_fn: PolicyInfoFn | None = None,
                       progress: bool | None = None) -> int:
    """:func:`push_rlds_to_reverb` through a :class:`ostinato.observers.TrajectoryObserver`.

    The observer (``sequence_length``-step windows every ``stride_length`` steps, TF-Agents'
    ``ReverbAddTrajectoryObserver`` arguments) is made on ``client`` (embedded or networked)
    for ``table`` (a name or a sequence of names), then flushed and closed.

    Returns:
      The number of trajectories written (one per RLDS step).
    """
    from ostinato.observers import TrajectoryObserver

    observer = TrajectoryObserver(client, table, sequence_length, stride_length=stride_length,
                                  priority=priority, pad_end_of_episodes=pad_end_of_episodes,
                                  tile_end_of_episodes=tile_end_of_episodes)
    try:
        count = push_rlds_to_reverb(rlds_data, observer, policy_info_fn, progress=progress)
        observer.flush()
    finally:
        observer.close()
    return count

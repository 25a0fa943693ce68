"""Pushing RLDS data through an observer into tables, whole episodes at a time."""

from __future__ import annotations

from collections.abc import Iterator
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
from ostinato.rlds.ingest import ObserverSink, Progress, TableSink, UnitWriter, table_signature
from ostinato.rlds.specs import flat_paths as _flat
from ostinato.rlds.specs import spec_mismatch
from ostinato.rlds.steps import Converter, TrajectoryChunk
from ostinato.rlds.tf_reader import can_read_columns, step_chunks
from ostinato.rlds.trajectory import trajectory_class

_MISMATCH = "Replay buffer table signature spec should match RLDS data spec."


def _mismatch(table: Any, expected: Any, *, names: bool = True) -> str | None:
    """Why ``table`` differs from ``expected`` (its structure, then shape, dtype and name per
    leaf), or None."""
    try:
        tf.nest.assert_same_structure(table, expected, check_types=False)
    except (ValueError, TypeError) as e:
        return f"structures differ: {e}"
    return spec_mismatch(table, expected, names=names)


def check_table_signature(
    table_signature: Any, rlds_data: Any, policy_info_fn: PolicyInfoFn | None = None
) -> None:
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
            if (
                _mismatch(
                    table_signature.policy_info, add_outer_dim(element.policy_info), names=False
                )
                is None
            ):
                why = None
    if why is not None:
        err = ValueError(_MISMATCH)  # TF-Agents' message, exactly; the difference as a note
        err.detail = why  # type: ignore[attr-defined]
        if hasattr(err, "add_note"):
            err.add_note(why)
        raise err


def _shapes(traj: Any) -> list[tuple[int, ...]]:
    return [np.shape(x) for _, x in _flat(traj)]


_BATCH = 256


def _fully_defined(dataset: Any) -> bool:
    return all(s.shape.is_fully_defined() for s in tf.nest.flatten(dataset.element_spec))


def _elements(dataset: Any) -> Iterator[tuple[Any, Any, Any, Any]]:
    """``(episode, step, error, trajectory)`` as numpy, read from TensorFlow in batches when
    every shape is fully known (tf.data's per-element Python cost is paid once a batch)."""
    if not _fully_defined(dataset):
        yield from dataset.as_numpy_iterator()
        return
    for episodes, steps, errors, trajs in dataset.batch(_BATCH).as_numpy_iterator():
        leaves, treedef = optree.tree_flatten(trajs, none_is_leaf=False)
        for k in range(len(episodes)):
            yield (
                episodes[k],
                steps[k],
                errors[k],
                optree.tree_unflatten(treedef, [leaf[k] for leaf in leaves]),
            )


def _invalid_argument(message: str) -> Exception:
    return tf.errors.InvalidArgumentError(None, None, message)


def _push_columns(rlds_data: Any, units: UnitWriter) -> None:
    """The fast path: steps read in batches, converted with numpy."""
    converter = Converter(trajectory_class())
    for chunk in step_chunks(rlds_data):
        units.feed(converter.feed(chunk))
    units.feed(converter.finish())


def _stack(elements: list[tuple[Any, Any, Any]], error: tuple[int, str] | None) -> TrajectoryChunk:
    trajs = [t for _, _, t in elements]
    return TrajectoryChunk(
        np.array([e for e, _, _ in elements], np.int64),
        np.array([s for _, s, _ in elements], np.int64),
        optree.tree_map(lambda *xs: np.stack(xs), *trajs, none_is_leaf=False),
        error,
    )


def _push_elements(rlds_data: Any, policy_info_fn: PolicyInfoFn | None, units: UnitWriter) -> None:
    """With ``policy_info_fn`` or steps of unknown shapes: converted by tf.data, per step."""
    dataset = _indexed_trajectories(rlds_data, policy_info_fn, lazy_errors=False)
    check_shapes = not _fully_defined(dataset)  # else tf.data guarantees them
    shapes: list[tuple[int, ...]] | None = None
    elements: list[tuple[Any, Any, Any]] = []
    for episode, step, error, traj in _elements(dataset):
        failure, error_type = None, None
        if error:
            failure = error.decode()
        elif check_shapes:
            got = _shapes(traj)
            if shapes is None:
                shapes = got
            elif got != shapes:
                paths = [p for p, _ in _flat(traj)]
                path, a, b = next((p, a, b) for p, a, b in zip(paths, got, shapes) if a != b)
                failure = (
                    f"Inconsistent shapes (episode {episode}, step {step}): {path} has "
                    f"shape {a}, but earlier steps have {b}."
                )
                error_type = ValueError
        if failure is not None:
            if elements:
                units.feed(_stack(elements, (len(elements), failure)), error_type)
            raise units.fail(failure, error_type)
        elements.append((episode, step, traj))
        if len(elements) >= _BATCH:
            units.feed(_stack(elements, None))
            elements = []
    if elements:
        units.feed(_stack(elements, None))


def _push(
    rlds_data: Any, sink: Any, policy_info_fn: PolicyInfoFn | None, progress: bool | None
) -> int:
    bar = Progress(progress, "RLDS -> table")
    units = UnitWriter(sink, bar, _invalid_argument)
    failed = True
    try:
        if policy_info_fn is None and can_read_columns(rlds_data):
            _push_columns(rlds_data, units)
        else:
            _push_elements(rlds_data, policy_info_fn, units)
        units.finish()
        failed = False
    finally:
        bar.finish(units.written, units.episodes, failed)
    return units.written


def push_rlds_to_reverb(
    rlds_data: Any,
    reverb_observer: Any,
    policy_info_fn: PolicyInfoFn | None = None,
    *,
    progress: bool | None = None,
) -> int:
    """Writes ``rlds_data`` through ``reverb_observer`` as TF-Agents trajectories.

    TF-Agents' ``push_rlds_to_reverb``: the observer's table signature is checked (see
    :func:`check_table_signature`), then every trajectory of
    :func:`~ostinato.rlds.convert_rlds_to_trajectories` is given to the observer, and the
    number of trajectories written (one per RLDS step) is returned. The observer is not
    flushed, reset or closed (the caller does that, as with TF-Agents).

    Beyond TF-Agents, trajectories reach the observer one whole episode at a time, after the
    episode was checked: a malformed episode raises, naming ``(episode E, step S)``, before
    any of its steps reach the observer, so nothing of it is written to the table (episodes
    before it are written). Steps are read from TensorFlow in batches and converted with
    numpy when their shapes are fully known and there is no ``policy_info_fn`` (the values
    are the same; see :mod:`ostinato.rlds.steps`); otherwise tf.data converts them one by
    one.

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
    return _push(rlds_data, ObserverSink(reverb_observer), policy_info_fn, progress)


def push_rlds_to_table(
    rlds_data: Any,
    client: Any,
    table: Any,
    *,
    sequence_length: int = 2,
    stride_length: int = 1,
    priority: float = 1.0,
    pad_end_of_episodes: bool = False,
    tile_end_of_episodes: bool = False,
    policy_info_fn: PolicyInfoFn | None = None,
    progress: bool | None = None,
    timeout: float | None = None,
    max_pending_items: int | None = 512,
    max_steps_per_second: float | None = None,
) -> int:
    """:func:`push_rlds_to_reverb` into ``table`` with TF-Agents' trajectory windows.

    Writes the items a :class:`ostinato.observers.TrajectoryObserver` (TF-Agents'
    ``ReverbAddTrajectoryObserver``: ``sequence_length``-step windows every
    ``stride_length`` steps, never across an episode boundary) on ``client`` would write, but
    from whole columns, without the observer's per-step work; the items are delivered (the
    writer flushed) before it returns.

    Args:
      rlds_data: a ``tf.data.Dataset`` of RLDS episodes or steps.
      client: an :class:`ostinato.Client`, embedded or networked.
      table: a table name, or a sequence of names (each item goes to every table; the data
        is stored once). The tables must exist; the first one's signature is checked as
        :func:`push_rlds_to_reverb` checks it.
      sequence_length, stride_length, priority, pad_end_of_episodes, tile_end_of_episodes:
        as :class:`~ostinato.observers.TrajectoryObserver`'s.
      policy_info_fn: optional ``fn(current_step, next_step) -> nest`` for ``policy_info``.
      progress: as :func:`push_rlds_to_reverb`'s.
      timeout: seconds any one blocking wait may take (the server's answer about the table,
        an item waiting for the rate limiter, the final flush); ``None``: no limit.
      max_pending_items: items written but not yet confirmed by the server at most (then it
        waits): over gRPC, small insert requests let the server answer samplers between
        them; ``None``: the writer's own limit.
      max_steps_per_second: write at most this many steps per second, to leave a busy
        server's time to its samplers; ``None``: as fast as it goes.

    Returns:
      The number of trajectories written (one per RLDS step).

    Raises:
      ostinato.errors.TableNotFoundError: a table does not exist.
      ostinato.errors.DeadlineExceededError: a wait took longer than ``timeout``.
      ValueError, tf.errors.InvalidArgumentError: as :func:`push_rlds_to_reverb`.
    """
    sink = TableSink(
        client,
        table,
        sequence_length,
        stride_length,
        priority,
        pad_end_of_episodes,
        tile_end_of_episodes,
        timeout,
        max_pending_items,
        max_steps_per_second,
    )

    def push() -> int:
        names = [table] if isinstance(table, str) else list(table)
        check_table_signature(table_signature(client, names[0], timeout), rlds_data, policy_info_fn)
        return _push(rlds_data, sink, policy_info_fn, progress)

    return sink.run(push, keep_on=(ValueError, tf.errors.InvalidArgumentError))

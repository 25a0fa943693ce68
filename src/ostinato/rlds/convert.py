"""RLDS steps to TF-Agents trajectories with tf.data (TensorFlow is imported here)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import tensorflow as tf

from ostinato.rlds.steps import (
    LAST_NOT_BEFORE_FIRST,
    MID_BEFORE_FIRST,
    NO_START,
    TERMINAL_NOT_LAST,
)
from ostinato.rlds.trajectory import STEP_FEATURES, StepType, Trajectory, trajectory_class

PolicyInfoFn = Callable[[dict, dict], Any]

_NO_STEPS = "No dataset representing RLDS steps exist in the data."


def _bounded_spec(shape: Any, dtype: Any, minimum: Any, maximum: Any, name: str) -> Any:
    """TF-Agents' ``BoundedTensorSpec`` (TensorFlow's own class; a plain spec if it is gone)."""
    try:
        from tensorflow.python.framework.tensor_spec import BoundedTensorSpec
    except ImportError:  # pragma: no cover - TensorFlow moved it
        return tf.TensorSpec(shape, dtype, name=name)
    return BoundedTensorSpec(shape, dtype, minimum, maximum, name)


def _is_episodes(rlds_data: Any) -> bool:
    """True for a dataset of episodes; False for a dataset of steps; ValueError otherwise."""
    spec = getattr(rlds_data, "element_spec", None)
    if spec is None:
        raise TypeError(
            f"rlds_data must be a tf.data.Dataset of RLDS episodes or steps; got "
            f"{type(rlds_data).__name__}"
        )
    if isinstance(spec, Mapping) and "steps" in spec:
        return True
    if isinstance(spec, Mapping) and all(k in spec for k in STEP_FEATURES):
        return False
    raise ValueError(_NO_STEPS)


def _check_step_spec(spec: Any) -> None:
    if not isinstance(spec, Mapping) or not all(k in spec for k in STEP_FEATURES):
        found = list(spec.keys()) if isinstance(spec, Mapping) else spec
        raise ValueError(
            f"Invalid RLDS step spec. Features expected are {list(STEP_FEATURES)}, but found "
            f"{found}"
        )


def _step_spec(rlds_data: Any) -> Mapping:
    """The element spec of one RLDS step, checked as TF-Agents checks it (eagerly)."""
    if _is_episodes(rlds_data):
        steps_spec = rlds_data.element_spec["steps"]
        spec = getattr(steps_spec, "element_spec", None)
        if spec is None:
            raise ValueError(_NO_STEPS)
    else:
        spec = rlds_data.element_spec
    _check_step_spec(spec)
    return spec


def create_trajectory_data_spec(rlds_data: Any) -> Trajectory:
    """The :class:`Trajectory` of specs of one step made from ``rlds_data`` (no time dim).

    ``step_type`` and ``next_step_type`` are ``TensorSpec((), int32, 'step_type')``;
    ``observation``, ``action`` and ``reward`` are the RLDS step's specs; ``policy_info`` is
    ``()``; ``discount`` is ``BoundedTensorSpec((), float32, 'discount', 0, 1)`` -- what
    TF-Agents' function returns.

    Raises:
      ValueError: ``rlds_data`` has no RLDS steps, or its steps lack one of
        :data:`~ostinato.rlds.STEP_FEATURES`.
    """
    spec = _step_spec(rlds_data)
    step_type = tf.TensorSpec((), tf.int32, name="step_type")
    return trajectory_class()(
        step_type=step_type,
        observation=spec["observation"],
        action=spec["action"],
        policy_info=(),
        next_step_type=step_type,
        reward=spec["reward"],
        discount=_bounded_spec((), tf.float32, 0.0, 1.0, "discount"),
    )


def add_outer_dim(spec: Any, dim: int | None = None) -> Any:
    """``spec`` with a leading dimension on every leaf, bounds kept (TF-Agents' function)."""

    def add(s: Any) -> Any:
        shape = [dim, *tf.TensorShape(s.shape).as_list()]
        if hasattr(s, "minimum") and hasattr(s, "maximum"):
            return _bounded_spec(shape, s.dtype, s.minimum, s.maximum, s.name)
        return tf.TensorSpec(shape, s.dtype, name=getattr(s, "name", None))

    return tf.nest.map_structure(add, spec)


def create_trajectory_data_signature(rlds_data: Any) -> Trajectory:
    """:func:`create_trajectory_data_spec` with an outer time dimension of ``None``.

    What a table that takes these trajectories needs as its ``signature``
    (``tensor_spec.add_outer_dim(create_trajectory_data_spec(rlds_data))`` in TF-Agents).
    """
    return add_outer_dim(create_trajectory_data_spec(rlds_data))


# -- conversion ------------------------------------------------------------------------------


def _indexed_steps(rlds_data: Any) -> Any:
    """``(episode_index, step_index, step)`` for every step, episodes flattened."""
    if _is_episodes(rlds_data):

        def episode_steps(i: Any, episode: Any) -> Any:
            return episode["steps"].enumerate().map(lambda j, step: (i, j, step))

        return rlds_data.enumerate().flat_map(episode_steps)

    def count(state: Any, step: Any) -> Any:
        episode, index = state
        first = tf.cast(step["is_first"], tf.bool)
        episode = episode + tf.cast(first, tf.int64)
        index = tf.where(first, tf.constant(0, tf.int64), index + 1)
        return (episode, index), (tf.maximum(episode, 0), index, step)

    start = (tf.constant(-1, tf.int64), tf.constant(-1, tf.int64))
    return rlds_data.scan(start, count)


def _zeros(spec: Any) -> Any:
    shape = [0 if d is None else d for d in tf.TensorShape(spec.shape).as_list()]
    return tf.zeros(shape, spec.dtype)


def _padding_step(spec: Mapping) -> Any:
    """The step TF-Agents appends to the data: zeros everywhere, ``is_first`` True."""
    step = {k: tf.nest.map_structure(_zeros, v) for k, v in spec.items()}
    step["is_first"] = tf.ones((), spec["is_first"].dtype)
    minus_one = tf.constant(-1, tf.int64)
    return minus_one, minus_one, step


def _pairs(steps: Any) -> Any:
    """``((i, j, current), (i', j', next))`` for each two consecutive elements, in one pass.

    Steps are not stacked, so steps of different shapes pair too.
    """
    start = tf.nest.map_structure(_zeros, steps.element_spec)
    return steps.scan(start, lambda prev, cur: (cur, (prev, cur))).skip(1)


def _stack_pair(a: Any, b: Any) -> Any:
    # Leading dimension unknown, as TF-Agents' sliding-window batch gives it.
    pair = tf.stack([a, b])
    return tf.raw_ops.PlaceholderWithDefault(input=pair, shape=[None, *pair.shape[1:]])


def _stack_dicts(cur: Mapping, nxt: Mapping) -> tuple[dict, dict]:
    """TF-Agents' quirk, kept: a feature that is a dict is not split; both steps get the
    pair of values, stacked."""
    cur, nxt = dict(cur), dict(nxt)
    for key, value in cur.items():
        if isinstance(value, dict):
            cur[key] = nxt[key] = tf.nest.map_structure(_stack_pair, value, nxt[key])
    return cur, nxt


def _step_type(step: Mapping) -> Any:
    first = tf.cast(step["is_first"], tf.bool)
    last = tf.cast(step["is_last"], tf.bool)
    return tf.where(
        first, int(StepType.FIRST), tf.where(last, int(StepType.LAST), int(StepType.MID))
    )


def _where(i: Any, j: Any) -> Any:
    return tf.strings.format("(episode {}, step {})", (i, j))


def _rules(cur: Mapping, nxt: Mapping, i: Any, j: Any) -> list:
    """``(ok, message)`` per check: TF-Agents' three, in its order, then the episode start."""
    first, last = tf.cast(cur["is_first"], tf.bool), tf.cast(cur["is_last"], tf.bool)
    terminal = tf.cast(cur["is_terminal"], tf.bool)
    next_first = tf.cast(nxt["is_first"], tf.bool)
    mid = tf.logical_not(first) & tf.logical_not(last)
    here, there = _where(i[0], j[0]), _where(i[1], j[1])
    rules = [
        (tf.logical_not(terminal) | last, TERMINAL_NOT_LAST, here),
        (tf.logical_not(mid) | tf.logical_not(next_first), MID_BEFORE_FIRST, here),
        # A next step that starts an episode of an episodes dataset is left to the
        # episode-start check on the next pair, so that this episode is complete.
        (tf.logical_not(last) | next_first | tf.equal(j[1], 0), LAST_NOT_BEFORE_FIRST, there),
        # Beyond TF-Agents: an episode (and the data) must start with is_first.
        (tf.not_equal(j[0], 0) | first, NO_START, here),
    ]
    return [(ok, tf.strings.join([message, where], separator=" ")) for ok, message, where in rules]


def _indexed_trajectories(
    rlds_data: Any, policy_info_fn: PolicyInfoFn | None, *, lazy_errors: bool = True
) -> Any:
    """``(episode_index, step_index, error, Trajectory)`` for every RLDS step.

    ``error`` is the first failing check's message (``b""`` when the step is fine); with
    ``lazy_errors`` the iterator raises ``InvalidArgumentError`` with it instead.
    """
    spec = _step_spec(rlds_data)
    steps = _indexed_steps(rlds_data)
    steps = steps.concatenate(tf.data.Dataset.from_tensors(_padding_step(spec)))
    pairs = _pairs(steps)
    cls = trajectory_class()

    def to_trajectory(current: Any, following: Any) -> Any:
        i, j = (current[0], following[0]), (current[1], following[1])
        cur, nxt = _stack_dicts(current[2], following[2])
        rules = _rules(cur, nxt, i, j)
        error, asserts = tf.constant(""), []
        if lazy_errors:
            asserts = [tf.debugging.Assert(ok, [message]) for ok, message in rules]
        else:
            for ok, message in reversed(rules):  # the first failing check's message
                error = tf.where(ok, error, message)
        with tf.control_dependencies(asserts):
            step_type = tf.identity(_step_type(cur))
            next_step_type = _step_type(nxt)
        # A one-step episode (FIRST followed by FIRST) is LAST -> LAST, as in TF-Agents.
        single = tf.equal(step_type, int(StepType.FIRST)) & tf.equal(
            next_step_type, int(StepType.FIRST)
        )
        step_type = tf.where(single, int(StepType.LAST), step_type)
        next_step_type = tf.where(single, int(StepType.LAST), next_step_type)
        policy_info = policy_info_fn(cur, nxt) if policy_info_fn else ()
        complete = tf.cast(cur["is_last"], tf.bool) & tf.cast(cur["is_terminal"], tf.bool)
        discount = cur["discount"]
        discount = tf.where(complete, tf.zeros_like(discount), discount)
        return (
            i[0],
            j[0],
            error,
            cls(
                step_type=step_type,
                observation=cur["observation"],
                action=cur["action"],
                policy_info=policy_info,
                next_step_type=next_step_type,
                reward=cur["reward"],
                discount=discount,
            ),
        )

    return pairs.map(to_trajectory)


def convert_rlds_to_trajectories(rlds_data: Any, policy_info_fn: PolicyInfoFn | None = None) -> Any:
    """A ``tf.data.Dataset`` of :class:`Trajectory`, one per RLDS step (TF-Agents' semantics).

    Steps are flattened across episodes, one ``{"is_first": True}`` step (zeros elsewhere) is
    appended, and each overlapping pair ``(current, next)`` gives one trajectory:
    ``step_type`` from ``current`` (FIRST if ``is_first``, else LAST if ``is_last``, else
    MID), ``next_step_type`` from ``next`` likewise, FIRST->FIRST (a one-step episode)
    becoming LAST->LAST; ``observation``, ``action``, ``reward`` from ``current``;
    ``discount`` 0.0 when ``current`` is last and terminal, else ``current["discount"]``;
    ``policy_info = policy_info_fn(current, next)`` (the step dicts, extra keys included) or
    ``()``.

    Args:
      rlds_data: a ``tf.data.Dataset`` of RLDS episodes (dicts with a ``"steps"`` dataset)
        or of RLDS steps.
      policy_info_fn: optional ``fn(current_step, next_step) -> nest``.

    Raises:
      ValueError: eagerly, as :func:`create_trajectory_data_spec`.
      tf.errors.InvalidArgumentError: while iterating, for a malformed episode: TF-Agents'
        messages (a terminal step that is not last, a mid step followed by a first step, a
        last step not followed by a first step) and, beyond TF-Agents, an episode (or the
        data) that does not start with ``is_first``; each names ``(episode E, step S)``
        (episode: its index in ``rlds_data``, or, for a dataset of steps, the count of
        ``is_first`` steps before it; step: its index in the episode). Where an episode of
        a dataset of episodes does not start with ``is_first`` after a last step, TF-Agents
        reports "Last step of an episode must be followed by a first step." on the previous
        episode's last step; here "The episode does not start with is_first" is reported
        on the episode's first step, one trajectory later.

    Dataset elements keep TF-Agents' quirk: a step feature that is itself a dict is not
    split; both steps of the pair get it stacked (a leading dimension of 2). Steps whose
    shapes differ (a spec with ``None`` dimensions) pair here, where TF-Agents' batching
    fails.
    """
    return _indexed_trajectories(rlds_data, policy_info_fn).map(lambda i, j, e, t: t)

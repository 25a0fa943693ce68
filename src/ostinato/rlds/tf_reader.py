"""RLDS ``tf.data`` datasets read as whole columns of steps (TensorFlow is imported here).

tf.data hands Python one element at a time at a cost of tens of microseconds each, so steps
are read in batches: for a dataset of episodes, each episode's ``steps`` dataset is batched
(one element per episode of up to :data:`READ_BATCH` steps), for a dataset of steps the
dataset itself. The batches become :class:`~ostinato.rlds.steps.StepChunk` s for the numpy
conversion. This needs every step feature's shape to be fully known (tf.data cannot batch
steps of different shapes); :func:`can_read_columns` says whether it is.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
import tensorflow as tf

from ostinato.rlds.convert import _is_episodes, _step_spec
from ostinato.rlds.steps import FLAGS, StepChunk
from ostinato.rlds.trajectory import STEP_FEATURES

#: Steps per element read from TensorFlow.
READ_BATCH = 4096


def can_read_columns(rlds_data: Any) -> bool:
    """True when the step features' shapes are fully known and the flags and ``discount``
    are single tensors (what :func:`step_chunks` needs); the eager checks of
    :func:`~ostinato.rlds.create_trajectory_data_spec` raise their ValueErrors here."""
    spec = _step_spec(rlds_data)
    for key in (*FLAGS, "discount"):
        if not isinstance(spec[key], tf.TensorSpec):
            return False
    return all(
        tf.TensorShape(s.shape).is_fully_defined()
        for key in STEP_FEATURES
        for s in tf.nest.flatten(spec[key])
    )


def _select(step: Mapping) -> dict:
    return {key: step[key] for key in STEP_FEATURES}


def step_chunks(rlds_data: Any, read_batch: int = READ_BATCH) -> Iterator[StepChunk]:
    """The steps of ``rlds_data`` (episodes flattened, in order) as numpy columns.

    Episode and step indices are what :func:`~ostinato.rlds.convert_rlds_to_trajectories`
    reports: an episode's index in ``rlds_data`` and the step's index in it; for a dataset of
    steps, the count of ``is_first`` steps before it and the steps since the last one.
    """
    # Extra step keys (which may not batch) are dropped first; without them no per-step map.
    extra = set(_step_spec(rlds_data)) - set(STEP_FEATURES)
    if _is_episodes(rlds_data):

        def episode_batches(i: Any, episode: Any) -> Any:
            steps = episode["steps"].map(_select) if extra else episode["steps"]
            return steps.batch(read_batch).map(lambda b: (i, b))

        data = rlds_data.enumerate().flat_map(episode_batches).prefetch(2)
        current, offset = -1, 0
        for i, columns in data.as_numpy_iterator():
            n = len(columns["is_first"])
            if i != current:
                current, offset = int(i), 0
            yield StepChunk(
                np.full(n, current, np.int64),
                np.arange(offset, offset + n, dtype=np.int64),
                columns,
            )
            offset += n
        return

    episode, index = -1, -1  # TF-Agents' scan over steps: episodes counted by is_first
    steps = rlds_data.map(_select) if extra else rlds_data
    for columns in steps.batch(read_batch).prefetch(2).as_numpy_iterator():
        first = np.asarray(columns["is_first"]).astype(bool)
        n = len(first)
        episodes = episode + np.cumsum(first, dtype=np.int64)
        positions = np.arange(n, dtype=np.int64)
        # Index since the last is_first (inclusive), or continuing the previous chunk's count.
        last_first = np.maximum.accumulate(np.where(first, positions, -1))
        steps = np.where(last_first >= 0, positions - last_first, index + 1 + positions)
        episode, index = int(episodes[-1]), int(steps[-1])
        yield StepChunk(np.maximum(episodes, 0), steps.astype(np.int64), columns)

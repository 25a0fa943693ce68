"""Small RLDS datasets built with tf.data (TF-Agents' test fixtures and a few more)."""

from __future__ import annotations

import pytest

tf = pytest.importorskip("tensorflow")

OBS = [[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]
ACT = [[11.0], [21.0], [31.0]]

COMPLETE = ([True, False, False], [False, False, True], [False, False, True])
TRUNCATED = ([True, False, False], [False, False, True], [False, False, False])
SINGLE = ([True], [True], [False])


def steps(first, last, terminal, obs=None, **extra):
    """A dataset of RLDS steps; ``first``, ``last``, ``terminal`` are the flags per step."""
    n = len(first)
    data = dict(
        observation=(obs or OBS)[:n],
        action=ACT[:n],
        reward=[1.0, 2.0, 3.0][:n],
        discount=[1.0, 1.0, 0.5][:n],
        is_first=first,
        is_last=last,
        is_terminal=terminal,
        **extra,
    )
    return tf.data.Dataset.from_tensor_slices(data)


def episodes(*step_sets, **metadata):
    """A dataset of RLDS episodes, one per steps dataset given."""
    return tf.data.Dataset.from_tensor_slices({"steps": list(step_sets), **metadata})

"""Cutting sampled items into timesteps: the one rule that ``Client.sample`` and the dataset
stream (``emit_timesteps=True``) share.

An item splits into timesteps when every column has the same number of steps (its first
dimension); step ``t`` of the item is row ``t`` of every column. Callers build the error for
columns whose lengths differ, as the messages Reverb raised differ between the two.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

#: Builds the exception raised for an item whose columns have these different lengths.
LengthsError = Callable[[set[int]], Exception]


def num_steps(columns: Sequence[np.ndarray], error: LengthsError) -> int:
    """The number of timesteps of one item given as its columns (1 if it has no column)."""
    lengths = {len(c) for c in columns}
    if len(lengths) > 1:
        raise error(lengths)
    return lengths.pop() if lengths else 1


def split_stacked(
    stacked: Sequence[np.ndarray], n: int, error: LengthsError
) -> tuple[list[np.ndarray], int]:
    """Columns of ``n`` alike items stacked as ``(n, T, ...)`` reshaped into ``(n * T, ...)``,
    one row per timestep (item after item), and ``T`` (1 if there is no column)."""
    lengths = {c.shape[1] for c in stacked}
    if len(lengths) > 1:
        raise error(lengths)
    t = lengths.pop() if lengths else 1
    return [c.reshape(n * t, *c.shape[2:]) for c in stacked], t


__all__ = ["LengthsError", "num_steps", "split_stacked"]

"""What ``Client.sample`` yields: a sampled batch cut into ``ReplaySample`` objects, per item or
per step, shaped like the table's signature when asked (:func:`replay_samples`)."""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
import optree

from ostinato.core.assemble import item_columns, stack_batch
from ostinato.core.items import SampleBatch
from ostinato.core.timesteps import num_steps, split_stacked
from ostinato.replay_sample import ReplaySample, SampleInfo


def replay_samples(batch: SampleBatch, emit_timesteps: bool, structure: Any) -> list[Any]:
    """What ``Client.sample`` yields for one sampled batch, in order: per item a list of
    ``ReplaySample`` (one per step) or one ``ReplaySample``.

    Alike items (the usual case) are stacked once (:func:`~ostinato.core.assemble.stack_batch`)
    and cut into per-item (or per-step) views column by column, with C-level iteration; other
    batches are handled item by item.
    """
    n = len(batch)
    infos = list(
        map(
            _new_info,
            zip(
                batch.keys.tolist(),
                batch.probabilities.tolist(),
                batch.table_sizes.tolist(),
                batch.priorities.tolist(),
                batch.times_sampled.tolist(),
            ),
        )
    )
    stacked: list[np.ndarray] | None = None
    if n and batch.squeeze.count(batch.squeeze[0]) == n:
        try:
            stacked = stack_batch(batch)  # one vectorised gather; items are views of it
        except ValueError:
            stacked = None  # items of different shapes: decode one by one
    if stacked is None:
        out = []
        for info, packed, sq in zip(infos, batch.trajectories, batch.squeeze):
            cols = item_columns(packed, sq)
            out.append(
                _timesteps(info, cols, sq, structure)
                if emit_timesteps
                else ReplaySample(
                    info, cols if structure is None else optree.tree_unflatten(structure, cols)
                )
            )
        return out
    sq = batch.squeeze[0]
    if not emit_timesteps or all(sq):
        data = _per_row(stacked, n, structure)
        samples = list(map(_new_sample, zip(infos, data)))
        return samples if not emit_timesteps else [[s] for s in samples]
    if any(sq):
        raise _mixed_squeeze_error()
    rows, t = split_stacked(stacked, n, _lengths_error)
    steps = _per_row(rows, n * t, structure)
    samples = list(
        map(
            _new_sample,
            zip(infos if t == 1 else [info for info in infos for _ in range(t)], steps),
        )
    )
    return [samples[i * t : (i + 1) * t] for i in range(n)]


_ELLIPSIS_KEYS: dict[int, list[tuple[int, Any]]] = {}
# ``SampleInfo``/``ReplaySample`` from a tuple of their fields, made in C (``tuple.__new__``)
# instead of through the namedtuple's Python-level ``__new__``.
_new_info = functools.partial(tuple.__new__, SampleInfo)
_new_sample = functools.partial(tuple.__new__, ReplaySample)


def _rows(column: np.ndarray, n: int) -> list[np.ndarray]:
    """The ``n`` rows of ``column`` (first axis) as arrays: views, and 0-d arrays for a column
    of scalars (as Reverb returns them), made by C-level iteration."""
    if column.ndim > 1:
        return list(column)
    keys = _ELLIPSIS_KEYS.get(n)
    if keys is None:
        keys = [(i, Ellipsis) for i in range(n)]
        if n <= 4096:
            _ELLIPSIS_KEYS[n] = keys
    return list(map(column.__getitem__, keys))


def _per_row(columns: list[np.ndarray], n: int, structure: Any) -> list[Any]:
    """Row ``i`` of every column, as a list (or shaped like the signature), for each ``i``."""
    data: list[Any] = (
        list(map(list, zip(*[_rows(c, n) for c in columns]))) if columns else [[] for _ in range(n)]
    )
    if structure is not None:
        data = [optree.tree_unflatten(structure, d) for d in data]
    return data


def _mixed_squeeze_error() -> ValueError:
    return ValueError(
        "Can't split non timestep trajectory into timesteps: some columns are "
        "squeezed (single steps) and others are not."
    )


def _lengths_error(lengths: set[int]) -> ValueError:
    return ValueError(
        "Can't split non timestep trajectory into timesteps: columns have "
        f"lengths {sorted(lengths)}."
    )


def _timesteps(
    info: SampleInfo, cols: list[np.ndarray], sq: tuple[bool, ...], structure: Any
) -> list[ReplaySample]:
    """One item's steps (items that could not be stacked with the others)."""
    if all(sq):
        data: Any = cols
        return [
            ReplaySample(
                info, data if structure is None else optree.tree_unflatten(structure, cols)
            )
        ]
    if any(sq):
        raise _mixed_squeeze_error()
    out = []
    for t in range(num_steps(cols, _lengths_error)):
        step = [np.asarray(c[t]) for c in cols]
        out.append(
            ReplaySample(
                info, step if structure is None else optree.tree_unflatten(structure, step)
            )
        )
    return out

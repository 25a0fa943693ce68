"""Pieces: what one sample request returned, decoded into numpy columns, and how the stream
cuts them (into smaller pieces, into timesteps, into batches).

:class:`~ostinato.datasets.stream.SampleStream` fetches, queues and hands out pieces; this
module holds what it does to them.
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np

from ostinato import errors
from ostinato.core.assemble import ALIGNMENT, empty_aligned, gather, item_columns, stack_batch
from ostinato.core.items import SampleBatch
from ostinato.core.timesteps import num_steps, split_stacked
from ostinato.replay_sample import SampleInfo


@dataclasses.dataclass
class Piece:
    """What one request returned, decoded: ``rows`` items (or timesteps).

    Attributes:
      info: :class:`SampleInfo` of arrays, one entry per row.
      columns: one stacked array per column (rows first), or None if the rows have
        different shapes, in which case ``row_data`` holds each row's list of columns.
      num_samples: items this piece took from the table (rows are timesteps when the
        stream emits timesteps).
      item_rows: rows of each item when the rows are timesteps (None: one row per item).
    """

    info: SampleInfo
    columns: list[np.ndarray] | None
    row_data: list[list[np.ndarray]] | None
    num_samples: int
    item_rows: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.info.key)

    def split(self, max_items: int) -> list[Piece]:
        """This piece cut into pieces of at most ``max_items`` items each (views, in order)."""
        n = self.num_samples
        if n <= max_items:
            return [self]
        if self.item_rows is None:
            ends = np.arange(max_items, n, max_items)
        else:
            ends = np.cumsum(self.item_rows)[max_items - 1 : n - 1 : max_items]
        bounds = [0, *(int(e) for e in ends), len(self)]
        counts = [min(max_items, n - i) for i in range(0, n, max_items)]
        parts = []
        for k, (lo, hi) in enumerate(zip(bounds, bounds[1:])):
            rows = (
                None
                if self.item_rows is None
                else self.item_rows[k * max_items : k * max_items + counts[k]]
            )
            parts.append(
                Piece(
                    SampleInfo(*(a[lo:hi] for a in self.info)),
                    None if self.columns is None else [c[lo:hi] for c in self.columns],
                    None if self.row_data is None else self.row_data[lo:hi],
                    counts[k],
                    rows,
                )
            )
        return parts


def writable(a: np.ndarray) -> np.ndarray:
    # Columns decoded straight from a network buffer are read-only (and unaligned); hand out
    # arrays that behave the same whatever the transport.
    if a.flags.writeable and a.ctypes.data % ALIGNMENT == 0:
        return a
    out = empty_aligned(a.shape, a.dtype)
    out[...] = a
    return out


def decode(batch: SampleBatch, emit_timesteps: bool) -> Piece:
    """One sampled batch as a piece: one row per item, or per timestep."""
    n = len(batch)
    info = SampleInfo(
        batch.keys, batch.probabilities, batch.table_sizes, batch.priorities, batch.times_sampled
    )
    if emit_timesteps:
        return timestep_piece(batch, info)
    rows = None
    try:
        cols = stack_batch(batch)  # gathers alike items at once, stacks the others
    except ValueError:  # items of different shapes: keep them one by one
        cols = None
        rows = [item_columns(t, s) for t, s in zip(batch.trajectories, batch.squeeze)]
    if cols is not None:
        cols = [writable(c) for c in cols]
    return Piece(info, cols, rows, n)


def take_rows(
    pending: collections.deque[list[Any]], take: int
) -> tuple[SampleInfo, list[np.ndarray]]:
    """Removes ``take`` rows from the front of ``pending`` (views when one piece has them)."""
    piece, start = pending[0]
    if len(piece) - start >= take:
        end = start + take
        if start == 0 and end == len(piece):
            pending.popleft()
            return piece.info, piece.columns
        pending[0][1] = end
        if end == len(piece):
            pending.popleft()
        return (
            SampleInfo(*(a[start:end] for a in piece.info)),
            [c[start:end] for c in piece.columns],
        )
    infos: list[Sequence[np.ndarray]] = []
    parts: list[list[np.ndarray]] = []
    need = take
    while need:
        piece, start = pending[0]
        k = min(need, len(piece) - start)
        infos.append([a[start : start + k] for a in piece.info])
        parts.append([c[start : start + k] for c in piece.columns])
        need -= k
        if start + k == len(piece):
            pending.popleft()
        else:
            pending[0][1] = start + k
    info = SampleInfo(*(np.concatenate(f) for f in zip(*infos)))
    try:
        cols = [_concatenate(c) for c in zip(*parts)]
    except ValueError as e:
        raise ValueError(f"sampled items cannot be stacked into one batch: {e}") from None
    return info, cols


def _concatenate(parts: Sequence[np.ndarray]) -> np.ndarray:
    first = parts[0]
    if any(p.dtype != first.dtype or p.shape[1:] != first.shape[1:] for p in parts):
        raise ValueError(
            f"rows of shapes {sorted({p.shape[1:] for p in parts})} and dtypes "
            f"{sorted({str(p.dtype) for p in parts})}"
        )
    out = empty_aligned((sum(len(p) for p in parts), *first.shape[1:]), first.dtype)
    return np.concatenate(parts, out=out)


def _decompose_error(lengths: set[int] | None = None) -> errors.InvalidArgumentError:
    return errors.InvalidArgumentError("Sampled trajectory cannot be decomposed into timesteps.")


def timestep_piece(batch: SampleBatch, info: SampleInfo) -> Piece:
    """One row per timestep: every column of an item must have the same number of steps."""
    n = len(batch)
    full = gather(batch, unsqueeze=True)
    if full is not None:
        rows, t = split_stacked(full, n, _decompose_error)
        out = [writable(c) for c in rows]
        return Piece(
            SampleInfo(*(np.repeat(a, t) for a in info)), out, None, n, np.full(n, t, np.int64)
        )
    # Items of different lengths or shapes: decompose each item, then stack the steps.
    per_item = []
    steps = []
    for packed, sq in zip(batch.trajectories, batch.squeeze):
        cols = item_columns(packed, (False,) * len(sq))
        per_item.append(cols)
        steps.append(num_steps(cols, _decompose_error))
    rep = np.asarray(steps, dtype=np.int64)
    new_info = SampleInfo(*(np.repeat(a, rep) for a in info))
    try:
        out = [_concatenate(c) for c in zip(*per_item)]
        return Piece(new_info, out, None, n, rep)
    except ValueError:
        rows = [[c[i] for c in cols] for cols, k in zip(per_item, steps) for i in range(k)]  # type: ignore[misc]
        return Piece(new_info, None, rows, n, rep)  # type: ignore[arg-type]

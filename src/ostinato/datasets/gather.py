"""Stacking sampled items into preallocated column arrays in one pass.

:func:`ostinato.decode.stack_batch` handles any batch, but when a single item's column spans
two chunks (common for windows over a stream: ``history[-10:]``) it falls back to building
every item separately and stacking them. Datasets stack every batch, so this module fills one
preallocated array per column directly from the chunks, whether an item's column is one slice
or several, with one copy of each row.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ostinato.core.chunk_store import Chunk
from ostinato.core.items import SampleBatch, columns

#: Batches start on a 64-byte boundary: frameworks can then use them without a copy (JAX on
#: CPU aliases aligned host buffers instead of copying them) and vector loads are aligned.
ALIGNMENT = 64


def empty_aligned(shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    """``np.empty(shape, dtype)`` whose data starts on an :data:`ALIGNMENT`-byte boundary."""
    dtype = np.dtype(dtype)
    if dtype.hasobject:
        return np.empty(shape, dtype=dtype)
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    buf = np.empty(nbytes + ALIGNMENT, dtype=np.uint8)
    start = -buf.ctypes.data % ALIGNMENT
    return buf[start:start + nbytes].view(dtype).reshape(shape)


def _data(chunk: Chunk) -> np.ndarray:
    data = chunk.data
    if not isinstance(data, np.ndarray):
        # Rows a server received over the network, sampled in its own process: decode once
        # and keep the result, as ostinato.decode does.
        data = chunk.data = data.decode()
    return data


def _spec(chunk: Chunk) -> tuple[Any, ...]:
    spec = chunk.spec
    if spec is None:
        data = _data(chunk)
        spec = (data.dtype, data.shape[1:])
    return spec


def gather(batch: SampleBatch, unsqueeze: bool = False) -> list[np.ndarray] | None:
    """Stacks the items of ``batch``: one array per column, batch dimension first.

    Args:
      batch: a sampled batch.
      unsqueeze: keep the time dimension of squeezed columns (for splitting into timesteps).

    Returns:
      The columns, or None when the items are not alike (different numbers of columns,
      lengths, dtypes, row shapes or squeeze flags); callers then
      fall back to :func:`ostinato.decode.stack_batch` or item-by-item decoding.
    """
    if batch.columns is not None:
        if not unsqueeze:
            return batch.columns
        return [c[:, None] if s else c for c, s in zip(batch.columns, batch.squeeze[0])]
    trajs = batch.trajectories
    n = len(trajs)
    if n == 0:
        return None
    sq = batch.squeeze[0]
    if batch.squeeze.count(sq) != n:
        return None
    template = columns(trajs[0])
    ncols = len(template)
    flat_len = 3 * ncols
    outs = []
    for c, (col, s) in enumerate(zip(template, sq)):
        dtype, row = _spec(col[0][0])
        length = sum(x[2] for x in col)
        if s and length != 1:
            return None
        rows = _column_rows(trajs, c, flat_len, ncols, length)
        if rows is None:
            return None
        out = empty_aligned((n, *row) if s and not unsqueeze else (n, length, *row), dtype)
        try:
            # One C-level copy of every row; casting="no" rejects rows of another dtype.
            np.concatenate(rows, out=out.reshape(n * length, *row), casting="no")
        except (ValueError, TypeError):  # rows of another shape or dtype
            return None
        outs.append(out)
    return outs


def _column_rows(trajs: list[Any], c: int, flat_len: int, ncols: int,
                 length: int) -> list[np.ndarray] | None:
    """Views of the rows of column ``c`` of every item, in order; None if an item's column
    does not have ``length`` rows (or the items have different numbers of columns)."""
    j = 3 * c
    rows: list[np.ndarray] = []
    add = rows.append
    for packed in trajs:
        if type(packed[0]) is Chunk:  # each column is one slice
            if len(packed) != flat_len or packed[j + 2] != length:
                return None
            chunk = packed[j]
            data = chunk.data
            if type(data) is not np.ndarray:
                data = _data(chunk)
            off = packed[j + 1]
            add(data[off:off + length])
            continue
        if len(packed) != ncols:  # a column spans chunks: several slices
            return None
        total = 0
        for chunk, off, ln in packed[c]:
            add(_data(chunk)[off:off + ln])
            total += ln
        if total != length:
            return None
    return rows

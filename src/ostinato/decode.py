"""Turning sampled items into numpy data: one item at a time, or stacked batches."""

from __future__ import annotations

import numpy as np

from ostinato.core.chunk_store import Chunk
from ostinato.core.items import Packed, SampleBatch


def _rows(chunk: Chunk, offset: int, length: int) -> np.ndarray:
    data = chunk.data
    if not isinstance(data, np.ndarray):  # encoded payloads are decoded by their transport
        data = chunk.data = data.decode()
    return data[offset:offset + length]


def item_columns(packed: Packed, squeeze: tuple[bool, ...], copy: bool = True) -> list[np.ndarray]:
    """The columns of one item as arrays (new arrays unless ``copy=False``)."""
    out = []
    if type(packed[0]) is Chunk:
        for i in range(0, len(packed), 3):
            a = _rows(packed[i], packed[i + 1], packed[i + 2])
            if squeeze[i // 3]:
                a = a[0]
            out.append(np.array(a) if copy else a)
        return out
    for ci, col in enumerate(packed):
        if len(col) == 1:
            c, o, n = col[0]
            a = _rows(c, o, n)
            a = np.array(a) if copy else a
        else:
            a = np.concatenate([_rows(c, o, n) for c, o, n in col])
        if squeeze[ci]:
            if len(a) != 1:
                raise ValueError(f"Tried to squeeze column with batch size {len(a)}")
            a = a[0]
        out.append(a)
    return out


def stack_batch(batch: SampleBatch) -> list[np.ndarray]:
    """Stacks the columns of all sampled items: one array per column with a leading batch dim.

    Raises:
      ValueError: items have different numbers of columns or different column shapes
        (sample them one at a time with ``Client.sample`` instead).
    """
    trajs = batch.trajectories
    if not trajs:
        return []
    first = trajs[0]
    sq0 = batch.squeeze[0]
    if type(first[0]) is Chunk and all(s is sq0 for s in batch.squeeze) \
            and all(type(t[0]) is Chunk and len(t) == len(first) for t in trajs):
        return [_stack_flat_column(trajs, i, sq0[i // 3]) for i in range(0, len(first), 3)]
    per_item = [item_columns(t, s, copy=False) for t, s in zip(trajs, batch.squeeze)]
    ncols = {len(c) for c in per_item}
    if len(ncols) != 1:
        raise ValueError(f"cannot stack items with different numbers of columns: {sorted(ncols)}")
    out = []
    for ci in range(len(per_item[0])):
        try:
            out.append(np.stack([c[ci] for c in per_item]))
        except ValueError as e:
            raise ValueError(f"cannot stack column {ci} of the sampled items: {e}") from None
    return out




def _stack_flat_column(trajs: list[Packed], i: int, squeeze: bool) -> np.ndarray:
    """Gathers column ``i // 3`` of items whose columns are single slices into one array."""
    b = len(trajs)
    datas = [t[i].data for t in trajs]
    offsets = [t[i + 1] for t in trajs]
    lengths = {t[i + 2] for t in trajs}
    if len(lengths) != 1:
        raise ValueError(f"cannot stack column {i // 3}: sampled items have lengths {sorted(lengths)}")
    n = lengths.pop()
    distinct = {id(d): d for d in datas}
    if any(not isinstance(d, np.ndarray) for d in distinct.values()):
        for t in trajs:
            if not isinstance(t[i].data, np.ndarray):
                t[i].data = t[i].data.decode()
        datas = [t[i].data for t in trajs]
        distinct = {id(d): d for d in datas}
    first = next(iter(distinct.values()))
    dtype, row_shape = first.dtype, first.shape[1:]
    for d in distinct.values():
        if d.dtype != dtype or d.shape[1:] != row_shape:
            raise ValueError(
                f"cannot stack column {i // 3} of the sampled items: rows of shape "
                f"{row_shape} {dtype} and {d.shape[1:]} {d.dtype}")
    if squeeze:
        if n != 1:
            raise ValueError(f"Tried to squeeze column with batch size {n}")
        if not row_shape:
            return np.fromiter([d[o] for d, o in zip(datas, offsets)], dtype, b)
        out = np.empty((b, *row_shape), dtype)
        for j, (d, o) in enumerate(zip(datas, offsets)):
            out[j] = d[o]
        return out
    out = np.empty((b, n, *row_shape), dtype)
    for j, (d, o) in enumerate(zip(datas, offsets)):
        out[j] = d[o:o + n]
    return out

"""Turning sampled items into numpy data: one item at a time, or stacked batches."""

from __future__ import annotations

import operator
from typing import Any

import numpy as np

from ostinato.core.chunk_store import Chunk
from ostinato.core.items import Packed, SampleBatch


def _array(chunk: Chunk) -> np.ndarray:
    """The chunk's rows as an array. Chunks that arrived over the network hold segments; they
    are decoded into a cached array (never replacing ``chunk.data``, which a writer stream may
    still extend)."""
    data = chunk.data
    if isinstance(data, np.ndarray):
        return data
    return data.as_array()


def _rows(chunk: Chunk, offset: int, length: int) -> np.ndarray:
    return _array(chunk)[offset:offset + length]


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
    if batch.columns is not None:
        return batch.columns
    trajs = batch.trajectories
    if not trajs:
        return []
    first = trajs[0]
    sq0 = batch.squeeze[0]
    if batch.squeeze.count(sq0) == len(trajs) and len(set(map(len, trajs))) == 1 \
            and set(map(type, map(_first, trajs))) == {Chunk}:
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




_get_spec = operator.attrgetter("spec")
_first = operator.itemgetter(0)
_get_data = operator.attrgetter("data")


def _spec_of(chunk: Chunk) -> tuple[Any, ...]:
    if chunk.spec is None:
        arr = _array(chunk)
        chunk.spec = (arr.dtype, arr.shape[1:])
    return chunk.spec


def _stack_flat_column(trajs: list[Packed], i: int, squeeze: bool) -> np.ndarray:
    """Gathers column ``i // 3`` of items whose columns are single slices into one array."""
    b = len(trajs)
    chunks = list(map(operator.itemgetter(i), trajs))
    offsets = list(map(operator.itemgetter(i + 1), trajs))
    lengths = set(map(operator.itemgetter(i + 2), trajs))
    if len(lengths) != 1:
        raise ValueError(f"cannot stack column {i // 3}: sampled items have lengths {sorted(lengths)}")
    n = lengths.pop()
    spec = _spec_of(chunks[0])
    if len(set(map(id, map(_get_spec, chunks)))) != 1:
        # Chunks from several writers (or of unknown spec): compare by value.
        for c in {id(c): c for c in chunks}.values():
            other = _spec_of(c)
            if other != spec:
                raise ValueError(
                    f"cannot stack column {i // 3} of the sampled items: rows of shape "
                    f"{spec[1]} {spec[0]} and {other[1]} {other[0]}")
        for c in chunks:
            _spec_of(c)
    dtype, row_shape = spec
    datas = list(map(_get_data, chunks))
    if set(map(type, datas)) != {np.ndarray}:
        datas = [_array(c) for c in chunks]
    if squeeze:
        if n != 1:
            raise ValueError(f"Tried to squeeze column with batch size {n}")
        if not row_shape:
            return np.fromiter(map(operator.getitem, datas, offsets), dtype, b)
        rows = list(map(operator.getitem, datas, offsets))
    else:
        rows = [d[o:o + n] for d, o in zip(datas, offsets)]
    # All rows share dtype and shape (checked above), so np.array stacks them in one copy.
    return np.array(rows, dtype=dtype)

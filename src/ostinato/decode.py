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
    if type(first[0]) is Chunk and all(type(t[0]) is Chunk and len(t) == len(first) for t in trajs) \
            and all(s is sq0 for s in batch.squeeze):
        cols = []
        for i in range(0, len(first), 3):
            lengths = {t[i + 2] for t in trajs}
            if len(lengths) != 1:
                raise ValueError(
                    f"cannot stack column {i // 3}: sampled items have lengths {sorted(lengths)}")
            n = lengths.pop()
            if sq0[i // 3]:
                rows = [t[i].data[t[i + 1]] for t in trajs]
            else:
                rows = [t[i].data[t[i + 1]:t[i + 1] + n] for t in trajs]
            try:
                cols.append(np.stack(rows))
            except ValueError as e:
                raise ValueError(f"cannot stack column {i // 3} of the sampled items: {e}") from None
        return cols
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



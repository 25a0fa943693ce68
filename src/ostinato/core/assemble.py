"""Batch assembly: the one place where sampled items become numpy arrays.

Every reader -- ``Client.sample``, ``Client.sample_batch``, the datasets' ``SampleStream`` (and
so the numpy, tf.data, PyTorch and JAX adapters) and ``TFClient`` -- turns sampled items into arrays
here, whoever wrote them. A chunk's rows come from :func:`~ostinato.core.chunks.chunk_array`,
the one row access (chunks hold a numpy array or a row source; see :mod:`ostinato.core.chunks`).

:func:`gather` stacks alike items (same columns, lengths, dtypes, row shapes and squeeze flags)
into one preallocated, aligned array per column with one copy of each row, whether an item's
column is one slice of a chunk or spans several; :func:`stack_batch` falls back to stacking
items one by one for anything else and raises ``ValueError`` when they cannot be stacked.
"""

from __future__ import annotations

import itertools
import operator
from typing import Any

import numpy as np

from ostinato.core.chunks import Chunk, chunk_array, chunk_spec
from ostinato.core.items import Packed, SampleBatch, columns, is_flat
from ostinato.core.locations import Located, registered_block

#: Batches start on a 64-byte boundary: frameworks can then use them without a copy (JAX on
#: CPU aliases aligned host buffers instead of copying them) and vector loads are aligned.
ALIGNMENT = 64

_first = operator.itemgetter(0)


def empty_aligned(shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    """``np.empty(shape, dtype)`` whose data starts on an :data:`ALIGNMENT`-byte boundary."""
    dtype = np.dtype(dtype)
    if dtype.hasobject:
        return np.empty(shape, dtype=dtype)
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    buf = np.empty(nbytes + ALIGNMENT, dtype=np.uint8)
    start = -buf.ctypes.data % ALIGNMENT
    return buf[start : start + nbytes].view(dtype).reshape(shape)


def item_columns(packed: Packed, squeeze: tuple[bool, ...], copy: bool = True) -> list[np.ndarray]:
    """The columns of one item as arrays (new arrays unless ``copy=False``)."""
    out = []
    for ci, col in enumerate(columns(packed)):
        if len(col) == 1:
            c, o, n = col[0]
            a = chunk_array(c)[o : o + n]
            a = np.array(a) if copy else a
        else:
            a = np.concatenate([chunk_array(c)[o : o + n] for c, o, n in col])
        if squeeze[ci]:
            if len(a) != 1:
                raise ValueError(f"Tried to squeeze column with batch size {len(a)}")
            a = a[0]
        out.append(a)
    return out


def gather(batch: SampleBatch, unsqueeze: bool = False) -> list[np.ndarray] | None:
    """Stacks alike items of ``batch``: one aligned array per column, batch dimension first.

    Args:
      batch: a sampled batch.
      unsqueeze: keep the time dimension of squeezed columns (for splitting into timesteps).

    Returns:
      The columns, or None when the items are not alike (different numbers of columns,
      lengths, dtypes, row shapes or squeeze flags) or the batch is empty; callers then use
      :func:`stack_batch` or :func:`item_columns`.
    """
    if batch.columns is not None:  # already stacked by the transport
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
    if batch.located is not None:
        located = _gather_located(batch.located, sq, n, unsqueeze)
        if located is not None:
            return located
    template = columns(trajs[0])
    ncols = len(template)
    flat_len = 3 * ncols
    # Every item's columns single slices (the usual case): rows are read column by column
    # with map() instead of a Python loop over items.
    all_flat = set(map(type, map(_first, trajs))) == {Chunk} and set(map(len, trajs)) == {flat_len}
    outs = []
    for c, (col, s) in enumerate(zip(template, sq)):
        dtype, row = chunk_spec(col[0][0])
        length = sum(x[2] for x in col)
        if s and length != 1:
            return None
        if s and not unsqueeze and not row and dtype.kind != "O":
            scalars = _squeezed_scalars(trajs, c, all_flat, dtype)
            if scalars is not _NOT_ALIKE:
                outs.append(scalars)
                continue
        shape = (n, *row) if s and not unsqueeze else (n, length, *row)
        rows = (
            _flat_column_rows(trajs, c, length)
            if all_flat
            else _column_rows(trajs, c, flat_len, ncols, length)
        )
        if rows is None:
            return None
        out = empty_aligned(shape, dtype)
        try:
            # One C-level copy of every row; casting="no" rejects rows of another dtype.
            np.concatenate(rows, out=out.reshape(n * length, *row), casting="no")
        except (ValueError, TypeError):  # rows of another shape or dtype
            return None
        outs.append(out)
    return outs


_NOT_ALIKE: Any = object()


def _gather_located(
    located: Located, sq: tuple[bool, ...], n: int, unsqueeze: bool
) -> list[np.ndarray] | None:
    """The columns of items the table located (:mod:`ostinato.core.locations`): each column's
    rows copied out of its writer block(s) with one ``take`` per block. None if the items'
    columns differ in length or in the dtype or row shape of their blocks."""
    rows = located.rows
    outs = []
    for c in range((rows.shape[1] - 1) // 3):
        codes = rows[:, 1 + 3 * c]
        starts = rows[:, 2 + 3 * c]
        lens = rows[:, 3 + 3 * c]
        length = int(lens[0])
        squeezed = sq[c]
        if (squeezed and length != 1) or (lens != length).any():
            return None
        lo, hi = int(codes.min()), int(codes.max())
        keys = [lo] if lo == hi else set(codes.tolist())
        if length != 1 and 16 * len(keys) > n:
            # Items of several rows spread over many blocks: copying each item's slice (the
            # chunk path) is cheaper than a take per block (W8: ~25 blocks per batch of 256).
            return None
        blocks = {k: registered_block(k) for k in keys}
        first = blocks[lo]
        if first is None or any(
            b is None or b.dtype != first.dtype or b.shape[1:] != first.shape[1:]
            for b in blocks.values()
        ):
            return None
        row = first.shape[1:]
        out = empty_aligned(
            (n, *row) if squeezed and not unsqueeze else (n, length, *row), first.dtype
        )
        flat = out.reshape(n * length, *row)
        idx = starts.astype(np.intp)
        if length != 1:
            idx = (idx[:, None] + np.arange(length)).reshape(-1)
        if lo == hi:
            np.take(first, idx, axis=0, out=flat, mode="clip")
        else:  # one take per block, of the items grouped by block (a stable sort of n codes)
            order = np.argsort(codes, kind="stable")
            bounds = np.flatnonzero(np.diff(codes[order])) + 1
            per_item = flat.reshape(n, length * int(np.prod(row, dtype=np.int64)))
            for group in np.split(order, bounds):
                block = blocks[int(codes[group[0]])]
                rows_idx = idx.reshape(n, length)[group].reshape(-1)
                per_item[group] = block.take(  # type: ignore[union-attr]  # checked above
                    rows_idx, axis=0
                ).reshape(len(group), -1)
        outs.append(out)
    return outs


def _squeezed_scalars(trajs: list[Packed], c: int, all_flat: bool, dtype: np.dtype) -> Any:
    """Column ``c`` of items whose columns are single one-row slices of scalars, read with one
    ``fromiter`` (no per-item view); ``_NOT_ALIKE`` if the items are not all like that."""
    if not all_flat:
        return _NOT_ALIKE
    j = 3 * c
    chunks = list(map(operator.itemgetter(j), trajs))
    if not _same_spec(chunks):
        return _NOT_ALIKE
    out = empty_aligned((len(trajs),), dtype)
    out[:] = np.fromiter(
        map(operator.getitem, _arrays(chunks), map(operator.itemgetter(j + 1), trajs)),
        dtype,
        len(trajs),
    )
    return out


_spec_of = operator.attrgetter("spec")
_data_of = operator.attrgetter("data")


def _same_spec(chunks: list[Chunk]) -> bool:
    """Whether every chunk holds rows of one dtype and row shape (checked by identity first:
    a writer column's chunks share one spec object)."""
    specs = set(map(id, map(_spec_of, chunks)))
    if len(specs) == 1 and chunks[0].spec is not None:
        return True
    # Chunks of several writers (or of unknown spec): check every distinct one by value.
    want = chunk_spec(chunks[0])
    return all(chunk_spec(ch) == want for ch in {id(ch): ch for ch in chunks}.values())


def _arrays(chunks: list[Chunk]) -> list[np.ndarray]:
    """The chunks' rows as arrays (``chunk.data`` itself where it is one)."""
    datas = list(map(_data_of, chunks))
    if set(map(type, datas)) != {np.ndarray}:
        datas = list(map(chunk_array, chunks))
    return datas


def _flat_column_rows(trajs: list[Packed], c: int, length: int) -> list[np.ndarray] | None:
    """:func:`_column_rows` for items whose columns are all single slices (with C-level maps:
    no Python loop over the items)."""
    j = 3 * c
    if set(map(operator.itemgetter(j + 2), trajs)) != {length}:
        return None
    offsets = list(map(operator.itemgetter(j + 1), trajs))
    ends = map(operator.add, offsets, itertools.repeat(length))
    getitem: Any = operator.getitem
    return list(
        map(getitem, _arrays(list(map(operator.itemgetter(j), trajs))), map(slice, offsets, ends))
    )


def _column_rows(
    trajs: list[Any], c: int, flat_len: int, ncols: int, length: int
) -> list[np.ndarray] | None:
    """Views of the rows of column ``c`` of every item, in order; None if an item's column
    does not have ``length`` rows (or the items have different numbers of columns)."""
    j = 3 * c
    rows: list[np.ndarray] = []
    add = rows.append
    for packed in trajs:
        if is_flat(packed):  # each column is one slice
            if len(packed) != flat_len or packed[j + 2] != length:
                return None
            data = packed[j].data
            if type(data) is not np.ndarray:
                data = chunk_array(packed[j])
            off = packed[j + 1]
            add(data[off : off + length])
            continue
        if len(packed) != ncols:  # a column spans chunks: several slices
            return None
        total = 0
        for chunk, off, ln in packed[c]:
            add(chunk_array(chunk)[off : off + ln])
            total += ln
        if total != length:
            return None
    return rows


def stack_batch(batch: SampleBatch) -> list[np.ndarray]:
    """Stacks the columns of all sampled items: one array per column with a leading batch dim.

    Raises:
      ValueError: items have different numbers of columns or different column shapes
        (sample them one at a time with ``Client.sample`` instead).
    """
    cols = gather(batch)
    if cols is not None:
        return cols
    if not batch.trajectories:
        return []
    per_item = [item_columns(t, s, copy=False) for t, s in zip(batch.trajectories, batch.squeeze)]
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

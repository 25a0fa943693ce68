"""Turns table snapshots into flat arrays and chunk records, and back.

An item's trajectory becomes ``ncols`` columns; each column ``nslices`` slices; each slice a
(chunk index, offset, length) triple. Chunk indices point into one chunk list shared by all
tables of the checkpoint, so a chunk referenced from several tables is stored once.
"""

from __future__ import annotations

import itertools
import json
import operator
from collections.abc import Callable
from typing import Any

import numpy as np

from ostinato.checkpointing.format import CheckpointCorruptError, CheckpointError
from ostinato.core import items as items_lib
from ostinato.core.chunks import Chunk, chunk_rows
from ostinato.core.signature import signature_from_data, signature_to_data
from ostinato.errors import DecodeError


def selector_config(options: Any) -> dict[str, Any]:
    which = options.WhichOneof("distribution")
    if which == "prioritized":
        return {"kind": which, "priority_exponent": float(options.prioritized.priority_exponent)}
    if which == "heap":
        return {"kind": which, "min_heap": bool(options.heap.min_heap)}
    return {"kind": which}


def table_config(table: Any) -> dict[str, Any]:
    """The settings a restoring server's table must share with the checkpointed one."""
    lim = table.rate_limiter
    return {
        "sampler": selector_config(table.sampler.options()),
        "remover": selector_config(table.remover.options()),
        "max_size": table.max_size,
        "max_times_sampled": table.max_times_sampled,
        "rate_limiter": {
            "samples_per_insert": lim.samples_per_insert,
            "min_size_to_sample": lim.min_size_to_sample,
            "min_diff": lim.min_diff,
            "max_diff": lim.max_diff,
        },
    }


def signature_to_json(table: Any) -> Any:
    """The table's signature (a nest of TensorSpec, or None) as JSON-friendly data."""
    try:
        data = signature_to_data(table.signature)
        # Refuse at save time what a restore could not read back (say, a tuple as a dict key).
        ok = signature_from_data(json.loads(json.dumps(data))) == table.signature
    except (ValueError, TypeError) as e:  # DecodeError is a ValueError
        raise CheckpointError(
            f"the signature of table {table.name!r} cannot be checkpointed: {e}"
        ) from None
    if not ok:
        raise CheckpointError(
            f"the signature of table {table.name!r} does not survive "
            f"encoding as JSON: {table.signature!r}"
        )
    return data


def signature_from_json(data: Any, where: str) -> Any:
    """The signature nest recorded by :func:`signature_to_json` (None if there was none)."""
    try:
        return signature_from_data(data)
    except DecodeError as e:
        raise CheckpointCorruptError(f"{where}: {e}") from None


class ChunkCollector:
    """Deduplicates the chunks referenced by snapshots and records how many rows each needs."""

    def __init__(self, tick: Callable[[], None] | None = None) -> None:
        self.tick = tick or (lambda: None)  # called between units of work (store.Pacer)
        self.index: dict[int, int] = {}  # id(chunk) -> position (snapshots keep chunks alive)
        self.chunks: list[Chunk] = []
        self.ends: list[int] = []

    def encode_items(self, snap: dict[str, Any]) -> dict[str, np.ndarray]:
        """Flat arrays for a table snapshot's items (vectorised; items whose columns span
        several chunks, usually a few percent, are flattened one by one)."""
        trajs = snap["trajectories"]
        tick = self.tick
        n = len(trajs)
        lens = np.fromiter(map(len, trajs), dtype=np.int64, count=n)
        flat_item = np.fromiter(
            map(
                operator.is_, map(type, map(operator.itemgetter(0), trajs)), itertools.repeat(Chunk)
            ),
            dtype=bool,
            count=n,
        )
        ncols = np.where(flat_item, lens // 3, lens)
        col_start = np.cumsum(ncols) - ncols
        nslices = np.ones(int(ncols.sum()), dtype=np.int64)
        src = trajs
        nested = np.flatnonzero(~flat_item).tolist()
        if nested:
            src = list(trajs)
            for i in nested:
                packed = trajs[i]
                src[i] = tuple(itertools.chain.from_iterable(itertools.chain.from_iterable(packed)))
                c0 = int(col_start[i])
                nslices[c0 : c0 + len(packed)] = [len(col) for col in packed]
        tick()
        flat = list(itertools.chain.from_iterable(src))
        tick()
        refs = flat[0::3]
        off = np.asarray(flat[1::3], dtype=np.int64)
        ln = np.asarray(flat[2::3], dtype=np.int64)
        del flat
        tick()
        s_chunk = self._chunk_positions(refs, off + ln)
        flags = np.fromiter(
            itertools.chain.from_iterable(snap["squeeze"]), dtype=np.uint8, count=len(nslices)
        )
        tick()
        return {
            "keys": np.asarray(snap["keys"], dtype="<u8"),
            "priorities": np.asarray(snap["priorities"], dtype="<f8"),
            "times_sampled": np.asarray(snap["times_sampled"], dtype="<i4"),
            "heap_order": np.asarray(
                snap["heap_order"] if snap["heap_order"] is not None else np.zeros(0), dtype="<i8"
            ),
            "ncols": ncols.astype("<u4"),
            "nslices": nslices.astype("<u4"),
            "slice_chunk": s_chunk.astype("<u4"),
            "slice_offset": off.astype("<u4"),
            "slice_length": ln.astype("<u4"),
            "squeeze": flags,
        }

    def _chunk_positions(self, refs: list[Chunk], ends_needed: np.ndarray) -> np.ndarray:
        """Positions in ``self.chunks`` of each referenced chunk (added on first sight); also
        raises each chunk's row count to the furthest row an item uses."""
        tick = self.tick
        ids = np.fromiter(map(id, refs), dtype=np.uint64, count=len(refs))
        tick()
        uniq, first, inv = np.unique(ids, return_index=True, return_inverse=True)
        tick()
        far = np.zeros(len(uniq), dtype=np.int64)
        np.maximum.at(far, inv, ends_needed)
        pos = np.empty(len(uniq), dtype=np.int64)
        index, chunks, ends = self.index, self.chunks, self.ends
        for k, (cid, f, e) in enumerate(zip(uniq.tolist(), first.tolist(), far.tolist())):
            i = index.get(cid)
            if i is None:
                i = index[cid] = len(chunks)
                chunks.append(refs[f])
                ends.append(0)
            if e > ends[i]:
                ends[i] = e
            pos[k] = i
        return pos[inv.reshape(-1)]


#: How a chunk of strings (an object array of bytes) is stored: as fixed-width ``S`` rows in
#: which every value carries one extra byte, ``\x01``, at its end, so that values ending in NUL
#: bytes survive (numpy's ``S`` type drops trailing NULs); the byte is removed on restore.
#: Checkpoints written before this have ``"object": true`` and no extra byte.
STRINGS_SUFFIXED = "suffixed"


def rows_to_store(chunk: Chunk, end: int) -> tuple[np.ndarray, bool | str]:
    """Rows ``[0, end)`` of a chunk as a contiguous little-endian array, and how to restore
    them: ``False`` (as they are) or :data:`STRINGS_SUFFIXED` (an object array of bytes)."""
    rows = chunk_rows(chunk, 0, end)
    is_object: bool | str = False
    if rows.dtype.hasobject:
        flat = rows.reshape(-1).tolist()
        if not all(isinstance(v, (bytes, str)) for v in flat):
            raise CheckpointError(
                f"chunk {chunk.key} holds Python objects other than strings "
                "or bytes; such data cannot be checkpointed"
            )
        flat = [(v.encode() if isinstance(v, str) else v) + b"\x01" for v in flat]
        rows = (
            np.array(flat, dtype=bytes).reshape(rows.shape)
            if flat
            else np.zeros(rows.shape, dtype="S1")
        )
        is_object = STRINGS_SUFFIXED
    rows = np.ascontiguousarray(rows)
    if rows.dtype.byteorder == ">":
        rows = rows.astype(rows.dtype.newbyteorder("<"))
    return rows, is_object


def restore_strings(data: np.ndarray, how: bool | str) -> np.ndarray:
    """The object array of bytes that :func:`rows_to_store` stored as ``S`` rows."""
    if how is True:  # written before STRINGS_SUFFIXED
        return data.astype(object)
    out = np.empty(data.size, dtype=object)
    out[:] = [v[:-1] for v in data.reshape(-1).tolist()]
    return out.reshape(data.shape)


#: Items decoded per vectorised batch (bounds the temporary arrays; a tick between batches).
DECODE_BATCH = 1 << 16


def decode_items(
    arrs: dict[str, np.ndarray],
    chunks: list[Chunk],
    where: str,
    tick: Callable[[int], None] | None = None,
) -> tuple[list[Any], list[tuple[bool, ...]]]:
    """Packed trajectories and squeeze flags from a table's item arrays.

    Vectorised: items whose columns are one slice each (nearly all) are packed, a batch of
    items with the same number of columns at a time, by C-level zips over the slice arrays;
    the others one by one. ``tick(items_done)`` is called after each batch of items.
    """
    ncols = arrs["ncols"].astype(np.int64)
    nslices = arrs["nslices"].astype(np.int64)
    sc = arrs["slice_chunk"].astype(np.int64)
    so, sl, sq = arrs["slice_offset"], arrs["slice_length"], arrs["squeeze"]
    n = len(ncols)
    if (
        int(ncols.sum()) != len(nslices)
        or int(nslices.sum()) != len(sc)
        or len(sq) != len(nslices)
        or len(so) != len(sc)
        or len(sl) != len(sc)
        or (len(sc) and int(sc.max()) >= len(chunks))
        or (n and int(ncols.min()) < 1)
    ):
        raise CheckpointCorruptError(f"{where}: item arrays are inconsistent")
    col_start = np.cumsum(ncols) - ncols  # first column of each item
    slice_start = np.cumsum(nslices) - nslices  # first slice of each column
    nonflat = np.zeros(n, dtype=bool)  # items with a column of other than one slice
    nonflat[np.repeat(np.arange(n), ncols)[nslices != 1]] = True
    get_chunk = chunks.__getitem__
    trajs: list[tuple[np.ndarray, list[Any]]] = []  # (item positions, their packed forms)
    squeezes: list[tuple[np.ndarray, list[Any]]] = []
    for a in range(0, n, DECODE_BATCH):
        b = min(n, a + DECODE_BATCH)
        # Column counts present (np.unique would import numpy.ma: 20+ ms in a fresh process).
        for k in np.flatnonzero(np.bincount(ncols[a:b])).tolist():
            idx = np.flatnonzero(ncols[a:b] == k) + a  # items with k columns
            cols = col_start[idx][:, None] + np.arange(k)  # their columns, (m, k)
            squeezes.append((idx, _squeeze_tuples(sq[cols] != 0)))
            flat = ~nonflat[idx]
            fi, fc = (idx, cols) if flat.all() else (idx[flat], cols[flat])
            s = slice_start[fc]  # (items, columns): one slice per column
            fields: list[Any] = []  # chunk, offset, length of column 0, of column 1, ...
            for j in range(k):
                fields += (
                    map(get_chunk, sc[s[:, j]].tolist()),
                    so[s[:, j]].tolist(),
                    sl[s[:, j]].tolist(),
                )
            trajs.append((fi, list(zip(*fields))))  # the tuples are built in C
        nf = np.flatnonzero(nonflat[a:b]) + a
        if len(nf):  # the packed form is a tuple of columns, each a tuple of slices
            cs = _ranges(col_start[nf], ncols[nf])
            s = _ranges(slice_start[cs], nslices[cs])
            slices = list(zip(map(get_chunk, sc[s].tolist()), so[s].tolist(), sl[s].tolist()))
            ends = np.cumsum(nslices[cs]).tolist()
            columns = [tuple(slices[lo:hi]) for lo, hi in zip([0, *ends[:-1]], ends)]
            ends = np.cumsum(ncols[nf]).tolist()
            trajs.append((nf, [tuple(columns[lo:hi]) for lo, hi in zip([0, *ends[:-1]], ends)]))
        if tick is not None:
            tick(b)
    return _gather(trajs, n), _gather(squeezes, n)


def _ranges(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """The concatenated ranges ``starts[i] .. starts[i] + lengths[i] - 1``."""
    before = np.cumsum(lengths) - lengths
    return np.repeat(starts - before, lengths) + np.arange(int(lengths.sum()))


def _gather(pieces: list[tuple[np.ndarray, list[Any]]], n: int) -> list[Any]:
    """One list of n values from pieces of (positions, values) that cover 0..n-1 once."""
    if len(pieces) == 1:  # the usual case: one piece, positions 0..n-1 in order
        return pieces[0][1]
    out = np.empty(n, dtype=object)
    for idx, values in pieces:  # object arrays move the references; tuples stay whole
        out[idx] = np.fromiter(values, dtype=object, count=len(values))
    return out.tolist()


def _squeeze_tuples(flags: np.ndarray) -> list[tuple[bool, ...]]:
    """One interned flag tuple per row of the (items, columns) bool array."""
    m = len(flags)
    if not m:
        return []
    if (flags == flags[0]).all():  # the usual case: every item alike
        return [items_lib.intern_squeeze(flags[0].tolist())] * m
    rows, inverse = np.unique(np.packbits(flags, axis=1), axis=0, return_inverse=True)
    k = flags.shape[1]
    uniq = [items_lib.intern_squeeze(np.unpackbits(r, count=k).astype(bool).tolist()) for r in rows]
    return list(map(uniq.__getitem__, inverse.reshape(-1).tolist()))

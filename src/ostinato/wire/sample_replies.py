"""The Sample call's reply: built on the server from a sampled batch, parsed on the client.

Alike items (the usual case) travel column by column: one payload per column with the rows of
every item, which the client turns into the stacked batch with one ``frombuffer``. Other
batches carry the row segments each item needs (each segment once). Re-exported by
:mod:`ostinato.wire.protocol`, which holds the other messages.
"""

from __future__ import annotations

import math
from operator import itemgetter
from typing import Any

import numpy as np

from ostinato.core import items as items_lib
from ostinato.core.chunks import Chunk, chunk_row_bytes, little_endian
from ostinato.core.locations import registered_block
from ostinato.core.specs import dtype_from_str, dtype_to_str
from ostinato.errors import DecodeError
from ostinato.wire import codec
from ostinato.wire.rows import SegmentedRows


def sample_reply(batch: items_lib.SampleBatch) -> dict:
    """Sampled items and their data.

    Alike items (the usual case) travel column by column: one payload per column with the rows
    of every item, which the client turns into the stacked batch with one ``frombuffer``.
    Other batches carry the row segments each item needs (each segment once).
    """
    head: dict[str, Any] = {
        "keys": batch.keys.astype("<u8").tobytes(),
        "p": batch.probabilities.astype("<f8").tobytes(),
        "sz": batch.table_sizes.astype("<i8").tobytes(),
        "pr": batch.priorities.astype("<f8").tobytes(),
        "ts": batch.times_sampled.astype("<i4").tobytes(),
    }
    cols = _columnar(batch) if batch.trajectories else None
    if cols is not None:
        head["cols"] = cols
        head["sq1"] = list(batch.squeeze[0])
        return head
    head.update(_with_segments(batch))
    return head


def sample_reply_data_bytes(reply: dict) -> int:
    """Bytes of row data a sample reply carries."""
    return sum(len(c["b"]) for c in reply.get("cols", ())) + sum(
        len(g["b"]) for g in reply.get("segs", ())
    )


def _columnar(batch: items_lib.SampleBatch) -> list[dict] | None:
    """One payload per column holding the rows of all items, when the items are alike
    (same columns, lengths, dtypes and shapes; no strings), whether a column is one slice of
    a chunk or spans several chunks. Otherwise None."""
    trajs = batch.trajectories
    if batch.squeeze.count(batch.squeeze[0]) != len(trajs):
        return None
    if set(map(type, map(itemgetter(0), trajs))) == {Chunk} and len(set(map(len, trajs))) == 1:
        return _columnar_flat(trajs)  # every item flat (items_lib.is_flat), as wide
    per_item = [items_lib.columns(t) for t in trajs]
    ncols = len(per_item[0])
    if any(len(c) != ncols for c in per_item):
        return None
    out = []
    blocks: dict[int, Any] = {}
    for ci in range(ncols):
        first = per_item[0][ci]
        spec = first[0][0].spec
        if spec is None or spec[0].kind == "O":
            return None
        n = sum(x[2] for x in first)
        rb = spec[0].itemsize * math.prod(spec[1])
        little = little_endian(spec[0])
        parts: list[Any] = []
        add = parts.append
        for cols in per_item:
            total = 0
            for chunk, off, ln in cols[ci]:
                if chunk.spec is not spec and chunk.spec != spec:
                    return None
                add(_slice_bytes(chunk, off, ln, rb, little, blocks))
                total += ln
            if total != n:
                return None
        out.append({"d": dtype_to_str(spec[0]), "h": list(spec[1]), "n": n, "b": b"".join(parts)})
    return out


def _columnar_flat(trajs: list[items_lib.Packed]) -> list[dict] | None:
    """:func:`_columnar` for the usual batch, read straight from the packed tuples: every
    item flat (one slice per column) and of the same length."""
    t0 = trajs[0]
    out = []
    blocks: dict[int, Any] = {}  # block code -> the block's bytes (memoryview), or None
    for b in range(0, len(t0), 3):
        spec = t0[b].spec
        if spec is None or spec[0].kind == "O":
            return None
        n = t0[b + 2]
        rb = spec[0].itemsize * math.prod(spec[1])
        little = little_endian(spec[0])
        parts: list[Any] = []
        add = parts.append
        for t in trajs:
            chunk, off, ln = t[b], t[b + 1], t[b + 2]
            if ln != n or (chunk.spec is not spec and chunk.spec != spec):
                return None
            # _slice_bytes, inlined: this loop runs once per sampled item and column.
            raw = chunk.raw
            if raw is not None:
                add(raw[off * rb : (off + n) * rb])
                continue
            origin = chunk.origin
            if origin is not None and little:
                mv = blocks.get(origin[0], False)
                if mv is False:
                    mv = blocks[origin[0]] = _block_bytes(origin[0])
                if mv is not None:
                    start = origin[1] + off
                    add(mv[start * rb : (start + n) * rb])
                    continue
            add(chunk_row_bytes(chunk, off, off + n))
        out.append({"d": dtype_to_str(spec[0]), "h": list(spec[1]), "n": n, "b": b"".join(parts)})
    return out


def _slice_bytes(chunk: Chunk, off: int, n: int, rb: int, little: bool, blocks: dict) -> Any:
    """Rows ``[off, off + n)`` of ``chunk`` (``rb`` bytes each) as little-endian C-order bytes
    or a view of them: cut from the chunk's one payload (rows received over the network or
    restored), from the block a writer in this process carved the chunk out of (``blocks``
    caches each block's bytes for one reply), else copied by :func:`chunk_row_bytes`."""
    raw = chunk.raw
    if raw is not None:
        return raw[off * rb : (off + n) * rb]
    origin = chunk.origin
    if origin is not None and little:
        code, first = origin
        mv = blocks.get(code, False)
        if mv is False:
            mv = blocks[code] = _block_bytes(code)
        if mv is not None:
            return mv[(first + off) * rb : (first + off + n) * rb]
    return chunk_row_bytes(chunk, off, off + n)


def _block_bytes(code: int) -> memoryview | None:
    """The bytes of a writer's block of rows (C order), or None if it is gone."""
    block = registered_block(code)
    if block is None or not block.flags.c_contiguous:
        return None
    return memoryview(block.reshape(-1).view(np.uint8))  # type: ignore[arg-type]


def _with_segments(batch: items_lib.SampleBatch) -> dict:
    seg_index: dict[int, int] = {}
    segs: list[dict] = []
    items = []
    for packed in batch.trajectories:
        cols = []
        for col in items_lib.columns(packed):
            flat: list[int] = []
            for chunk, off, ln in col:
                data = chunk.data
                if isinstance(data, SegmentedRows):
                    for part, local, n in data.covering(off, ln):
                        idx = seg_index.get(id(part))
                        if idx is None:
                            idx = seg_index[id(part)] = len(segs)
                            segs.append(part.raw)
                        flat += (idx, local, n)
                else:  # written in-process: encode just the rows needed
                    segs.append(
                        codec.make_segment(
                            chunk.key, chunk.episode_id, off, data[off : off + ln], compress=True
                        )
                    )
                    flat += (len(segs) - 1, 0, ln)
            cols.append(flat)
        items.append(cols)
    return {"items": items, "sq": [list(s) for s in batch.squeeze], "segs": segs}


def parse_sample_reply(resp: Any) -> items_lib.SampleBatch:
    try:
        keys = np.frombuffer(resp["keys"], "<u8").astype(np.uint64)
        n = len(keys)
        probs = np.frombuffer(resp["p"], "<f8").astype(np.float64)
        sizes = np.frombuffer(resp["sz"], "<i8").astype(np.int64)
        prios = np.frombuffer(resp["pr"], "<f8").astype(np.float64)
        times = np.frombuffer(resp["ts"], "<i4").astype(np.int32)
        if not len(probs) == len(sizes) == len(prios) == len(times) == n:
            raise DecodeError("sample response fields differ in length")
        if "cols" in resp:
            sq = items_lib.intern_squeeze(resp["sq1"])
            columns: list[np.ndarray] = []
            for col, s in zip(resp["cols"], sq):
                dtype = dtype_from_str(col["d"])
                shape = codec.shape_from_wire(col["h"])
                ln = int(col["n"])
                arr = np.frombuffer(col["b"], dtype=dtype.newbyteorder("<"))
                arr = arr.reshape((n, *shape) if s else (n, ln, *shape))
                columns.append(arr.astype(dtype.newbyteorder("="), copy=False))
            return items_lib.SampleBatch(
                keys, probs, sizes, prios, times, [], [sq] * n, columns=columns
            )
        if len(resp["items"]) != n:
            raise DecodeError("sample response fields differ in length")
        chunks = []
        for m in resp["segs"]:
            seg = codec.parse_segment(m, 2**62)
            arr = seg.decode()
            arr.flags.writeable = False
            chunks.append(Chunk(seg.key, arr, seg.episode_id, spec=(seg.dtype, seg.row_shape)))
        trajs = []
        for cols in resp["items"]:
            slices = [
                [(chunks[flat[j]], flat[j + 1], flat[j + 2]) for j in range(0, len(flat), 3)]
                for flat in cols
            ]
            trajs.append(items_lib.pack(slices))
        squeeze = [items_lib.intern_squeeze(s) for s in resp["sq"]]
    except (KeyError, IndexError, TypeError, ValueError) as e:
        if isinstance(e, DecodeError):
            raise
        raise DecodeError(f"malformed sample response: {e}") from None
    return items_lib.SampleBatch(keys, probs, sizes, prios, times, trajs, squeeze)

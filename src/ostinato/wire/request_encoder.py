"""Encodes a writer stream's batches of items into Insert requests, each row once per connection.

Rows go inline (zstd where it pays) or, on this host, through a shared-memory ring the server
maps; :mod:`ostinato.wire.writer_stream` owns the call that carries the requests.
"""

from __future__ import annotations

import logging
from operator import add, attrgetter
from typing import Any

import numpy as np

from ostinato import errors
from ostinato.core.chunks import Chunk
from ostinato.core.items import chunk_refs
from ostinato.errors import ShmError
from ostinato.wire import codec, protocol, shm
from ostinato.wire.item_groups import item_group
from ostinato.wire.outbox import Entry

_log = logging.getLogger(__name__)

#: A request is cut when the rows it carries reach this many bytes (without shared memory).
MAX_REQUEST_BYTES = 16 * 1024 * 1024
#: Runs of at least GROUP_MIN (and at most GROUP_MAX) consecutive items alike -- one table,
#: the same squeeze flags, one slice per column, as many columns -- travel as one item
#: group: arrays of keys, priorities, chunk keys, offsets and lengths that the server reads
#: with numpy instead of one msgpack item each (:func:`ostinato.wire.item_groups.item_group`).
#: Below about 12 items the five small arrays cost more than they save, on both sides (a W1
#: request of 6 items: encode 56 -> 46 us, server 125 -> 114 us as plain items; at 32 items
#: the group saves 75 us): hence 16.
GROUP_MIN = 16
GROUP_MAX = 256

_KEY = attrgetter("key")


def _group(ti: int, group: list[Any], sq: list[bool], width: int) -> dict[str, Any]:
    """The wire form of a run of flat items alike (see :data:`GROUP_MIN`)."""
    keys, prios, packed, _ = zip(*group)
    fields = list(zip(*packed))
    return item_group(
        ti,
        sq,
        np.array(keys, np.uint64),
        np.array(prios, np.float64),
        np.array([list(map(_KEY, fields[i])) for i in range(0, width, 3)], np.uint64),
        np.array(fields[1::3], np.int64),
        np.array(fields[2::3], np.int64),
    )


class RingRefused(errors.ReverbError):
    """The server would not map a writer's ring; its items are resent with inline rows."""


class RequestEncoder:
    """Encodes batches of items into Insert requests for one connection, each row once.

    Args:
      transport: the :class:`~ostinato.wire.grpc_transport.GrpcTransport` (options, and whether
        this host may offer the server a shared-memory ring).
    """

    def __init__(self, transport: Any):
        self._t = transport
        self._compress = transport.options.compression == "zstd"
        self.sent_rows: dict[int, int] = {}  # chunk key -> rows sent on this connection
        self._ring: shm.Ring | None = None  # this connection's ring, made on demand
        self._ring_described = False

    def drop_ring(self) -> None:
        ring, self._ring = self._ring, None
        self._ring_described = False
        if ring is not None:
            ring.close()

    def release(self, ring_bytes: int) -> None:
        """Ring space of confirmed requests can be reused."""
        if ring_bytes and self._ring is not None:
            self._ring.release(ring_bytes)

    def _ring_for(self, nbytes: int) -> shm.Ring | None:
        """This call's ring if rows of ``nbytes`` should go through one (made on first use)."""
        if nbytes < shm.MIN_SEGMENT_BYTES or not self._t.use_shm:
            return None
        if self._ring is None:
            try:
                self._ring = shm.Ring(self._t.options.shared_memory_bytes)
            except ShmError as e:
                self._t.use_shm = False
                self._t.shm_refused = str(e)
                _log.info("writers to %s send rows inline: %s", self._t.address, e)
                return None
        return self._ring

    def _segment(self, chunk: Chunk, start: int, end: int) -> tuple[dict, int]:
        """The segment of ``chunk``'s rows [start, end): in the ring if it pays and there is
        room (returns the ring bytes it holds), else inline."""
        rows = chunk.data[start:end]
        ring = self._ring_for(rows.nbytes) if rows.dtype.kind != "O" else None
        put = ring.put(rows) if ring is not None and rows.flags.c_contiguous else None
        if put is not None:
            return codec.make_segment(
                chunk.key, chunk.episode_id, start, rows, False, ring_ref=[put[0], rows.nbytes]
            ), put[1]
        return codec.make_segment(chunk.key, chunk.episode_id, start, rows, self._compress), 0

    def _group_rows(self, group: list[Any], need: dict[int, tuple[Chunk, int]], width: int) -> int:
        """Records in ``need`` the rows the group's items reach, per chunk; returns the bytes
        of rows not yet sent or needed."""
        packed = [it[2] for it in group]
        fields = list(zip(*packed))  # per column: chunks, offsets, lengths
        sent_rows = self.sent_rows
        new_bytes = 0
        for i in range(0, width, 3):
            chunks = fields[i]
            ends = map(add, fields[i + 1], fields[i + 2])
            # The furthest row per chunk: sorted pairs, the last of each key wins.
            furthest = dict(sorted(zip(map(_KEY, chunks), ends)))
            by_key = dict(zip(map(_KEY, chunks), chunks))
            for ck, e in furthest.items():
                prev = need.get(ck)
                if prev is None or prev[1] < e:
                    chunk = by_key[ck]
                    base = sent_rows.get(ck, 0) if prev is None else prev[1]
                    if e > base:
                        new_bytes += (e - base) * chunk.data.strides[0]
                    need[ck] = (chunk, e)
        return new_bytes

    def encode(
        self, batch: list[Entry], retry: set[int], keep: set[int]
    ) -> tuple[bytes, int, list[Entry]]:
        """The request for a prefix of ``batch``: returns (message, ring bytes it holds until
        acknowledged, the items left for the next request).

        A request is cut once the rows it carries reach :data:`MAX_REQUEST_BYTES` (a third of
        the ring with shared memory, so that the requests in flight fit in it). ``retry`` holds
        keys of resent items (those sent are removed from it); ``keep`` the chunk keys the
        writer may still refer to besides the items of ``batch`` (the server forgets the
        others once this request's items are stored).
        """
        tables: dict[str, int] = {}
        items: list[Any] = []
        need: dict[int, tuple[Chunk, int]] = {}
        sq_cache: dict[int, list[bool]] = {}
        retried: list[int] = []
        sent_rows = self.sent_rows
        new_bytes = 0
        limit = self._t.options.shared_memory_bytes // 3 if self._t.use_shm else MAX_REQUEST_BYTES
        rest: list[Entry] = []
        npos = 0  # items in the request so far (positions count items, not groups)
        pos = 0
        end = len(batch)
        while pos < end:
            if new_bytes >= limit:
                rest = batch[pos:]
                del batch[pos:]
                break
            table, (key, prio, packed, squeeze), _writer = batch[pos]
            ti = tables.get(table)
            if ti is None:
                ti = tables[table] = len(tables)
            sq = sq_cache.get(id(squeeze))
            if sq is None:
                sq = sq_cache[id(squeeze)] = [bool(x) for x in squeeze]
            if type(packed[0]) is Chunk:  # a run of flat items alike: one group
                run = pos + 1
                width = len(packed)
                stop = min(end, pos + GROUP_MAX)
                while run < stop:
                    t2, it2, _ = batch[run]
                    p2 = it2[2]
                    if t2 != table or it2[3] is not squeeze or type(p2[0]) is not Chunk:
                        break
                    if len(p2) != width:
                        break
                    run += 1
                if run - pos >= GROUP_MIN:
                    group = [e[1] for e in batch[pos:run]]
                    new_bytes += self._group_rows(group, need, width)
                    if retry:
                        for j, it in enumerate(group):
                            if it[0] in retry:
                                retried.append(npos + j)
                                retry.discard(it[0])
                    items.append(_group(ti, group, sq, width))
                    npos += run - pos
                    pos = run
                    continue
            cols = []
            if type(packed[0]) is Chunk:  # one slice per column: the common case
                it = iter(packed)
                for chunk, off, ln in zip(it, it, it):
                    ck = chunk.key
                    e = off + ln
                    cols.append([ck, off, ln])
                    prev = need.get(ck)
                    if prev is None:
                        base = sent_rows.get(ck, 0)
                        if e > base:
                            new_bytes += (e - base) * chunk.data.strides[0]
                        need[ck] = (chunk, e)
                    elif prev[1] < e:
                        new_bytes += (e - prev[1]) * chunk.data.strides[0]
                        need[ck] = (chunk, e)
            else:
                for col in packed:
                    flat: list[int] = []
                    for chunk, off, ln in col:
                        flat += (chunk.key, off, ln)
                        e = off + ln
                        prev = need.get(chunk.key)
                        if prev is None or prev[1] < e:
                            base = sent_rows.get(chunk.key, 0) if prev is None else prev[1]
                            if e > base:
                                new_bytes += (e - base) * chunk.data.strides[0]
                            need[chunk.key] = (chunk, e)
                    cols.append(flat)
            if retry and key in retry:
                retried.append(npos)
                retry.discard(key)
            items.append([ti, key, prio, cols, sq])
            npos += 1
            pos += 1
        if rest:  # the items left for the next request need their chunks kept
            keep = keep | {c.key for _, (_, _, packed, _), _ in rest for c in chunk_refs(packed)}
        segs = []
        ring_cost = 0
        for ck, (chunk, end) in need.items():
            sent = sent_rows.get(ck, 0)
            if end > sent:
                seg, cost = self._segment(chunk, sent, end)
                segs.append(seg)
                ring_cost += cost
                sent_rows[ck] = end
        for ck in sent_rows.keys() - keep:  # set difference, in C
            del sent_rows[ck]
        ring = None
        if self._ring is not None and not self._ring_described:
            ring = self._ring.descriptor()
            self._ring_described = True
        msg = protocol.insert_request(
            segs, list(tables), items, list(sent_rows.keys() & keep), retried, ring
        )
        if len(msg) > self._t.options.max_message_bytes:
            raise errors.InvalidArgumentError(
                f"an insert request of {len(msg)} bytes exceeds max_message_bytes "
                f"({self._t.options.max_message_bytes}); "
                "lower the writer's batch or raise the limit"
            )
        return msg, ring_cost, rest

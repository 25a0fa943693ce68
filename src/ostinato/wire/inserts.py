"""The server's side of an Insert stream: rows and items from one writer, into the tables.

A writer sends each row once, as segments of chunks; the stream keeps the chunks by key for as
long as the writer says it may refer to them (``keep``), so items in later requests can use rows
sent earlier. Every item of a request is validated (its columns against the chunks, its table's
signature and priority rules) before any is stored; then items go in in request order, and an
item that must wait for its rate limiter is preceded by an acknowledgement of those before it --
so a writer's ``flush(block_until_num_items=n)`` and back-pressure mean the same embedded and
over the network.
"""

from __future__ import annotations

import dataclasses
import math
import threading
from collections.abc import Callable, Iterator
from itertools import repeat
from operator import attrgetter
from typing import Any

import numpy as np

from ostinato import errors
from ostinato.core import items as items_lib
from ostinato.core.chunks import Chunk
from ostinato.core.deadline import Deadline
from ostinato.core.signature import check_columns
from ostinato.errors import DecodeError, ShmError
from ostinato.wire import codec, shm
from ostinato.wire.item_groups import parse_item_group
from ostinato.wire.protocol import InsertRequest, parse_insert_request
from ostinato.wire.rows import SegmentedRows

#: Seconds an item waits for its rate limiter between checks that the writer is still there.
WAIT_SLICE = 0.5
#: A stream may hold this many times ``max_inflated_bytes`` in rows kept for later items.
STREAM_HELD_FACTOR = 4

_ROWS = attrgetter("data.end")  # rows a stream's chunk holds so far


_SPEC = attrgetter("spec")


def _add_run(work: list[tuple[Any, Any]], table: Any, items: Any) -> None:
    """Appends ``items`` (a list, or a count of skipped items when ``table`` is None) to the
    last run if it is for the same table, else as a new run."""
    if work and work[-1][0] is table:
        if table is None:
            work[-1] = (None, work[-1][1] + items)
        else:
            work[-1][1].extend(items)
    else:
        work.append((table, items))


@dataclasses.dataclass
class StreamStats:
    """Counters of a server's Insert streams (for tests and monitoring).

    Attributes:
      active_streams: streams open now.
      ring_streams: streams that mapped a writer's shared-memory ring (so far).
      rings_mapped: writers' rings mapped now.
      ring_bytes: row bytes copied out of rings.
    """

    active_streams: int = 0
    ring_streams: int = 0
    rings_mapped: int = 0
    ring_bytes: int = 0
    lock: threading.Lock = dataclasses.field(default_factory=threading.Lock, repr=False)


class InsertSession:
    """One Insert stream, on the server.

    Args:
      table: looks a table up by name (raising ``TableNotFoundError``).
      max_bytes: the server's largest message; no segment may be larger.
      shared_memory: whether the server reads writers' rings.
      stats: the server's stream counters.
      max_inflated_bytes: the most bytes one request's rows may expand to (``Server`` option
        of that name; default ``max_bytes``); the stream may hold ``STREAM_HELD_FACTOR`` times
        this in rows kept for later items. Both are checked against the sizes the request
        declares before anything is decompressed, copied from a ring or decoded.
    """

    def __init__(
        self,
        table: Callable[[str], Any],
        max_bytes: int,
        shared_memory: bool,
        stats: StreamStats,
        max_inflated_bytes: int | None = None,
    ):
        self._table = table
        self._max_bytes = max_bytes
        self._max_inflated = max_bytes if max_inflated_bytes is None else max_inflated_bytes
        self._held = 0  # payload bytes of self._chunks
        self._shared_memory = shared_memory
        self._stats = stats
        self._chunks: dict[int, Chunk] = {}
        self._ring: shm.Mapping | None = None
        #: One spec object per (dtype, row shape): the chunks of a stream share them, as a
        #: writer's column's do, so a signature check is remembered by the specs' identities.
        self._specs: dict[tuple[Any, ...], tuple[Any, ...]] = {}
        #: Item layouts whose signature check passed, (table, squeeze flags, (spec id, rows)
        #: per slice) -> the signature checked against: while the table keeps that signature
        #: the check is a dict lookup, not per-item work.
        self._checked: dict[tuple[Any, ...], Any] = {}
        #: Set by :meth:`handle` just before an ack after which it waits for a rate limiter
        #: (so a caller that must not block can hand the rest to a thread).
        self.waiting = False
        #: Set by the service once the request being handled is stored whole (its caller
        #: records it before the client hears the last ack).
        self.complete = False

    @property
    def ring_mapped(self) -> bool:
        """Whether this stream reads rows from a writer's shared-memory ring."""
        return self._ring is not None

    def close(self) -> None:
        self._chunks.clear()
        self._held = 0
        self._checked.clear()
        if self._ring is not None:
            self._ring.close()
            self._ring = None
            with self._stats.lock:
                self._stats.rings_mapped -= 1

    def handle(self, raw: bytes, is_active: Callable[[], bool]) -> Iterator[int | None]:
        """Stores the request's rows and items; yields acks: how many more of its items (in
        request order) are in their tables (0 just before waiting for a rate limiter with
        nothing new stored), or None if the writer left while an item waited.

        Raises:
          DecodeError: a malformed request (nothing of it was stored).
          ResourceExhaustedError: the request's rows would expand beyond
            ``max_inflated_bytes``, or the stream would hold more than ``STREAM_HELD_FACTOR``
            times that (checked before anything is expanded; nothing was stored).
          ShmError: the writer's ring cannot be used; the writer resends the same items
            inline, and nothing of this request was stored.
        """
        self.waiting = False
        req = parse_insert_request(raw)
        self._check_expansion(req.segments)
        self._read_ring(req)
        self._add_segments(req.segments)
        work = self._validate(req)
        yield from self._store(work, is_active)
        chunks = self._chunks
        for k in chunks.keys() - req.keep:  # set difference, in C
            self._held -= chunks.pop(k).nbytes

    def _check_expansion(self, segments: list[Any]) -> None:
        """Bounds what the request's rows expand to, from the sizes its segments declare,
        before any is inflated, copied out of a ring or decoded (docs/architecture.md)."""
        limit = self._max_inflated
        total = 0
        for m in segments:
            total += codec.declared_bytes(m)
            if total > limit:
                raise errors.ResourceExhaustedError(
                    f"Insert request rows would expand to more than max_inflated_bytes "
                    f"({limit}) of this server (at least {total} bytes); send fewer rows "
                    "per request or raise Server(max_inflated_bytes=...)"
                )
        if self._held + total > STREAM_HELD_FACTOR * limit:
            raise errors.ResourceExhaustedError(
                f"Insert stream would hold {self._held + total} bytes of rows, more than "
                f"{STREAM_HELD_FACTOR} x max_inflated_bytes ({limit}) of this server; keep "
                "fewer chunks alive for later items or raise Server(max_inflated_bytes=...)"
            )

    # -- rows ------------------------------------------------------------------------------------
    def _read_ring(self, req: InsertRequest) -> None:
        """Maps the writer's ring (first time) and replaces each ``m`` reference by a copy of
        the rows it points at, so the rest of the request is handled as if they were inline."""
        if req.ring is not None:
            if self._ring is not None:
                raise DecodeError("an insert stream may describe only one shared-memory ring")
            if not self._shared_memory:
                raise ShmError("this server does not accept shared-memory rings")
            self._ring = shm.Mapping(req.ring)
            with self._stats.lock:
                self._stats.ring_streams += 1
                self._stats.rings_mapped += 1
        for m in req.segments:
            if isinstance(m, dict) and "m" in m:
                ref = m.pop("m")
                if self._ring is None:
                    raise DecodeError(
                        "a segment refers to a shared-memory ring the stream has not described"
                    )
                if not isinstance(ref, list) or len(ref) != 2:
                    raise DecodeError("segment field 'm' must be [offset, length]")
                if type(ref[1]) is int and ref[1] > self._max_bytes:
                    # The same limit (and error) as for rows sent inline.
                    raise errors.ResourceExhaustedError(
                        f"segment in shared memory larger than max ({ref[1]} vs. "
                        f"{self._max_bytes}) bytes per message of this server"
                    )
                try:
                    m["b"] = self._ring.read(ref[0], ref[1])
                except ShmError as e:
                    raise DecodeError(str(e)) from None
                self._stats.ring_bytes += ref[1]  # one stream per thread: a lost update is harmless

    def _add_segments(self, segments: list[Any]) -> None:
        chunks = self._chunks
        for m in segments:
            seg = codec.to_raw(codec.parse_segment(m, self._max_bytes), self._max_inflated)
            if seg.dtype.kind == "O":  # stored only if every client will be able to decode it
                codec.check_strings(seg.payload, seg.nrows * math.prod(seg.row_shape))
            c = chunks.get(seg.key)
            if c is None:
                spec = (seg.dtype, seg.row_shape)
                spec = self._specs.setdefault(spec, spec)
                c = Chunk(
                    seg.key,
                    SegmentedRows(seg.dtype, seg.row_shape),
                    seg.episode_id,
                    nbytes=0,
                    spec=spec,
                )
                chunks[seg.key] = c
            c.data.add(seg)
            c.raw = c.data.flat  # after the rows: it covers every item stored later
            c.nbytes += len(seg.payload)
            self._held += len(seg.payload)

    # -- items -----------------------------------------------------------------------------------
    def _validate(self, req: InsertRequest) -> list[tuple[Any, Any]]:
        """Every item checked; returns runs ``(table, items)`` of consecutive items for one
        table, in request order, and ``(None, n)`` for ``n`` resent items already stored
        before the connection broke."""
        tables = [self._table(name) for name in req.tables]
        work: list[tuple[Any, Any]] = []
        pos = -1
        for entry in req.items:
            pos += 1
            if type(entry) is dict:  # an item group: many items at once
                pos += self._validate_group(entry, tables, req.retried, pos, work) - 1
                continue
            ti, key, prio, cols, sq = entry
            if type(ti) is not int or not 0 <= ti < len(tables):  # not bool
                raise DecodeError(f"item names table index {ti!r} of {len(tables)}")
            key = codec.u64(key, "item key")
            if not isinstance(prio, (int, float)) or isinstance(prio, bool):
                raise DecodeError(f"priority must be a number, got {prio!r}")
            packed, squeeze = self._item_columns(cols, sq)
            table = tables[ti]
            self._check_signature(table, packed, squeeze)
            if pos in req.retried and table.contains(key):
                _add_run(work, None, 1)
                continue
            table.validate_priority(float(prio))
            _add_run(work, table, [(key, float(prio), packed, squeeze)])
        return work

    def _validate_group(
        self,
        m: dict[str, Any],
        tables: list[Any],
        retried: set[int],
        pos: int,
        work: list[tuple[Any, Any]],
    ) -> int:
        """Checks an item group (:func:`~ostinato.wire.item_groups.item_group`) as
        :meth:`_validate` checks single items, with numpy; appends its items to ``work`` and
        returns how many it holds."""
        g = parse_item_group(m)
        if not 0 <= g.table < len(tables):
            raise DecodeError(f"item group names table index {g.table!r} of {len(tables)}")
        table = tables[g.table]
        n = len(g.keys)
        squeeze = items_lib.intern_squeeze(g.squeeze)
        get = self._chunks.get
        fields: list[Any] = []
        for ci, sq in enumerate(squeeze):
            keys = g.chunk_keys[ci].tolist()
            chunks = list(map(get, keys))
            if None in chunks:
                ck = keys[chunks.index(None)]
                raise DecodeError(f"item refers to chunk {ck!r}, which this stream did not send")
            off, ln = g.offsets[ci], g.lengths[ci]
            rows = np.fromiter(map(_ROWS, chunks), np.int64, n)
            bad = (off < 0) | (ln < 1) | (off + ln > rows)
            if np.count_nonzero(bad):
                j = int(np.flatnonzero(bad)[0])
                raise DecodeError(
                    f"item refers to rows [{off[j]}, {off[j]}+{ln[j]}) of chunk {keys[j]}, "
                    f"which has {rows[j]} rows"
                )
            if sq and np.count_nonzero(ln != 1):
                raise DecodeError("a squeezed column must hold exactly one row")
            fields += (chunks, off.tolist(), ln.tolist())
        packed = list(zip(*fields))
        if table.flat_signature is not None:
            specs = [set(map(id, map(_SPEC, fields[i]))) for i in range(0, len(fields), 3)]
            lengths = [set(fields[i]) for i in range(2, len(fields), 3)]
            if all(len(x) == 1 for x in specs) and all(len(x) == 1 for x in lengths):
                self._check_signature(table, packed[0], squeeze)  # one layout for all
            else:
                for p in packed:
                    self._check_signature(table, p, squeeze)
        prios = g.priorities.tolist()
        for v in set(prios):
            table.validate_priority(v)  # NaN, and what a Prioritized table refuses
        keys = g.keys.tolist()
        items = list(zip(keys, prios, packed, repeat(squeeze)))
        if retried and any(pos + j in retried for j in range(n)):
            for j, it in enumerate(items):
                if pos + j in retried and table.contains(it[0]):
                    _add_run(work, None, 1)
                else:
                    _add_run(work, table, [it])
        else:
            _add_run(work, table, items)
        return n

    def _store(
        self, work: list[tuple[Any, Any]], is_active: Callable[[], bool]
    ) -> Iterator[int | None]:
        def gone() -> bool:
            return not is_active()

        n = acked = 0
        for table, rest in work:
            if table is None:  # resent items already stored
                n += rest
                continue
            wait = 0.0  # first without waiting: what is admitted now is acked before we wait
            while rest:
                try:
                    table.insert_many(rest, Deadline.after(wait), assign=False, cancelled=gone)
                    n += len(rest)
                    rest = []
                except errors.CancelledError as e:
                    if is_active():  # the table closed (the server is stopping): say so
                        raise
                    # The writer left while an item waited: nothing more of it is stored.
                    n += len(getattr(e, "inserted", ()))
                    if n > acked:
                        yield n - acked
                    yield None
                    return
                except errors.RateLimiterTimeout as e:
                    done = len(getattr(e, "inserted", ()))
                    n += done
                    rest = rest[done:]
                    # The next step waits for the rate limiter: ack what went in (0 if
                    # nothing did, so a caller that must not block can hand the rest over).
                    self.waiting = True
                    yield n - acked
                    acked = n
                    if not is_active():
                        yield None
                        return
                    wait = WAIT_SLICE
        if n > acked:
            yield n - acked

    def _item_columns(self, cols: Any, sq: Any) -> tuple[Any, tuple[bool, ...]]:
        chunks = self._chunks
        if not isinstance(cols, list) or not cols or len(cols) > 100_000:
            raise DecodeError("an item needs a non-empty list of columns")
        if not isinstance(sq, list) or len(sq) != len(cols):
            raise DecodeError("an item needs one squeeze flag per column")
        squeeze = items_lib.intern_squeeze(sq)
        # Fast path: every column one slice of a known chunk, checked as it is copied.
        flat: list[Any] = []
        for col, s in zip(cols, squeeze):
            if type(col) is not list or len(col) != 3:
                break
            ck, off, ln = col
            c = chunks.get(ck) if type(ck) is int else None
            if (
                c is None
                or type(off) is not int
                or type(ln) is not int
                or off < 0
                or ln < 1
                or off + ln > c.data.end
                or (s and ln != 1)
            ):
                break
            flat += (c, off, ln)
        else:
            return tuple(flat), squeeze
        # The general path: columns of several slices, and every error's message.
        columns: list[Any] = []
        for col in cols:
            if not isinstance(col, list) or not col or len(col) % 3:
                raise DecodeError("a column is a flat list of (chunk key, offset, length) triples")
            slices = []
            for i in range(0, len(col), 3):
                ck, off, ln = col[i], col[i + 1], col[i + 2]
                c = chunks.get(ck) if type(ck) is int else None  # not bool
                if c is None:
                    raise DecodeError(
                        f"item refers to chunk {ck!r}, which this stream did not send"
                    )
                if (
                    type(off) is not int
                    or type(ln) is not int
                    or off < 0
                    or ln < 1
                    or off + ln > c.data.end
                ):
                    raise DecodeError(
                        f"item refers to rows [{off}, {off}+{ln}) of chunk {ck}, "
                        f"which has {c.data.end} rows"
                    )
                slices.append((c, off, ln))
            columns.append(slices)
        for s, col in zip(squeeze, columns):
            if s and (len(col) != 1 or col[0][2] != 1):
                raise DecodeError("a squeezed column must hold exactly one row")
        return items_lib.pack(columns), squeeze

    def _check_signature(self, table: Any, packed: Any, squeeze: tuple[bool, ...]) -> None:
        """Raises unless the item's columns match the table's signature (remembered per
        layout: the same columns, lengths and specs pass again without a check)."""
        sig = table.flat_signature
        if sig is None:
            return
        layout: tuple[Any, ...]
        if items_lib.is_flat(packed):
            layout = tuple([(id(x.spec), n) for x, n in zip(packed[0::3], packed[2::3])])
        else:
            layout = tuple([tuple([(id(x[0].spec), x[2]) for x in col]) for col in packed])
        key = (table, squeeze, layout)
        if self._checked.get(key) is sig:
            return
        _check_signature(table, packed, squeeze)
        if len(self._checked) > 10_000:
            self._checked.clear()
        self._checked[key] = sig


def _check_signature(table: Any, packed: Any, squeeze: tuple[bool, ...]) -> None:
    sig = table.flat_signature
    if sig is None:
        return
    cols = []
    for col, s in zip(items_lib.columns(packed), squeeze):
        dtype, row_shape = col[0][0].spec
        if s:
            cols.append((dtype, row_shape, None))
        else:  # whole-step columns may also match the signature of one step
            cols.append((dtype, (sum(x[2] for x in col), *row_shape), row_shape))
    check_columns(table.name, sig, cols)

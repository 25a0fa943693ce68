"""The gRPC service: serves a :class:`~ostinato.server.Server`'s tables to remote clients.

Methods of service ``ostinato.Replay`` (all payloads are msgpack maps, see :mod:`codec`):

* ``Insert`` (stream-stream): each request carries new row segments, items and the chunk keys
  the writer still needs; each reply confirms how many items of one request were stored.
* ``Sample``, ``Mutate``, ``Reset``, ``ServerInfo``, ``Checkpoint`` (unary).

A malformed request gets ``INVALID_ARGUMENT`` and changes nothing; other clients are not
affected. Calls that wait on a rate limiter wait in short slices and give up when the client
goes away, so a dead client never pins a server thread.
"""

from __future__ import annotations

import bisect
import logging
import math
import threading
from collections.abc import Iterator
from concurrent import futures
from typing import Any

import grpc
import numpy as np

from ostinato import errors
from ostinato.core import items as items_lib
from ostinato.core.chunks import Chunk, chunk_row_bytes
from ostinato.core.deadline import Deadline
from ostinato.core.signature import check_columns
from ostinato.wire import codec, shm
from ostinato.wire.codec import DecodeError
from ostinato.wire.status import abort_shm_refused, abort_with

_log = logging.getLogger(__name__)

SERVICE = "ostinato.Replay"
DEFAULT_MAX_MESSAGE_BYTES = 256 * 1024 * 1024
#: A remote sample call that the rate limiter lets take fewer items than asked waits up to this
#: long for the rest (see ``Table.sample(linger=)``): a sampler that keeps up with the inserts
#: then takes them in batches instead of one round trip per few items (W6: 6.8k -> ~7.8k/s).
SAMPLE_LINGER_SECONDS = 0.005
_WAIT_SLICE = 0.5  # seconds between checks that the client is still there
_DONE: Any = object()


class SegmentedRows:
    """Server-side data of a chunk that arrived over the network: its segments, in row order."""

    __slots__ = ("segments", "starts", "end", "dtype", "row_shape", "_cache")

    def __init__(self, dtype: np.dtype, row_shape: tuple[int, ...]):
        self.segments: list[codec.Segment] = []
        self.starts: list[int] = []
        self.end = 0
        self.dtype = dtype
        self.row_shape = row_shape
        self._cache: np.ndarray | None = None

    def add(self, seg: codec.Segment) -> None:
        if seg.start != self.end:
            raise DecodeError(f"chunk {seg.key}: segment starts at row {seg.start}, expected {self.end}")
        if seg.dtype != self.dtype or seg.row_shape != self.row_shape:
            raise DecodeError(f"chunk {seg.key}: segment dtype/shape differs from earlier segments")
        self.segments.append(seg)
        self.starts.append(seg.start)
        self.end += seg.nrows

    def covering(self, offset: int, length: int) -> list[tuple[codec.Segment, int, int]]:
        """Segments holding rows [offset, offset + length): (segment, local offset, rows)."""
        out = []
        i = bisect.bisect_right(self.starts, offset) - 1
        row, left = offset, length
        while left > 0:
            seg = self.segments[i]
            local = row - seg.start
            n = min(left, seg.nrows - local)
            out.append((seg, local, n))
            row += n
            left -= n
            i += 1
        return out

    def rows(self, start: int, stop: int) -> np.ndarray:
        """Rows ``[start, stop)`` decoded (only the segments that hold them)."""
        parts = [seg.decode()[local:local + n] for seg, local, n in self.covering(start, stop - start)]
        if not parts:
            return np.empty((0, *self.row_shape), dtype=self.dtype)
        return parts[0] if len(parts) == 1 else np.concatenate(parts)

    def row_bytes(self, start: int, stop: int) -> bytes:
        """Rows ``[start, stop)`` as the raw little-endian bytes received (segments are kept
        decompressed, so this cuts them out without decoding)."""
        rb = self.dtype.itemsize * math.prod(self.row_shape)
        segs = self.segments
        if len(segs) == 1:  # the common case: one segment holds the whole chunk
            return segs[0].payload[start * rb:stop * rb]
        parts = [seg.payload[local * rb:(local + k) * rb]
                 for seg, local, k in self.covering(start, stop - start)]
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def as_array(self) -> np.ndarray:
        """All rows so far as one read-only array (for in-process samplers), cached until more
        rows arrive."""
        cache = self._cache
        if cache is None or len(cache) != self.end:
            cache = np.concatenate([s.decode() for s in self.segments])
            cache.flags.writeable = False
            self._cache = cache
        return cache


def _nbytes(data: Any) -> int:
    return sum(len(s.payload) for s in data.segments)


class ReplayService:
    """Handlers of the ``ostinato.Replay`` service for one server."""

    def __init__(self, server: Any, *, token: str | None = None,
                 max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES, shared_memory: bool = True):
        self._server = server
        self._token = token
        self._max_bytes = max_message_bytes
        self._shared_memory = shared_memory
        #: Insert streams that mapped a writer's shared-memory ring, and the row bytes
        #: copied out of rings (for tests and monitoring).
        self.ring_streams = 0
        self.ring_bytes = 0
        self.active_streams = 0
        self._lock = threading.Lock()
        self._item_bytes: dict[str, float] = {}

    # -- plumbing ---------------------------------------------------------------------------
    def _authorize(self, context: grpc.ServicerContext) -> None:
        if self._token is None:
            return
        md = dict(context.invocation_metadata())
        if md.get("authorization") != f"Bearer {self._token}":
            context.abort(grpc.StatusCode.UNAUTHENTICATED, "missing or wrong token")

    def _table(self, name: Any) -> Any:
        if not isinstance(name, str):
            raise DecodeError(f"table name must be a string, got {type(name).__name__}")
        t = self._server.tables_by_name.get(name)
        if t is None:
            raise errors.TableNotFoundError(name, list(self._server.tables_by_name))
        return t

    def _unary(self, fn: Any) -> Any:
        def handler(raw: bytes, context: grpc.ServicerContext) -> bytes:
            self._authorize(context)
            try:
                return codec.pack(fn(codec.unpack(raw), context))
            except grpc.RpcError:
                raise
            except Exception as e:  # noqa: BLE001 - every error goes back to the caller
                if not isinstance(e, (errors.ReverbError, ValueError, TypeError, KeyError)):
                    _log.exception("internal error in %s", getattr(fn, "__name__", fn))
                abort_with(context, e)
                raise  # unreachable: abort raises
        return handler

    def generic_handler(self) -> grpc.GenericRpcHandler:
        ident = None  # bytes in, bytes out
        return grpc.method_handlers_generic_handler(SERVICE, {
            "Insert": grpc.stream_stream_rpc_method_handler(self.insert, ident, ident),
            "Sample": grpc.unary_unary_rpc_method_handler(self._unary(self.sample)),
            "Mutate": grpc.unary_unary_rpc_method_handler(self._unary(self.mutate)),
            "Reset": grpc.unary_unary_rpc_method_handler(self._unary(self.reset)),
            "ServerInfo": grpc.unary_unary_rpc_method_handler(self._unary(self.server_info)),
            "Checkpoint": grpc.unary_unary_rpc_method_handler(self._unary(self.checkpoint)),
        })

    def _wait_slices(self, fn: Any, timeout_ms: Any, context: grpc.ServicerContext) -> Any:
        """Runs ``fn(slice_seconds)`` until it stops timing out, the deadline passes or the
        client leaves."""
        if timeout_ms is not None and (not isinstance(timeout_ms, (int, float)) or timeout_ms < 0):
            raise DecodeError(f"timeout_ms must be None or >= 0, got {timeout_ms!r}")
        deadline = Deadline.from_ms(timeout_ms)
        while True:
            if not context.is_active():
                raise errors.CancelledError("the client went away")
            r = deadline.remaining()
            try:
                return fn(_WAIT_SLICE if r is None else min(r, _WAIT_SLICE))
            except errors.RateLimiterTimeout:
                if deadline.expired() or not context.is_active():
                    raise
                if r is not None and r <= _WAIT_SLICE:
                    raise

    # -- insert -------------------------------------------------------------------------------
    def insert(self, request_iterator: Iterator[bytes], context: grpc.ServicerContext) -> Iterator[bytes]:
        self._authorize(context)
        chunks: dict[int, Chunk] = {}
        ring: list[shm.Mapping] = []  # the writer's shared-memory ring, once it sent one
        with self._lock:
            self.active_streams += 1
        try:
            for raw in request_iterator:
                acks = self._handle_request(raw, chunks, ring, context)
                while True:
                    try:
                        n = next(acks, _DONE)
                    except grpc.RpcError:
                        raise
                    except shm.ShmError as e:  # the writer resends inline: nothing was stored
                        abort_shm_refused(context, str(e))
                    except Exception as e:  # noqa: BLE001
                        if not isinstance(e, (errors.ReverbError, ValueError, TypeError)):
                            _log.exception("internal error in Insert")
                        abort_with(context, e)
                    if n is _DONE:
                        break
                    if n is None:  # the client went away while we waited
                        return
                    yield codec.pack({"n": n})
        finally:
            chunks.clear()
            for m in ring:
                m.close()
            with self._lock:
                self.active_streams -= 1

    def _handle_request(self, raw: bytes, chunks: dict[int, Chunk], ring: list[shm.Mapping],
                        context: grpc.ServicerContext) -> Iterator[int | None]:
        msg = codec.unpack_framed(raw)
        if isinstance(msg, dict):
            self._resolve_ring_refs(msg, ring)
        yield from self._insert_message(msg, chunks, context)

    def _resolve_ring_refs(self, msg: dict, ring: list[shm.Mapping]) -> None:
        """Maps the writer's ring (first time) and replaces each ``m`` reference by a copy of
        the rows it points at, so the rest of the request is handled as if they were inline.
        Raises :class:`shm.ShmError` if the ring cannot be used (the stream is then refused)."""
        desc = msg.pop("shm", None)
        if desc is not None:
            if ring:
                raise DecodeError("an insert stream may describe only one shared-memory ring")
            if not self._shared_memory:
                raise shm.ShmError("this server does not accept shared-memory rings")
            ring.append(shm.Mapping(desc))
            with self._lock:
                self.ring_streams += 1
        segs = msg.get("seg")
        if not isinstance(segs, list):
            return
        for m in segs:
            if isinstance(m, dict) and "m" in m:
                ref = m.pop("m")
                if not ring:
                    raise DecodeError("a segment refers to a shared-memory ring the stream has not described")
                if not isinstance(ref, list) or len(ref) != 2:
                    raise DecodeError("segment field 'm' must be [offset, length]")
                if type(ref[1]) is int and ref[1] > self._max_bytes:
                    # The same limit (and error) as for rows sent inline.
                    raise errors.ResourceExhaustedError(
                        f"segment in shared memory larger than max ({ref[1]} vs. "
                        f"{self._max_bytes}) bytes per message of this server")
                try:
                    m["b"] = ring[0].read(ref[0], ref[1])
                except shm.ShmError as e:
                    raise DecodeError(str(e)) from None
                self.ring_bytes += ref[1]  # one stream per thread: a lost update is harmless

    def _insert_message(self, msg: Any, chunks: dict[int, Chunk],
                        context: grpc.ServicerContext) -> Iterator[int | None]:
        """Stores the request's rows and items; yields acks: how many more of its items (in
        request order) are in their tables, or None if the client left while we waited.

        Every item is validated before any is stored. Items go in in request order, and an
        item that must wait for its rate limiter is preceded by an ack for those before it, so
        a writer's ``flush(block_until_num_items=n)`` and back-pressure mean the same as
        embedded (a request is not confirmed only as a whole)."""
        if not isinstance(msg, dict):
            raise DecodeError("insert request must be a map")
        keep = msg.get("keep", [])
        if not isinstance(keep, list) or not all(type(k) is int for k in keep):
            raise DecodeError("field 'keep' must be a list of chunk keys")
        retried = msg.get("r", [])
        if not isinstance(retried, list):
            raise DecodeError("field 'r' must be a list of item positions")
        segs = msg.get("seg", [])
        if not isinstance(segs, list):
            raise DecodeError("field 'seg' must be a list of segments")
        for m in segs:
            seg = codec.to_raw(codec.parse_segment(m, self._max_bytes), self._max_bytes)
            c = chunks.get(seg.key)
            if c is None:
                c = Chunk(seg.key, SegmentedRows(seg.dtype, seg.row_shape), seg.episode_id, nbytes=0,
                          spec=(seg.dtype, seg.row_shape))
                chunks[seg.key] = c
            c.data.add(seg)
            c.nbytes += len(seg.payload)
        tables = msg.get("t", [])
        if not isinstance(tables, list):
            raise DecodeError("field 't' must be a list of table names")
        table_objs = [self._table(name) for name in tables]
        retried_set = set(retried)
        work: list[tuple[int, Any]] = []  # (table index, item), or (-1, None) if already stored
        items_in = msg.get("i", [])
        if not isinstance(items_in, list):
            raise DecodeError("field 'i' must be a list of items")
        for pos, it in enumerate(items_in):
            if not isinstance(it, list) or len(it) != 5:
                raise DecodeError("an item must be [table, key, priority, columns, squeeze]")
            ti, key, prio, cols, sq = it
            if not isinstance(ti, int) or not 0 <= ti < len(table_objs):
                raise DecodeError(f"item names table index {ti!r} of {len(table_objs)}")
            key = codec.u64(key, "item key")
            if not isinstance(prio, (int, float)) or isinstance(prio, bool):
                raise DecodeError(f"priority must be a number, got {prio!r}")
            packed, squeeze = self._item_columns(cols, sq, chunks)
            self._check_signature(table_objs[ti], packed, squeeze)
            if pos in retried_set and table_objs[ti].contains(key):
                work.append((-1, None))  # a resend of an item stored before the connection broke
                continue
            table_objs[ti].validate_priority(float(prio))
            work.append((ti, (key, float(prio), packed, squeeze)))
        n = acked = 0
        i = 0
        while i < len(work):
            ti = work[i][0]
            if ti < 0:
                n += 1
                i += 1
                continue
            j = i + 1
            while j < len(work) and work[j][0] == ti:  # a run of items for one table
                j += 1
            rest = [w[1] for w in work[i:j]]
            table = table_objs[ti]
            wait = 0.0  # first without waiting: what is admitted now is acked before we wait
            while rest:
                try:
                    table.insert_many(rest, Deadline.after(wait), assign=False)
                    n += len(rest)
                    rest = []
                except errors.RateLimiterTimeout as e:
                    done = len(getattr(e, "inserted", ()))
                    n += done
                    rest = rest[done:]
                    if n > acked:
                        yield n - acked
                        acked = n
                    if not context.is_active():
                        yield None
                        return
                    wait = _WAIT_SLICE
            i = j
        keep_set = set(keep)
        for k in [k for k in chunks if k not in keep_set]:
            del chunks[k]
        if n > acked:
            yield n - acked

    def _item_columns(self, cols: Any, sq: Any, chunks: dict[int, Chunk]) -> tuple[Any, tuple[bool, ...]]:
        if not isinstance(cols, list) or not cols or len(cols) > 100_000:
            raise DecodeError("an item needs a non-empty list of columns")
        if not isinstance(sq, list) or len(sq) != len(cols):
            raise DecodeError("an item needs one squeeze flag per column")
        columns = []
        for col in cols:
            if type(col) is list and len(col) == 3:  # fast path: one slice
                ck, off, ln = col
                c = chunks.get(ck) if type(ck) is int else None
                if c is not None and type(off) is int and type(ln) is int and off >= 0 \
                        and ln >= 1 and off + ln <= c.data.end:
                    columns.append(((c, off, ln),))
                    continue
            if not isinstance(col, list) or not col or len(col) % 3:
                raise DecodeError("a column is a flat list of (chunk key, offset, length) triples")
            slices = []
            for i in range(0, len(col), 3):
                ck, off, ln = col[i], col[i + 1], col[i + 2]
                c = chunks.get(ck) if isinstance(ck, int) else None
                if c is None:
                    raise DecodeError(f"item refers to chunk {ck!r}, which this stream did not send")
                if not isinstance(off, int) or not isinstance(ln, int) or off < 0 or ln < 1 \
                        or off + ln > c.data.end:
                    raise DecodeError(f"item refers to rows [{off}, {off}+{ln}) of chunk {ck}, "
                                      f"which has {c.data.end} rows")
                slices.append((c, off, ln))
            columns.append(slices)
        squeeze = items_lib.intern_squeeze(sq)
        for s, col in zip(squeeze, columns):
            if s and (len(col) != 1 or col[0][2] != 1):
                raise DecodeError("a squeezed column must hold exactly one row")
        if all(len(c) == 1 for c in columns):
            return tuple([x for c in columns for x in c[0]]), squeeze
        return items_lib.pack(columns), squeeze

    @staticmethod
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

    # -- sample ---------------------------------------------------------------------------------
    def sample(self, msg: Any, context: grpc.ServicerContext) -> dict:
        table = self._table(codec.req(msg, "t", str))
        n = codec.req(msg, "n", int)
        if not 1 <= n <= 1_000_000:
            raise DecodeError(f"num_samples ({n}) must be in [1, 1000000]")
        # Keep the reply under the message limit: items taken from a table and then not sent
        # would be lost (for a queue). The per-item size is learnt from earlier replies.
        per_item = max(self._item_bytes.get(table.name, 0.0), table.approx_item_bytes())
        n = max(1, min(n, int(self._max_bytes * 0.5 // max(per_item, 1.0))))
        gone = threading.Event()
        context.add_callback(lambda: (gone.set(), table.wake()))
        batch = self._wait_slices(
            lambda s: table.sample(n, s, cancelled=gone.is_set, linger=SAMPLE_LINGER_SECONDS),
            msg.get("to"), context)
        reply = encode_sample_batch(batch)
        size = sum(len(c["b"]) for c in reply.get("cols", ())) + sum(
            len(g["b"]) for g in reply.get("segs", ()))
        self._item_bytes[table.name] = max(size / max(len(batch), 1),
                                           0.5 * self._item_bytes.get(table.name, 0))
        return reply

    # -- the rest ---------------------------------------------------------------------------------
    def mutate(self, msg: Any, context: grpc.ServicerContext) -> dict:
        table = self._table(codec.req(msg, "t", str))
        deletes = msg.get("d")
        keys = msg.get("k")
        prios = msg.get("p")
        n_del = 0
        if deletes:
            n_del = table.delete(_u64_array(deletes, "d"))
        n_upd = 0
        if keys is not None:
            k = _u64_array(keys, "k")
            p = _f64_array(prios, "p")
            if len(k) != len(p):
                raise DecodeError("keys and priorities differ in length")
            n_upd = table.update_priorities(k, p)
        return {"deleted": n_del, "updated": n_upd}

    def reset(self, msg: Any, context: grpc.ServicerContext) -> dict:
        self._table(codec.req(msg, "t", str)).reset()
        return {}

    def server_info(self, msg: Any, context: grpc.ServicerContext) -> dict:
        return {"tables": [codec.encode_table_info(t.info)
                           for t in self._server.tables_by_name.values()]}

    def checkpoint(self, msg: Any, context: grpc.ServicerContext) -> dict:
        return {"path": self._server.checkpoint()}


def _u64_array(b: Any, what: str) -> np.ndarray:
    if not isinstance(b, bytes) or len(b) % 8:
        raise DecodeError(f"field {what!r} must be packed uint64 keys")
    return np.frombuffer(b, dtype="<u8")


def _f64_array(b: Any, what: str) -> np.ndarray:
    if not isinstance(b, bytes) or len(b) % 8:
        raise DecodeError(f"field {what!r} must be packed float64 values")
    return np.frombuffer(b, dtype="<f8").astype(np.float64)


def _encode_columnar(batch: items_lib.SampleBatch) -> list[dict] | None:
    """One payload per column holding the rows of all items, when the items are alike
    (same columns, lengths, dtypes and shapes; no strings), whether a column is one slice of
    a chunk or spans several chunks. Otherwise None."""
    trajs = batch.trajectories
    if batch.squeeze.count(batch.squeeze[0]) != len(trajs):
        return None
    per_item = [items_lib.columns(t) for t in trajs]
    ncols = len(per_item[0])
    if any(len(c) != ncols for c in per_item):
        return None
    out = []
    for ci in range(ncols):
        first = per_item[0][ci]
        spec = first[0][0].spec
        if spec is None or spec[0].kind == "O":
            return None
        n = sum(x[2] for x in first)
        parts = []
        for cols in per_item:
            total = 0
            for chunk, off, ln in cols[ci]:
                if chunk.spec is not spec and chunk.spec != spec:
                    return None
                parts.append(chunk_row_bytes(chunk, off, off + ln))
                total += ln
            if total != n:
                return None
        out.append({"d": codec.dtype_to_str(spec[0]), "h": list(spec[1]), "n": n,
                    "b": b"".join(parts)})
    return out


def encode_sample_batch(batch: items_lib.SampleBatch) -> dict:
    """Sampled items and their data.

    Alike items (the usual case) travel column by column: one payload per column with the rows
    of every item, which the client turns into the stacked batch with one ``frombuffer``.
    Other batches carry the row segments each item needs (each segment once).
    """
    head = {
        "keys": batch.keys.astype("<u8").tobytes(),
        "p": batch.probabilities.astype("<f8").tobytes(),
        "sz": batch.table_sizes.astype("<i8").tobytes(),
        "pr": batch.priorities.astype("<f8").tobytes(),
        "ts": batch.times_sampled.astype("<i4").tobytes(),
    }
    cols = _encode_columnar(batch) if batch.trajectories else None
    if cols is not None:
        head["cols"] = cols
        head["sq1"] = list(batch.squeeze[0])
        return head
    head.update(_encode_segments(batch))
    return head


def _encode_segments(batch: items_lib.SampleBatch) -> dict:
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
                    for seg, local, n in data.covering(off, ln):
                        idx = seg_index.get(id(seg))
                        if idx is None:
                            idx = seg_index[id(seg)] = len(segs)
                            segs.append(seg.raw)
                        flat += (idx, local, n)
                else:  # written in-process: encode just the rows needed
                    seg = codec.make_segment(chunk.key, chunk.episode_id, off, data[off:off + ln],
                                             compress=True)
                    flat += (len(segs), 0, ln)
                    segs.append(seg)
            cols.append(flat)
        items.append(cols)
    return {"items": items, "sq": [list(s) for s in batch.squeeze], "segs": segs}


def _raise_if_bad_tls(tls: Any) -> None:
    problem = tls.problem() if tls is not None else None
    if problem:
        raise ValueError(f"tls: {problem}")


def start_grpc_server(server: Any, host: str, port: int, *, token: str | None,
                      tls: Any, max_message_bytes: int, max_workers: int,
                      shared_memory: bool = True) -> tuple[grpc.Server, int, ReplayService]:
    """Starts serving; returns (grpc server, bound port, service). Raises ValueError if the
    port cannot be bound."""
    service = ReplayService(server, token=token, max_message_bytes=max_message_bytes,
                            shared_memory=shared_memory)
    options = [
        ("grpc.so_reuseport", 0),  # a port in use is an error, not silently shared
        ("grpc.keepalive_time_ms", 10_000),
        ("grpc.keepalive_timeout_ms", 5_000),
        ("grpc.keepalive_permit_without_calls", 1),
        ("grpc.http2.min_ping_interval_without_data_ms", 1_000),
        ("grpc.http2.min_time_between_pings_ms", 1_000),
        ("grpc.http2.max_pings_without_data", 0),
        ("grpc.max_receive_message_length", max_message_bytes),
        ("grpc.max_send_message_length", max_message_bytes),
    ]
    executor = futures.ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="ostinato-rpc")
    gs = grpc.server(executor, options=options, maximum_concurrent_rpcs=None)
    service.executor = executor
    gs.add_generic_rpc_handlers((service.generic_handler(),))
    target = f"{host}:{port}"
    try:
        if tls is not None:
            creds = grpc.ssl_server_credentials([(tls.private_key, tls.certificate_chain)])
            bound = gs.add_secure_port(target, creds)
        else:
            bound = gs.add_insecure_port(target)
    except RuntimeError as e:
        _raise_if_bad_tls(tls)
        raise ValueError(f"port ({port}) could not be bound on {host}: {e}") from None
    if not bound:
        _raise_if_bad_tls(tls)
        raise ValueError(f"port ({port}) is already in use or cannot be bound on {host}")
    gs.start()
    return gs, bound, service

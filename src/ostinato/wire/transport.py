"""The gRPC transport: a client's side of the ``ostinato.Replay`` service."""

from __future__ import annotations

import dataclasses
import logging
import random
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import grpc
import numpy as np

from ostinato import errors
from ostinato.core import items as items_lib
from ostinato.core.chunks import Chunk
from ostinato.core.deadline import Deadline
from ostinato.core.signature import flatten_signature
from ostinato.core.table_info import TableInfo
from ostinato.transport import registry
from ostinato.transport.base import TableMeta, Transport
from ostinato.wire import codec, shm
from ostinato.wire.service import DEFAULT_MAX_MESSAGE_BYTES, SERVICE
from ostinato.wire.status import from_rpc_error, shm_refusal

_log = logging.getLogger(__name__)

#: Items a writer stream may have sent but not had confirmed, before it stops taking more.
DEFAULT_MAX_IN_FLIGHT_ITEMS = 4096
#: Requests a writer stream may have sent but not had acknowledged. Items created while two
#: requests are in flight wait and go out together in the next one: fewer, larger messages
#: (the cost of a gRPC message in Python is ~100 us) while the server always has the next one.
DEFAULT_MAX_IN_FLIGHT_REQUESTS = 2
_QUICK_CALLS = frozenset({"Mutate", "Reset", "ServerInfo"})
#: A writer stream with nothing to send or confirm for this long is closed (reopened on demand).
IDLE_CLOSE_SECONDS = 2.0
#: A request is cut when the rows it carries reach this many bytes (without shared memory).
MAX_REQUEST_BYTES = 16 * 1024 * 1024


@dataclasses.dataclass(frozen=True)
class ClientOptions:
    """How a client reaches a server over the network.

    Attributes:
      root_certificates: PEM root certificates; set to use TLS.
      token: shared secret sent with every call (``authorization: Bearer <token>``).
      compression: ``"zstd"`` (compress segments where it pays) or ``"none"``.
      unavailable_timeout: seconds to keep retrying (with backoff) while the server cannot be
        reached before raising :class:`~ostinato.errors.UnavailableError`.
      max_message_bytes: largest message sent or received.
      max_in_flight_items: unconfirmed items per writer before writers block.
      max_in_flight_requests: insert requests per writer awaiting the server's ack; items
        created meanwhile are batched into the next request.
      shared_memory: pass large rows through a shared-memory ring (:mod:`ostinato.wire.shm`):
        ``None`` when the address is on this machine, ``True`` always try, ``False`` never.
      shared_memory_bytes: size of each writer stream's ring.
    """

    root_certificates: bytes | None = None
    token: str | None = None
    compression: str = "zstd"
    unavailable_timeout: float = 30.0
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES
    max_in_flight_items: int = DEFAULT_MAX_IN_FLIGHT_ITEMS
    max_in_flight_requests: int = DEFAULT_MAX_IN_FLIGHT_REQUESTS
    tls_server_name: str | None = None
    shared_memory: bool | None = None
    shared_memory_bytes: int = shm.DEFAULT_RING_BYTES

    def __post_init__(self) -> None:
        if self.compression not in ("zstd", "none"):
            raise ValueError(f"compression ({self.compression!r}) must be 'zstd' or 'none'")
        if self.unavailable_timeout < 0:
            raise ValueError(f"unavailable_timeout ({self.unavailable_timeout}) must be >= 0")
        if self.shared_memory not in (None, True, False):
            raise ValueError(f"shared_memory ({self.shared_memory!r}) must be None, True or False")
        if isinstance(self.shared_memory_bytes, bool) or not isinstance(self.shared_memory_bytes, int) \
                or not 1 << 20 <= self.shared_memory_bytes <= shm.MAX_RING_BYTES:
            raise ValueError(f"shared_memory_bytes ({self.shared_memory_bytes!r}) must be an "
                             f"integer from {1 << 20} to {shm.MAX_RING_BYTES}")
        for name in ("max_in_flight_items", "max_in_flight_requests"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} ({v!r}) must be a positive integer")


class GrpcTransport(Transport):
    """Client side of the gRPC service. Thread-safe."""

    def __init__(self, address: str, options: ClientOptions | None = None):
        self.address = address
        self.options = options or ClientOptions()
        o = self.options
        chan_opts = [
            ("grpc.max_receive_message_length", o.max_message_bytes),
            ("grpc.max_send_message_length", o.max_message_bytes),
            ("grpc.initial_reconnect_backoff_ms", 100),
            ("grpc.max_reconnect_backoff_ms", 2000),
            ("grpc.enable_retries", 0),
            # Detect a server that stops answering (frozen, or a dead network path).
            ("grpc.keepalive_time_ms", 2_000),
            ("grpc.keepalive_timeout_ms", 2_000),
            ("grpc.keepalive_permit_without_calls", 1),
            ("grpc.http2.max_pings_without_data", 0),
        ]
        if o.root_certificates is not None:
            if o.tls_server_name:
                chan_opts.append(("grpc.ssl_target_name_override", o.tls_server_name))
            creds = grpc.ssl_channel_credentials(root_certificates=o.root_certificates)
            self._channel = grpc.secure_channel(address, creds, options=chan_opts)
        else:
            self._channel = grpc.insecure_channel(address, options=chan_opts)
        self._metadata = (("authorization", f"Bearer {o.token}"),) if o.token else ()
        ident = None
        self._calls = {name: self._channel.unary_unary(f"/{SERVICE}/{name}", ident, ident)
                       for name in ("Sample", "Mutate", "Reset", "ServerInfo", "Checkpoint")}
        self._insert = self._channel.stream_stream(f"/{SERVICE}/Insert", ident, ident)
        self._meta: dict[str, TableMeta] = {}
        self._closed = False
        want = o.shared_memory
        #: Whether writer streams offer the server a shared-memory ring (cleared, with the
        #: reason in ``shm_refused``, when a server or this machine refuses one).
        self.use_shm = shm.available() and (want is True or (want is None and registry.is_loopback(address)))
        self.shm_refused: str | None = None

    # -- unary calls with retry on UNAVAILABLE ---------------------------------------------------
    def _call(self, name: str, msg: dict, deadline: Deadline) -> Any:
        payload = codec.pack(msg)
        if len(payload) > self.options.max_message_bytes:
            raise errors.InvalidArgumentError(
                f"{name} request of {len(payload)} bytes exceeds max_message_bytes "
                f"({self.options.max_message_bytes})")
        give_up = Deadline.after(self.options.unavailable_timeout)
        # Control calls answer in milliseconds; without a deadline of their own they get one,
        # so that a server that stops answering (frozen, unreachable) cannot hang them.
        implicit = deadline.is_never and name in _QUICK_CALLS
        if implicit:
            deadline = Deadline.after(max(self.options.unavailable_timeout, 1.0))
        backoff = 0.05
        while True:
            r = deadline.remaining()
            try:
                raw = self._calls[name](payload, timeout=r, metadata=self._metadata,
                                        wait_for_ready=False)
                return codec.unpack(raw)
            except grpc.RpcError as e:
                err = from_rpc_error(e, self.address)
                if implicit and isinstance(err, errors.DeadlineExceededError):
                    raise errors.UnavailableError(
                        f"Server at {self.address} did not answer {name} within "
                        f"{max(self.options.unavailable_timeout, 1.0):g} s", self.address) from None
                if not isinstance(err, errors.UnavailableError) or self._closed:
                    raise err from None
                if give_up.expired() or deadline.expired():
                    raise err from None
                wait = min(backoff, give_up.remaining() or backoff)
                if r is not None:
                    wait = min(wait, deadline.remaining() or 0)
                time.sleep(wait * (0.5 + random.random() / 2))
                backoff = min(backoff * 2, 1.0)

    def server_info(self, deadline: Deadline) -> dict[str, TableInfo]:
        resp = self._call("ServerInfo", {}, deadline)
        infos = [codec.decode_table_info(m) for m in resp.get("tables", [])]
        out = {i.name: i for i in infos}
        for i in infos:
            self._meta[i.name] = _meta_from_info(i)
        return out

    def table_meta(self, table: str) -> TableMeta:
        meta = self._meta.get(table)
        if meta is None:
            try:
                infos = self.server_info(Deadline.after(max(self.options.unavailable_timeout, 1.0)))
            except errors.DeadlineExceededError:
                raise errors.UnavailableError(
                    f"Server at {self.address} did not answer within "
                    f"{max(self.options.unavailable_timeout, 1.0):g} s", self.address) from None
            meta = self._meta.get(table)
            if meta is None:
                raise errors.TableNotFoundError(table, list(infos))
        return meta

    def sample(self, table: str, num_samples: int, deadline: Deadline) -> items_lib.SampleBatch:
        r = deadline.remaining()
        msg = {"t": table, "n": int(num_samples), "to": None if r is None else int(r * 1000)}
        # The server enforces the rate-limiter deadline; the RPC deadline adds slack for the trip.
        resp = self._call("Sample", msg, Deadline.never() if r is None else Deadline.after(r + 5))
        return decode_sample_batch(resp)

    def update_priorities(self, table: str, keys: Any, priorities: np.ndarray,
                          deadline: Deadline) -> int:
        k = _keys_array(keys)
        p = np.asarray(priorities, dtype="<f8").reshape(-1)
        if len(k) != len(p):
            raise errors.InvalidArgumentError(
                f"keys ({len(k)}) and priorities ({len(p)}) must have the same length")
        resp = self._call("Mutate", {"t": table, "k": k.tobytes(), "p": p.tobytes()}, deadline)
        return int(resp.get("updated", 0))

    def delete(self, table: str, keys: Any, deadline: Deadline) -> int:
        resp = self._call("Mutate", {"t": table, "d": _keys_array(keys).tobytes()}, deadline)
        return int(resp.get("deleted", 0))

    def mutate_priorities(self, table: str, updates: dict[int, float] | None,
                          deletes: Sequence[int] | None, deadline: Deadline) -> None:
        msg: dict[str, Any] = {"t": table}
        if deletes:
            msg["d"] = _keys_array(list(deletes)).tobytes()
        if updates:
            msg["k"] = _keys_array(list(updates.keys())).tobytes()
            msg["p"] = np.fromiter(updates.values(), dtype="<f8", count=len(updates)).tobytes()
        self._call("Mutate", msg, deadline)

    def reset(self, table: str, deadline: Deadline) -> None:
        self._call("Reset", {"t": table}, deadline)

    def checkpoint(self, deadline: Deadline) -> str:
        return str(self._call("Checkpoint", {}, deadline)["path"])

    # -- inserts ----------------------------------------------------------------------------------
    def writer_stream(self, keep_keys: Callable[[], set[int]] | None = None,
                      max_pending: int | None = None) -> GrpcWriterStream:
        return GrpcWriterStream(self, keep_keys, max_pending)

    def insert(self, table: str, items: Sequence[tuple[Any, ...]], deadline: Deadline) -> None:
        stream = self.writer_stream()
        try:
            stream.insert(table, items, deadline)
            stream.wait(0, deadline, what="insert")
        finally:
            stream.close()

    def close(self) -> None:
        self._closed = True
        self._channel.close()


class _RingRefused(errors.ReverbError):
    """The server would not map a writer's ring; its items are resent with inline rows."""


def _keys_array(keys: Any) -> np.ndarray:
    if isinstance(keys, np.ndarray):
        if keys.dtype.kind not in "ui":
            raise errors.InvalidArgumentError(f"keys must be integers, got an array of {keys.dtype}")
        return keys.astype("<u8").reshape(-1)
    try:
        return np.array([int(k) for k in keys], dtype="<u8")
    except (TypeError, ValueError, OverflowError):
        raise errors.InvalidArgumentError(f"keys ({keys!r}) must be unsigned 64-bit integers") from None


def _meta_from_info(i: TableInfo) -> TableMeta:
    prio = "prioritized" in (i.sampler_options.WhichOneof("distribution"),
                             i.remover_options.WhichOneof("distribution"))
    return TableMeta(i.name, flatten_signature(i.signature), i.signature, prio,
                     i.max_times_sampled, i.sampler_options.is_deterministic)


def decode_sample_batch(resp: Any) -> items_lib.SampleBatch:
    try:
        keys = np.frombuffer(resp["keys"], "<u8").astype(np.uint64)
        n = len(keys)
        probs = np.frombuffer(resp["p"], "<f8").astype(np.float64)
        sizes = np.frombuffer(resp["sz"], "<i8").astype(np.int64)
        prios = np.frombuffer(resp["pr"], "<f8").astype(np.float64)
        times = np.frombuffer(resp["ts"], "<i4").astype(np.int32)
        if not len(probs) == len(sizes) == len(prios) == len(times) == n:
            raise codec.DecodeError("sample response fields differ in length")
        if "cols" in resp:
            sq = items_lib.intern_squeeze(resp["sq1"])
            columns = []
            for col, s in zip(resp["cols"], sq):
                dtype = codec.dtype_from_str(col["d"])
                shape = codec.shape_from_wire(col["h"])
                ln = int(col["n"])
                arr = np.frombuffer(col["b"], dtype=dtype.newbyteorder("<"))
                arr = arr.reshape((n, *shape) if s else (n, ln, *shape))
                columns.append(arr.astype(dtype.newbyteorder("="), copy=False))
            return items_lib.SampleBatch(keys, probs, sizes, prios, times, [], [sq] * n,
                                         columns=columns)
        if len(resp["items"]) != n:
            raise codec.DecodeError("sample response fields differ in length")
        chunks = []
        for m in resp["segs"]:
            seg = codec.parse_segment(m, 2**62)
            arr = seg.decode()
            arr.flags.writeable = False
            chunks.append(Chunk(seg.key, arr, seg.episode_id, spec=(seg.dtype, seg.row_shape)))
        trajs = []
        for cols in resp["items"]:
            columns = []
            for flat in cols:
                columns.append([(chunks[flat[j]], flat[j + 1], flat[j + 2])
                                for j in range(0, len(flat), 3)])
            trajs.append(items_lib.pack(columns))
        squeeze = [items_lib.intern_squeeze(s) for s in resp["sq"]]
    except (KeyError, IndexError, TypeError) as e:
        raise errors.ReverbError(f"malformed sample response: {e}") from None
    return items_lib.SampleBatch(keys, probs, sizes, prios, times, trajs, squeeze)


class GrpcWriterStream:
    """Sends a writer's items (and the rows they need, each row once) over one Insert stream.

    Items are batched: everything created since the last request goes in the next one. At most
    ``max_in_flight_items`` may be unconfirmed; beyond that ``try_insert`` refuses and
    ``insert`` blocks, so a writer that runs ahead of the server waits instead of growing
    without bound. If the server becomes unreachable the stream reconnects with backoff and
    resends unconfirmed items; after ``unavailable_timeout`` it fails with UnavailableError.
    """

    def __init__(self, transport: GrpcTransport, keep_keys: Callable[[], set[int]] | None,
                 max_pending: int | None = None):
        self._t = transport
        self._keep_keys = keep_keys or (lambda: set())
        self._max = transport.options.max_in_flight_items if max_pending is None else max_pending
        self._max_requests = transport.options.max_in_flight_requests
        self._compress = transport.options.compression == "zstd"
        self._cv = threading.Condition()
        self._buf: deque[tuple[str, tuple[Any, ...]]] = deque()
        self._in_flight: deque[list[tuple[str, tuple[Any, ...]]]] = deque()
        self._n_in_flight = 0
        self._sent_rows: dict[int, int] = {}
        self._error: BaseException | None = None
        self._closed = False
        self._thread: threading.Thread | None = None
        self._stream_error: BaseException | None = None
        self._idle_closed = False
        self._call_obj: Any = None
        self._retry_keys: set[int] = set()
        self._ring: shm.Ring | None = None  # this call's shared-memory ring, made on demand
        self._ring_described = False
        self._ring_cost: deque[int] = deque()  # ring bytes held by each request in flight
        self._n_encoding = 0  # items of the batch the request generator is encoding
        self._send_error: BaseException | None = None

    # -- API used by writers -------------------------------------------------------------------
    def pending(self) -> int:
        # Items being encoded count too: a flush must not see them as confirmed.
        return len(self._buf) + self._n_encoding + self._n_in_flight

    def insert(self, table: str, items: Sequence[tuple[Any, ...]], deadline: Deadline) -> None:
        with self._cv:
            while self.pending() + len(items) > self._max and self.pending() > 0:
                self._raise_error()
                r = deadline.remaining()
                if r is not None and r <= 0:
                    raise errors.RateLimiterTimeout(
                        f"{self.pending()} items are waiting for the server at {self._t.address} "
                        "to accept them (its rate limiter or the network is slower than the writer).")
                self._cv.wait(0.2 if r is None else min(r, 0.2))
            self._raise_error()
            self._add(table, items)

    def wait(self, n: int, deadline: Deadline, what: str = "flush") -> None:
        with self._cv:
            while self.pending() > n:
                self._raise_error()
                r = deadline.remaining()
                if r is not None and r <= 0:
                    raise errors.DeadlineExceededError(
                        f"{what}: {self.pending()} items not yet confirmed by the server at "
                        f"{self._t.address}.")
                self._cv.wait(0.2 if r is None else min(r, 0.2))
            self._raise_error()

    def close(self) -> int:
        with self._cv:
            self._closed = True
            dropped = len(self._buf)  # never sent (what is in flight may have been stored)
            self._cv.notify_all()
            call = self._call_obj
        if call is not None:
            call.cancel()
        th = self._thread
        if th is not None:
            th.join(timeout=5)
        return dropped

    # -- internals ------------------------------------------------------------------------------
    def _raise_error(self) -> None:
        if self._error is not None:
            raise self._error

    def _add(self, table: str, items: Sequence[tuple[Any, ...]]) -> None:
        was_empty = not self._buf
        for it in items:
            self._buf.append((table, it))
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="ostinato-insert", daemon=True)
            self._thread.start()
        if was_empty:
            # Only the send loop waits for queued items, and only while the queue is empty:
            # waking it for every item would cost a thread switch per item.
            self._cv.notify_all()

    def _run(self) -> None:
        try:
            self._run_calls()
        finally:
            self._drop_ring()

    def _drop_ring(self) -> None:
        ring, self._ring = self._ring, None
        self._ring_described = False
        if ring is not None:
            ring.close()

    def _run_calls(self) -> None:
        give_up: Deadline | None = None
        backoff = 0.05
        while True:
            with self._cv:
                if self._closed and not self._buf and not self._in_flight:
                    self._thread = None
                    return
                if self._closed:
                    self._thread = None
                    return
            stop = threading.Event()
            self._drop_ring()  # a new call gets a new ring (the server unlinked the old one)
            try:
                call = self._t._insert(self._requests(stop), metadata=self._t._metadata)
                self._call_obj = call
                try:
                    self._read(call, stop)  # until the server ends the call
                finally:
                    self._quiesce(stop)
                err = self._send_error or self._stream_error
                self._stream_error = self._send_error = None
                if err is None and self._idle_closed:
                    with self._cv:
                        self._idle_closed = False
                        self._sent_rows.clear()  # the server forgot this stream's chunks
                        if not self._buf:
                            self._thread = None
                            return
                    continue
                if err is None:
                    if self._closed:
                        with self._cv:
                            self._thread = None
                        return
                    # The server ended the stream: reconnect and resend what is unconfirmed.
                    err = errors.UnavailableError(
                        f"insert stream to {self._t.address} ended", self._t.address)
                raise err
            except grpc.RpcError as e:
                err2 = from_rpc_error(e, self._t.address)
            except errors.ReverbError as e:
                err2 = e
            except Exception as e:  # noqa: BLE001
                err2 = errors.ReverbError(f"writer stream failed: {e}")
            stop.set()
            if isinstance(err2, _RingRefused) and not self._closed:
                self._requeue_in_flight()  # at once, with the rows inline this time
                continue
            if isinstance(err2, errors.UnavailableError) and not self._closed:
                give_up = give_up or Deadline.after(self._t.options.unavailable_timeout)
                if not give_up.expired():
                    self._requeue_in_flight()
                    time.sleep(backoff * (0.5 + random.random() / 2))
                    backoff = min(backoff * 2, 1.0)
                    continue
            with self._cv:
                self._error = err2
                self._thread = None
                self._cv.notify_all()
            return

    def _requeue_in_flight(self) -> None:
        """Puts the unconfirmed items back in front of the queue, to be resent with all their
        rows on the next call."""
        with self._cv:
            for batch in reversed(self._in_flight):
                # The server may have stored some before the break: it skips resent items
                # whose key it already has.
                self._retry_keys.update(it[1][0] for it in batch)
                self._buf.extendleft(reversed(batch))
            self._in_flight.clear()
            self._ring_cost.clear()
            self._n_in_flight = 0
            self._sent_rows.clear()

    def _requests(self, stop: threading.Event) -> Iterator[bytes]:
        """The call's requests, made as gRPC asks for them (in gRPC's request thread).

        A request is made when there are items to send and fewer than
        ``max_in_flight_requests`` requests await their acks: items created meanwhile wait and
        go out together. Encoding here rather than in a thread of our own saves one thread
        hand-off per round trip (what limits writers that flush after every item)."""
        idle_since: float | None = None
        while True:
            with self._cv:
                while (not self._buf or len(self._in_flight) >= self._max_requests) \
                        and not self._closed and not stop.is_set():
                    if self._n_in_flight == 0:
                        now = time.monotonic()
                        idle_since = idle_since or now
                        if now - idle_since > IDLE_CLOSE_SECONDS:
                            # Nothing to do for a while: end the stream (and its threads); the
                            # next item opens a new one and resends whatever rows it needs.
                            self._idle_closed = True
                            stop.set()
                            self._cv.notify_all()
                            return
                    self._cv.wait(0.2)
                idle_since = None
                if stop.is_set():
                    return
                if self._closed and not self._buf:
                    return  # ends the request stream; the server then ends the call
                batch = []
                while self._buf:
                    batch.append(self._buf.popleft())
                    if len(batch) >= 4096:
                        break
                self._n_encoding = len(batch)
            try:
                msg, ring_cost = self._encode(batch)
            except BaseException as e:  # noqa: BLE001 - reported by the thread reading acks
                with self._cv:
                    self._n_encoding = 0
                    self._send_error = e if isinstance(e, errors.ReverbError) else \
                        errors.ReverbError(f"writer stream failed: {e!r}")
                    self._error = self._send_error  # before a waiter can see nothing pending
                    stop.set()
                    self._cv.notify_all()
                call = self._call_obj
                if call is not None:
                    call.cancel()
                return
            with self._cv:
                self._n_encoding = 0
                if stop.is_set():  # the call ended meanwhile: the items go out on the next one
                    self._buf.extendleft(reversed(batch))
                    self._cv.notify_all()
                    return
                self._in_flight.append(batch)
                self._ring_cost.append(ring_cost)
                self._n_in_flight += len(batch)
            yield msg

    def _quiesce(self, stop: threading.Event) -> None:
        """Stops the call's request generator and waits until it is not encoding, so that the
        stream's state (rows sent, requests in flight) can be reset safely."""
        with self._cv:
            stop.set()
            self._cv.notify_all()
            while self._n_encoding:
                self._cv.wait(0.05)

    def _ring_for(self, nbytes: int) -> shm.Ring | None:
        """This call's ring if rows of ``nbytes`` should go through one (made on first use)."""
        if nbytes < shm.MIN_SEGMENT_BYTES or not self._t.use_shm:
            return None
        if self._ring is None:
            try:
                self._ring = shm.Ring(self._t.options.shared_memory_bytes)
            except shm.ShmError as e:
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
            return codec.make_segment(chunk.key, chunk.episode_id, start, rows, False,
                                      ring_ref=[put[0], rows.nbytes]), put[1]
        return codec.make_segment(chunk.key, chunk.episode_id, start, rows, self._compress), 0

    def _encode(self, batch: list[tuple[str, tuple[Any, ...]]]) -> tuple[bytes, int]:
        """The request for ``batch`` and the ring bytes it holds until acknowledged.

        A request is cut once the rows it carries reach :data:`MAX_REQUEST_BYTES` (a third of
        the ring with shared memory, so that the requests in flight fit in it): ``batch`` is
        truncated in place and its remaining items go back to the front of the queue."""
        tables: dict[str, int] = {}
        items = []
        need: dict[int, tuple[Chunk, int]] = {}
        sq_cache: dict[int, list[bool]] = {}
        retry = self._retry_keys
        retried: list[int] = []
        sent_rows = self._sent_rows
        new_bytes = 0
        limit = self._t.options.shared_memory_bytes // 3 if self._t.use_shm else MAX_REQUEST_BYTES
        for pos, (table, (key, prio, packed, squeeze)) in enumerate(batch):
            if new_bytes >= limit:
                rest = batch[pos:]
                del batch[pos:]
                with self._cv:
                    self._buf.extendleft(reversed(rest))
                break
            ti = tables.get(table)
            if ti is None:
                ti = tables[table] = len(tables)
            cols = []
            if type(packed[0]) is Chunk:  # one slice per column: the common case
                for i in range(0, len(packed), 3):
                    chunk = packed[i]
                    ck = chunk.key
                    off = packed[i + 1]
                    end = off + packed[i + 2]
                    cols.append([ck, off, packed[i + 2]])
                    prev = need.get(ck)
                    if prev is None or prev[1] < end:
                        base = sent_rows.get(ck, 0) if prev is None else prev[1]
                        if end > base:
                            new_bytes += (end - base) * chunk.data.strides[0]
                        need[ck] = (chunk, end)
            else:
                for col in packed:
                    flat: list[int] = []
                    for chunk, off, ln in col:
                        flat += (chunk.key, off, ln)
                        end = off + ln
                        prev = need.get(chunk.key)
                        if prev is None or prev[1] < end:
                            base = sent_rows.get(chunk.key, 0) if prev is None else prev[1]
                            if end > base:
                                new_bytes += (end - base) * chunk.data.strides[0]
                            need[chunk.key] = (chunk, end)
                    cols.append(flat)
            sq = sq_cache.get(id(squeeze))
            if sq is None:
                sq = sq_cache[id(squeeze)] = [bool(x) for x in squeeze]
            if retry and key in retry:
                retried.append(len(items))
                retry.discard(key)
            items.append([ti, key, prio, cols, sq])
        segs = []
        ring_cost = 0
        for ck, (chunk, end) in need.items():
            sent = self._sent_rows.get(ck, 0)
            if end > sent:
                seg, cost = self._segment(chunk, sent, end)
                segs.append(seg)
                ring_cost += cost
                self._sent_rows[ck] = end
        keep = self._keep_keys()
        with self._cv:
            for _, (_, _, packed, _) in self._buf:
                keep.update(c.key for c in items_lib.chunk_refs(packed))
        for ck in [k for k in self._sent_rows if k not in keep]:
            del self._sent_rows[ck]
        body = {"seg": segs, "t": list(tables), "i": items,
                "keep": [k for k in keep if k in self._sent_rows]}
        if retried:
            body["r"] = retried
        if self._ring is not None and not self._ring_described:
            body["shm"] = self._ring.descriptor()
            self._ring_described = True
        msg = codec.pack_framed(body)
        if len(msg) > self._t.options.max_message_bytes:
            raise errors.InvalidArgumentError(
                f"an insert request of {len(msg)} bytes exceeds max_message_bytes "
                f"({self._t.options.max_message_bytes}); lower the writer's batch or raise the limit")
        return msg, ring_cost

    def _read(self, call: Any, stop: threading.Event) -> None:
        try:
            for raw in call:
                resp = codec.unpack(raw)
                n = int(resp.get("n", 0))
                ring = self._ring
                with self._cv:
                    while n > 0 and self._in_flight:
                        b = self._in_flight[0]
                        if len(b) <= n:
                            self._in_flight.popleft()
                            cost = self._ring_cost.popleft() if self._ring_cost else 0
                            if cost and ring is not None:
                                ring.release(cost)
                            n -= len(b)
                            self._n_in_flight -= len(b)
                        else:
                            del b[:n]
                            self._n_in_flight -= n
                            n = 0
                    self._cv.notify_all()
            self._stream_error = None
        except grpc.RpcError as e:
            reason = shm_refusal(e)
            if reason is not None:
                self._t.use_shm = False
                self._t.shm_refused = reason
                _log.info("server %s refused a shared-memory ring (%s); sending rows inline",
                          self._t.address, reason)
                self._stream_error = _RingRefused(reason)
            elif not stop.is_set() or self._in_flight:
                self._stream_error = from_rpc_error(e, self._t.address)
        except Exception as e:  # noqa: BLE001
            self._stream_error = errors.ReverbError(f"bad reply on insert stream: {e}")
        finally:
            stop.set()
            with self._cv:
                self._cv.notify_all()

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
from ostinato.core.chunk_store import Chunk
from ostinato.core.deadline import Deadline
from ostinato.core.signature import flatten_signature
from ostinato.transport.base import TableMeta, Transport
from ostinato.types import TableInfo
from ostinato.wire import codec
from ostinato.wire.service import DEFAULT_MAX_MESSAGE_BYTES, SERVICE
from ostinato.wire.status import from_rpc_error

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
#: A request is cut when its segments reach this many bytes.
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
    """

    root_certificates: bytes | None = None
    token: str | None = None
    compression: str = "zstd"
    unavailable_timeout: float = 30.0
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES
    max_in_flight_items: int = DEFAULT_MAX_IN_FLIGHT_ITEMS
    max_in_flight_requests: int = DEFAULT_MAX_IN_FLIGHT_REQUESTS
    tls_server_name: str | None = None

    def __post_init__(self) -> None:
        if self.compression not in ("zstd", "none"):
            raise ValueError(f"compression ({self.compression!r}) must be 'zstd' or 'none'")
        if self.unavailable_timeout < 0:
            raise ValueError(f"unavailable_timeout ({self.unavailable_timeout}) must be >= 0")
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
    def writer_stream(self, keep_keys: Callable[[], set[int]] | None = None) -> GrpcWriterStream:
        return GrpcWriterStream(self, keep_keys)

    def try_insert(self, table: str, items: Sequence[tuple[Any, ...]]) -> int:
        self.insert(table, items, Deadline.after(0))
        return len(items)

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
                dtype = codec.dtype_from_wire(col["d"])
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

    def __init__(self, transport: GrpcTransport, keep_keys: Callable[[], set[int]] | None):
        self._t = transport
        self._keep_keys = keep_keys or (lambda: set())
        self._max = transport.options.max_in_flight_items
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

    # -- API used by writers -------------------------------------------------------------------
    def pending(self) -> int:
        return len(self._buf) + self._n_in_flight

    def try_insert(self, table: str, items: Sequence[tuple[Any, ...]]) -> int:
        with self._cv:
            self._raise_error()
            if self.pending() + len(items) > self._max and self.pending() > 0:
                return 0
            self._add(table, items)
        return len(items)

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

    def close(self) -> None:
        with self._cv:
            self._closed = True
            self._cv.notify_all()
            call = self._call_obj
        if call is not None:
            call.cancel()
        th = self._thread
        if th is not None:
            th.join(timeout=5)

    # -- internals ------------------------------------------------------------------------------
    def _raise_error(self) -> None:
        if self._error is not None:
            raise self._error

    def _add(self, table: str, items: Sequence[tuple[Any, ...]]) -> None:
        for it in items:
            self._buf.append((table, it))
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="ostinato-insert", daemon=True)
            self._thread.start()
        self._cv.notify_all()

    def _requests(self, out: deque, stop: threading.Event) -> Iterator[bytes]:
        """Feeds the gRPC call from the sender loop."""
        while True:
            with self._cv:
                while not out and not stop.is_set() and not self._closed:
                    self._cv.wait(0.2)
                if not out:
                    return
                msg = out.popleft()
            yield msg

    def _run(self) -> None:
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
            out: deque = deque()
            try:
                call = self._t._insert(self._requests(out, stop), metadata=self._t._metadata)
                self._call_obj = call
                reader = threading.Thread(target=self._read, args=(call, stop), daemon=True,
                                          name="ostinato-insert-acks")
                reader.start()
                self._send_loop(out, stop)
                reader.join()
                err = self._stream_error
                self._stream_error = None
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
            if isinstance(err2, errors.UnavailableError) and not self._closed:
                give_up = give_up or Deadline.after(self._t.options.unavailable_timeout)
                if not give_up.expired():
                    with self._cv:  # resend what was not confirmed, with all its rows
                        for batch in reversed(self._in_flight):
                            # The server may have stored some before the break: it skips
                            # resent items whose key it already has.
                            self._retry_keys.update(it[1][0] for it in batch)
                            self._buf.extendleft(reversed(batch))
                        self._in_flight.clear()
                        self._n_in_flight = 0
                        self._sent_rows.clear()
                    time.sleep(backoff * (0.5 + random.random() / 2))
                    backoff = min(backoff * 2, 1.0)
                    continue
            with self._cv:
                self._error = err2
                self._thread = None
                self._cv.notify_all()
            return

    def _send_loop(self, out: deque, stop: threading.Event) -> None:
        idle_since: float | None = None
        while True:
            with self._cv:
                # Send when there is something to send and fewer than max_in_flight_requests
                # requests await their acks: items created meanwhile wait and go out together.
                while (not self._buf or len(self._in_flight) >= self._max_requests) \
                        and not self._closed and not stop.is_set():
                    if self._n_in_flight == 0 and not out:
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
                    stop.set()
                    self._cv.notify_all()
                    return
                batch = []
                while self._buf:
                    batch.append(self._buf.popleft())
                    if len(batch) >= 4096:
                        break
            msg = self._encode(batch)
            with self._cv:
                self._in_flight.append(batch)
                self._n_in_flight += len(batch)
                out.append(msg)
                self._cv.notify_all()

    def _encode(self, batch: list[tuple[str, tuple[Any, ...]]]) -> bytes:
        tables: dict[str, int] = {}
        items = []
        need: dict[int, tuple[Chunk, int]] = {}
        sq_cache: dict[int, list[bool]] = {}
        retry = self._retry_keys
        retried: list[int] = []
        for table, (key, prio, packed, squeeze) in batch:
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
                        need[ck] = (chunk, end)
            else:
                for col in packed:
                    flat: list[int] = []
                    for chunk, off, ln in col:
                        flat += (chunk.key, off, ln)
                        end = off + ln
                        prev = need.get(chunk.key)
                        if prev is None or prev[1] < end:
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
        for ck, (chunk, end) in need.items():
            sent = self._sent_rows.get(ck, 0)
            if end > sent:
                rows = chunk.data[sent:end]
                segs.append(codec.make_segment(ck, chunk.episode_id, sent, rows, self._compress))
                self._sent_rows[ck] = end
        keep = self._keep_keys()
        with self._cv:
            for _, (_, _, packed, _) in self._buf:
                keep.update(c.key for c in items_lib.iter_chunks(packed))
        for ck in [k for k in self._sent_rows if k not in keep]:
            del self._sent_rows[ck]
        body = {"seg": segs, "t": list(tables), "i": items,
                "keep": [k for k in keep if k in self._sent_rows]}
        if retried:
            body["r"] = retried
        msg = codec.pack_framed(body)
        if len(msg) > self._t.options.max_message_bytes:
            raise errors.InvalidArgumentError(
                f"an insert request of {len(msg)} bytes exceeds max_message_bytes "
                f"({self._t.options.max_message_bytes}); lower the writer's batch or raise the limit")
        return msg

    def _read(self, call: Any, stop: threading.Event) -> None:
        try:
            for raw in call:
                resp = codec.unpack(raw)
                n = int(resp.get("n", 0))
                with self._cv:
                    while n > 0 and self._in_flight:
                        b = self._in_flight[0]
                        if len(b) <= n:
                            self._in_flight.popleft()
                            n -= len(b)
                            self._n_in_flight -= len(b)
                        else:
                            del b[:n]
                            self._n_in_flight -= n
                            n = 0
                    self._cv.notify_all()
            self._stream_error = None
        except grpc.RpcError as e:
            if not stop.is_set() or self._in_flight:
                self._stream_error = from_rpc_error(e, self._t.address)
        except Exception as e:  # noqa: BLE001
            self._stream_error = errors.ReverbError(f"bad reply on insert stream: {e}")
        finally:
            stop.set()
            with self._cv:
                self._cv.notify_all()

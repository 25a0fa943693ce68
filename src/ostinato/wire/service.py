"""The gRPC service: serves a :class:`~ostinato.server.Server`'s tables to remote clients.

Handlers of service ``ostinato.Replay`` (the messages are in :mod:`ostinato.wire.protocol`):
``Insert`` (stream-stream, :mod:`ostinato.wire.inserts`), ``Sample``, ``Mutate``, ``Reset``,
``ServerInfo``, ``Checkpoint``, ``Stats`` (unary). Every request is counted by method and
status, with its bytes (:class:`RequestStats`, read by :mod:`ostinato.ops`).

Threads are not streams. The service runs on one event loop (``grpc.aio``, in a thread of
its own): an open Insert stream waiting for its writer's next request costs a little memory
and no thread, so hundreds of writers do not hold anything that other calls need. The work of
a request runs in one of three bounded thread pools, so that no kind of call queues behind
another: *data* (an Insert request: decoding, storing, waiting for a rate limiter), *sample*
(a Sample call, which may wait for its rate limiter), and *control* (``Mutate``, ``Reset``,
``Checkpoint``, ``Stats``). ``ServerInfo`` only reads counters and is answered on the loop
itself: no hand-off, so it waits for nothing but the loop. Threads are started as work
arrives, up to each pool's bound; the thread count does not grow with the number of streams. A
small insert request (no shared-memory ring) is stored on the loop itself until it would wait for
its rate limiter, which saves two thread hand-offs per request; the rest of it goes to the data
pool. Likewise a Sample call whose reply is expected under :data:`INLINE_BYTES` is answered on
the loop when its rate limiter admits all its items at once (else it goes to the sample pool,
which waits and lingers as before), and a Mutate request under :data:`INLINE_BYTES` is answered
on the loop.

Past ``max_streams`` open Insert streams a new one is refused at once with
``RESOURCE_EXHAUSTED``; a stream that sends no request for ``idle_stream_seconds`` is ended
(normally: a public writer reopens it when it next writes).

A malformed request gets ``INVALID_ARGUMENT`` and changes nothing; other clients are not
affected. Calls that wait on a rate limiter wait in short slices and give up when the client
goes away, so a dead client never pins a server thread.

Per-call bookkeeping is in :mod:`ostinato.wire.calls`, the event loop's thread in
:mod:`ostinato.wire.grpc_server`; ``RequestStats``, ``Gone``, ``GrpcServer`` and ``serve``
are re-exported here.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from concurrent import futures
from typing import Any

import grpc

from ostinato import errors
from ostinato.core.deadline import Deadline
from ostinato.errors import ShmError
from ostinato.wire import codec, protocol
from ostinato.wire.calls import Gone, RequestStats
from ostinato.wire.grpc_server import GrpcServer, serve
from ostinato.wire.insert_acks import request_acks
from ostinato.wire.inserts import WAIT_SLICE, InsertSession, StreamStats
from ostinato.wire.status import abort_shm_refused, abort_with, code_for

_log = logging.getLogger(__name__)

#: A remote sample call that the rate limiter lets take fewer items than asked waits up to this
#: long for the rest (see ``Table.sample(linger=)``): a sampler that keeps up with the inserts
#: then takes them in batches instead of one round trip per few items (W6: 6.8k -> ~7.8k/s).
SAMPLE_LINGER_SECONDS = 0.005


DEFAULT_MAX_STREAMS = 4096
#: Seconds an Insert stream may wait for its next request before the server ends it.
DEFAULT_IDLE_STREAM_SECONDS = 300.0
#: Threads answering control calls (Mutate, Reset, Checkpoint, Stats).
CONTROL_THREADS = 2
#: Most threads storing insert requests at once (and waiting for their rate limiters).
DATA_THREADS = 8
#: Most threads answering Sample calls at once (and waiting for their rate limiters).
SAMPLE_THREADS = 16
#: A Sample call expected to reply with fewer bytes than this, when its rate limiter admits
#: all its items at once, and a Mutate request of fewer bytes than this, are answered on the event
#: loop: no hand-off to a pool thread and back (two thread wake-ups per call). Bounded so
#: that no call holds the loop for long.
INLINE_BYTES = 256 * 1024


class ReplayService:
    """Handlers of the ``ostinato.Replay`` service for one server.

    Attributes:
      streams: counters of the Insert streams (:class:`~ostinato.wire.inserts.StreamStats`).
      requests: requests and bytes served (:class:`RequestStats`).
    """

    def __init__(
        self,
        server: Any,
        *,
        token: str | None = None,
        max_message_bytes: int = protocol.DEFAULT_MAX_MESSAGE_BYTES,
        shared_memory: bool = True,
        max_workers: int = 64,
        max_streams: int = DEFAULT_MAX_STREAMS,
        idle_stream_seconds: float | None = DEFAULT_IDLE_STREAM_SECONDS,
    ):
        self._server = server
        self._token = token
        self._max_bytes = max_message_bytes
        self._shared_memory = shared_memory
        self._max_streams = max_streams
        self._idle = idle_stream_seconds
        self.streams = StreamStats()
        self.requests = RequestStats()
        self._item_bytes: dict[str, float] = {}
        #: Insert streams waiting for their next request -> since when (loop time).
        self._waiting: dict[asyncio.Task, float] = {}
        self._swept: set[asyncio.Task] = set()
        self.sweeper: asyncio.Task | None = None
        # Python runs one thread at a time: more threads doing CPU work than a few only make
        # every thread, the event loop's included, wait longer for the interpreter (with 64
        # busy insert threads a ServerInfo waited up to 2 s). Waits (a rate limiter) hold a
        # thread too, so the bounds are not 1.
        self.pools = {
            "data": futures.ThreadPoolExecutor(
                min(max_workers, DATA_THREADS), thread_name_prefix="ostinato-rpc-data"
            ),
            "sample": futures.ThreadPoolExecutor(
                min(max_workers, SAMPLE_THREADS), thread_name_prefix="ostinato-rpc-sample"
            ),
            "control": futures.ThreadPoolExecutor(
                CONTROL_THREADS, thread_name_prefix="ostinato-rpc-control"
            ),
        }

    @property
    def active_streams(self) -> int:
        return self.streams.active_streams

    @property
    def ring_streams(self) -> int:
        return self.streams.ring_streams

    @property
    def ring_bytes(self) -> int:
        return self.streams.ring_bytes

    def shutdown(self) -> None:
        """Stops the pools (work queued and not started is dropped)."""
        for pool in self.pools.values():
            pool.shutdown(wait=False, cancel_futures=True)

    # -- plumbing ---------------------------------------------------------------------------
    def _authorized(self, context: Any) -> bool:
        if self._token is None:
            return True
        md = dict(context.invocation_metadata() or ())
        return md.get("authorization") == f"Bearer {self._token}"

    def _table(self, name: str) -> Any:
        t = self._server.tables_by_name.get(name)
        if t is None:
            raise errors.TableNotFoundError(name, list(self._server.tables_by_name))
        return t

    @staticmethod
    def _gone(context: Any) -> Gone:
        gone = Gone()
        context.add_done_callback(gone.set)
        return gone

    def _unary(self, name: str, fn: Any, pool: str, now: Any = None) -> Any:
        """The handler of a unary method: ``fn(msg, gone)`` in ``pool``'s threads (``"loop"``:
        on the loop). ``now(raw, gone)``, if given, runs first on the loop and returns the
        packed reply, or None (having changed nothing) when the call must go to the pool."""
        stats = self.requests
        executor = None if pool == "loop" else self.pools[pool]

        def work(raw: bytes, gone: Gone) -> bytes:
            return codec.pack(fn(codec.unpack(raw), gone))

        async def handler(raw: bytes, context: Any) -> bytes:
            # Every outcome is counted before the client hears it (a client that reads the
            # counters right after an error sees that error counted).
            if not self._authorized(context):
                stats.record(name, "UNAUTHENTICATED", len(raw), 0)
                await context.abort(grpc.StatusCode.UNAUTHENTICATED, "missing or wrong token")
            gone = self._gone(context)
            try:
                if executor is None:  # cheap and never waits: answered on the loop
                    out = work(raw, gone)
                else:
                    out = None if now is None else now(raw, gone)
                    if out is None:
                        out = await asyncio.get_running_loop().run_in_executor(
                            executor, work, raw, gone
                        )
            except asyncio.CancelledError:
                stats.record(name, "CANCELLED", len(raw), 0)
                gone.set()
                raise
            except Exception as e:
                stats.record(name, code_for(e).name, len(raw), 0)
                if not isinstance(e, (errors.ReverbError, ValueError, TypeError, KeyError)):
                    _log.exception("internal error in %s", getattr(fn, "__name__", fn))
                await abort_with(context, e)
                raise  # unreachable: abort raises
            stats.record(name, "OK", len(raw), len(out))
            return out

        return handler

    def method_handlers(self) -> dict[str, grpc.RpcMethodHandler]:
        """The handlers of service ``ostinato.Replay``, by method name."""
        ident = None  # bytes in, bytes out
        handlers = {
            name: grpc.unary_unary_rpc_method_handler(
                self._unary(name, getattr(self, fn), pool, now and getattr(self, now))
            )
            for name, fn, pool, now in (
                ("Sample", "sample", "sample", "sample_now"),
                ("Mutate", "mutate", "control", "mutate_now"),
                ("Reset", "reset", "control", None),
                ("ServerInfo", "server_info", "loop", None),
                ("Checkpoint", "checkpoint", "control", None),
                ("Stats", "stats", "control", None),
            )
        }
        handlers[protocol.INSERT_METHOD] = grpc.stream_stream_rpc_method_handler(
            self.insert, ident, ident
        )
        return handlers

    def generic_handler(self) -> grpc.GenericRpcHandler:
        return grpc.method_handlers_generic_handler(protocol.SERVICE, self.method_handlers())

    def _wait_slices(self, fn: Any, timeout_ms: Any, gone: Gone) -> Any:
        """Runs ``fn(slice_seconds)`` until it stops timing out, the deadline passes or the
        client leaves."""
        deadline = Deadline.from_ms(timeout_ms)
        while True:
            if gone.is_set():
                raise errors.CancelledError("the client went away")
            r = deadline.remaining()
            try:
                return fn(WAIT_SLICE if r is None else min(r, WAIT_SLICE))
            except errors.RateLimiterTimeout:
                if deadline.expired() or gone.is_set():
                    raise
                if r is not None and r <= WAIT_SLICE:
                    raise

    # -- insert -------------------------------------------------------------------------------
    def _acks(self, session: InsertSession, raw: bytes, gone: Gone) -> AsyncIterator[int | None]:
        return request_acks(session, raw, gone, self.pools["data"])

    async def sweep_idle(self) -> None:
        """Ends streams that sent nothing for ``idle_stream_seconds`` (runs on the loop)."""
        idle = self._idle
        if idle is None:
            return
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(min(idle / 4, 5.0))
            now = loop.time()
            for task, since in list(self._waiting.items()):
                if now - since > idle:
                    del self._waiting[task]
                    self._swept.add(task)
                    task.cancel()

    async def insert(self, request_iterator: Any, context: Any) -> AsyncIterator[bytes]:
        method = protocol.INSERT_METHOD
        stats = self.requests
        if not self._authorized(context):
            stats.record(method, "UNAUTHENTICATED", 0, 0)
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, "missing or wrong token")
        with self.streams.lock:
            full = self.streams.active_streams >= self._max_streams
            if not full:
                self.streams.active_streams += 1
        if full:
            stats.record(method, "RESOURCE_EXHAUSTED", 0, 0)
            await abort_with(
                context,
                errors.ResourceExhaustedError(
                    f"this server has {self._max_streams} insert streams open (max_streams); "
                    "try again later or raise Server(max_streams=...)"
                ),
            )
        session = InsertSession(
            self._table,
            self._max_bytes,
            self._shared_memory,
            self.streams,
            getattr(self._server, "max_inflated_bytes", None),
        )
        gone = self._gone(context)
        loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        requests = request_iterator.__aiter__()
        sent = 0  # ack bytes not yet recorded
        status = None  # status of the request being handled, once it is known
        raw = b""
        try:
            while True:
                self._waiting[task] = loop.time()  # the sweeper may end us while we wait
                try:
                    raw = await requests.__anext__()
                except StopAsyncIteration:
                    break
                finally:
                    self._waiting.pop(task, None)
                status = "UNKNOWN"
                session.complete = False
                try:
                    async for n in self._acks(session, raw, gone):
                        if n is None:  # the client went away while we waited
                            status = "CANCELLED"
                            return
                        if not n:  # about to wait, nothing new stored
                            continue
                        ack = protocol.insert_ack(n)
                        sent += len(ack)
                        if session.complete:  # the last ack of a whole request
                            stats.record(method, "OK", len(raw), sent)
                            status, sent = None, 0
                        yield ack
                except ShmError as e:  # the writer resends inline: nothing was stored
                    stats.record(method, "FAILED_PRECONDITION", len(raw), sent)
                    status = None  # counted: before the client hears it
                    await abort_shm_refused(context, str(e))
                except (asyncio.CancelledError, grpc.aio.AbortError):
                    raise
                except Exception as e:  # noqa: BLE001
                    stats.record(method, code_for(e).name, len(raw), sent)
                    status = None
                    if not isinstance(e, (errors.ReverbError, ValueError, TypeError)):
                        _log.error("internal error in Insert", exc_info=e)
                    await abort_with(context, e)
                if status is not None:
                    stats.record(method, "OK", len(raw), sent)
                status, sent = None, 0
        except asyncio.CancelledError:
            if task in self._swept:  # idle: end the stream normally, the writer reopens it
                self._swept.discard(task)
                if hasattr(task, "uncancel"):  # Python >= 3.11 counts cancellations
                    task.uncancel()
                return
            if status is not None:
                status = "CANCELLED"
            raise
        finally:
            gone.set()
            self._waiting.pop(task, None)
            if status is not None:  # the stream ended on a request
                if status == "UNKNOWN" and context.cancelled():
                    status = "CANCELLED"
                stats.record(method, status, len(raw), sent)
            # The data pool may still be finishing this stream's request: close after it.
            self.pools["data"].submit(session.close)
            with self.streams.lock:
                self.streams.active_streams -= 1

    # -- sample ---------------------------------------------------------------------------------
    def _sample_size(self, msg: Any) -> tuple[Any, Any, int, float]:
        """``(request, table, items to take, bytes per item expected)`` of a Sample call."""
        req = protocol.parse_sample_request(msg)
        table = self._table(req.table)
        # Keep the reply under the message limit: items taken from a table and then not sent
        # would be lost (for a queue). The per-item size is learnt from earlier replies.
        per_item = max(self._item_bytes.get(table.name, 0.0), table.approx_item_bytes())
        n = min(req.num_samples, protocol.approx_reply_items(self._max_bytes, per_item))
        return req, table, n, per_item

    def sample_now(self, raw: bytes, gone: Gone) -> bytes | None:
        """A Sample call answered on the loop: the packed reply when the expected reply is
        small and the rate limiter admits all of them now (what the pool would take at this
        moment, without waiting or lingering); None, having taken nothing, otherwise."""
        _, table, n, per_item = self._sample_size(codec.unpack(raw))
        if n * per_item > INLINE_BYTES:
            return None
        batch = table.sample_now(n)
        if batch is None:
            return None
        return codec.pack(self._sample_reply(table, batch))

    def sample(self, msg: Any, gone: Gone) -> dict:
        req, table, n, _ = self._sample_size(msg)
        gone.on_set(table.wake)
        batch = self._wait_slices(
            lambda s: table.sample(n, s, cancelled=gone.is_set, linger=SAMPLE_LINGER_SECONDS),
            req.timeout_ms,
            gone,
        )
        return self._sample_reply(table, batch)

    def _sample_reply(self, table: Any, batch: Any) -> dict:
        reply = protocol.sample_reply(batch)
        size = protocol.sample_reply_data_bytes(reply)
        self._item_bytes[table.name] = max(
            size / max(len(batch), 1), 0.5 * self._item_bytes.get(table.name, 0)
        )
        return reply

    # -- the rest ---------------------------------------------------------------------------------
    def mutate_now(self, raw: bytes, gone: Gone) -> bytes | None:
        """A small Mutate request answered on the loop (it never waits); None for a big one."""
        if len(raw) > INLINE_BYTES:
            return None
        return codec.pack(self.mutate(codec.unpack(raw), gone))

    def mutate(self, msg: Any, gone: Gone) -> dict:
        req = protocol.parse_mutate_request(msg)
        table = self._table(req.table)
        n_del = table.delete(req.delete_keys) if req.delete_keys is not None else 0
        n_upd = 0
        if req.update_keys is not None:
            n_upd = table.update_priorities(req.update_keys, req.priorities)
        return protocol.mutate_reply(n_del, n_upd)

    def reset(self, msg: Any, gone: Gone) -> dict:
        self._table(protocol.parse_reset_request(msg)).reset()
        return {}

    def server_info(self, msg: Any, gone: Gone) -> dict:
        return protocol.server_info_reply([t.info for t in self._server.tables_by_name.values()])

    def checkpoint(self, msg: Any, gone: Gone) -> dict:
        return protocol.checkpoint_reply(self._server.checkpoint())

    def stats(self, msg: Any, gone: Gone) -> dict:
        protocol.parse_stats_request(msg)
        return protocol.stats_reply(self._server.metrics())


def _raise_if_bad_tls(tls: Any) -> None:
    problem = tls.problem() if tls is not None else None
    if problem:
        raise ValueError(f"tls: {problem}")


def start_grpc_server(
    server: Any,
    host: str,
    port: int,
    *,
    token: str | None,
    tls: Any,
    max_message_bytes: int,
    max_workers: int,
    shared_memory: bool = True,
    max_streams: int = DEFAULT_MAX_STREAMS,
    idle_stream_seconds: float | None = DEFAULT_IDLE_STREAM_SECONDS,
) -> tuple[GrpcServer, int, ReplayService]:
    """Starts serving; returns (grpc server, bound port, service). Raises ValueError if the
    port cannot be bound."""
    service = ReplayService(
        server,
        token=token,
        max_message_bytes=max_message_bytes,
        shared_memory=shared_memory,
        max_workers=max_workers,
        max_streams=max_streams,
        idle_stream_seconds=idle_stream_seconds,
    )
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
    try:
        grpc_server, bound = serve(
            [service.generic_handler()],
            f"{host}:{port}",
            options=options,
            tls=tls,
            registered=(protocol.SERVICE, service.method_handlers()),
            on_start=lambda loop: setattr(
                service, "sweeper", loop.create_task(service.sweep_idle())
            ),
        )
    except ValueError as e:
        service.shutdown()
        _raise_if_bad_tls(tls)
        raise ValueError(f"port ({port}) could not be bound on {host}: {e}") from None
    if not bound:
        grpc_server.stop(0)
        service.shutdown()
        _raise_if_bad_tls(tls)
        raise ValueError(f"port ({port}) is already in use or cannot be bound on {host}")
    return grpc_server, bound, service

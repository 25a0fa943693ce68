"""The gRPC service: serves a :class:`~ostinato.server.Server`'s tables to remote clients.

Handlers of service ``ostinato.Replay`` (the messages are in :mod:`ostinato.wire.protocol`):
``Insert`` (stream-stream, :mod:`ostinato.wire.inserts`), ``Sample``, ``Mutate``, ``Reset``,
``ServerInfo``, ``Checkpoint``, ``Stats`` (unary). Every request is counted by method and
status, with its bytes (:class:`RequestStats`, read by :mod:`ostinato.ops`).

A malformed request gets ``INVALID_ARGUMENT`` and changes nothing; other clients are not
affected. Calls that wait on a rate limiter wait in short slices and give up when the client
goes away, so a dead client never pins a server thread.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from concurrent import futures
from typing import Any

import grpc

from ostinato import errors
from ostinato.core.deadline import Deadline
from ostinato.errors import ShmError
from ostinato.wire import codec, protocol
from ostinato.wire.inserts import WAIT_SLICE, InsertSession, StreamStats
from ostinato.wire.status import abort_shm_refused, abort_with, code_for

_log = logging.getLogger(__name__)

#: A remote sample call that the rate limiter lets take fewer items than asked waits up to this
#: long for the rest (see ``Table.sample(linger=)``): a sampler that keeps up with the inserts
#: then takes them in batches instead of one round trip per few items (W6: 6.8k -> ~7.8k/s).
SAMPLE_LINGER_SECONDS = 0.005
_DONE: Any = object()


class RequestStats:
    """Requests served, by method and status, and bytes received and sent, by method.

    An Insert stream counts each request message (``OK`` once its items are stored, else the
    status that ended the stream on it) and each acknowledgement's bytes.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._calls: dict[tuple[str, str], int] = {}
        self._received: dict[str, int] = {}
        self._sent: dict[str, int] = {}

    def record(self, method: str, status: str | None, received: int, sent: int) -> None:
        """One request of ``method`` ended with ``status`` (None: not counted as a request,
        bytes only)."""
        with self._lock:
            if status is not None:
                key = (method, status)
                self._calls[key] = self._calls.get(key, 0) + 1
            if received:
                self._received[method] = self._received.get(method, 0) + received
            if sent:
                self._sent[method] = self._sent.get(method, 0) + sent

    def snapshot(self) -> dict[str, Any]:
        """``{"requests": {method: {status: n}}, "received_bytes": {method: n},
        "sent_bytes": {method: n}}``."""
        with self._lock:
            calls = dict(self._calls)
            received, sent = dict(self._received), dict(self._sent)
        by_method: dict[str, dict[str, int]] = {}
        for (method, status), n in sorted(calls.items()):
            by_method.setdefault(method, {})[status] = n
        return {"requests": by_method, "received_bytes": received, "sent_bytes": sent}


def _status_name(context: grpc.ServicerContext, default: str = "UNKNOWN") -> str:
    code = getattr(context, "code", lambda: None)()
    return code.name if isinstance(code, grpc.StatusCode) else default


class ReplayService:
    """Handlers of the ``ostinato.Replay`` service for one server.

    Attributes:
      streams: counters of the Insert streams (:class:`~ostinato.wire.inserts.StreamStats`).
      requests: requests and bytes served (:class:`RequestStats`).
    """

    def __init__(self, server: Any, *, token: str | None = None,
                 max_message_bytes: int = protocol.DEFAULT_MAX_MESSAGE_BYTES,
                 shared_memory: bool = True):
        self._server = server
        self._token = token
        self._max_bytes = max_message_bytes
        self._shared_memory = shared_memory
        self.streams = StreamStats()
        self.requests = RequestStats()
        self._item_bytes: dict[str, float] = {}

    @property
    def active_streams(self) -> int:
        return self.streams.active_streams

    @property
    def ring_streams(self) -> int:
        return self.streams.ring_streams

    @property
    def ring_bytes(self) -> int:
        return self.streams.ring_bytes

    # -- plumbing ---------------------------------------------------------------------------
    def _authorize(self, context: grpc.ServicerContext) -> None:
        if self._token is None:
            return
        md = dict(context.invocation_metadata())
        if md.get("authorization") != f"Bearer {self._token}":
            context.abort(grpc.StatusCode.UNAUTHENTICATED, "missing or wrong token")

    def _table(self, name: str) -> Any:
        t = self._server.tables_by_name.get(name)
        if t is None:
            raise errors.TableNotFoundError(name, list(self._server.tables_by_name))
        return t

    def _unary(self, name: str, fn: Any) -> Any:
        stats = self.requests

        def handler(raw: bytes, context: grpc.ServicerContext) -> bytes:
            status = "UNAUTHENTICATED"
            out = b""
            try:
                self._authorize(context)
                status = "UNKNOWN"
                try:
                    out = codec.pack(fn(codec.unpack(raw), context))
                    status = "OK"
                    return out
                except grpc.RpcError:
                    status = _status_name(context)
                    raise
                except Exception as e:  # noqa: BLE001 - every error goes back to the caller
                    status = code_for(e).name
                    if not isinstance(e, (errors.ReverbError, ValueError, TypeError, KeyError)):
                        _log.exception("internal error in %s", getattr(fn, "__name__", fn))
                    abort_with(context, e)
                    raise  # unreachable: abort raises
            finally:
                stats.record(name, status, len(raw), len(out))
        return handler

    def generic_handler(self) -> grpc.GenericRpcHandler:
        ident = None  # bytes in, bytes out
        handlers = {name: grpc.unary_unary_rpc_method_handler(self._unary(name, getattr(self, fn)))
                    for name, fn in (("Sample", "sample"), ("Mutate", "mutate"),
                                     ("Reset", "reset"), ("ServerInfo", "server_info"),
                                     ("Checkpoint", "checkpoint"), ("Stats", "stats"))}
        handlers[protocol.INSERT_METHOD] = grpc.stream_stream_rpc_method_handler(
            self.insert, ident, ident)
        return grpc.method_handlers_generic_handler(protocol.SERVICE, handlers)

    def _wait_slices(self, fn: Any, timeout_ms: Any, context: grpc.ServicerContext) -> Any:
        """Runs ``fn(slice_seconds)`` until it stops timing out, the deadline passes or the
        client leaves."""
        deadline = Deadline.from_ms(timeout_ms)
        while True:
            if not context.is_active():
                raise errors.CancelledError("the client went away")
            r = deadline.remaining()
            try:
                return fn(WAIT_SLICE if r is None else min(r, WAIT_SLICE))
            except errors.RateLimiterTimeout:
                if deadline.expired() or not context.is_active():
                    raise
                if r is not None and r <= WAIT_SLICE:
                    raise

    # -- insert -------------------------------------------------------------------------------
    def insert(self, request_iterator: Iterator[bytes],
               context: grpc.ServicerContext) -> Iterator[bytes]:
        method = protocol.INSERT_METHOD
        stats = self.requests
        try:
            self._authorize(context)
        except BaseException:
            stats.record(method, "UNAUTHENTICATED", 0, 0)
            raise
        session = InsertSession(self._table, self._max_bytes, self._shared_memory, self.streams,
                                getattr(self._server, "max_inflated_bytes", None))
        with self.streams.lock:
            self.streams.active_streams += 1
        sent = 0  # ack bytes not yet recorded
        status = None  # status of the request being handled, once it is known
        try:
            for raw in request_iterator:
                status = "UNKNOWN"
                acks = session.handle(raw, context.is_active)
                while True:
                    try:
                        n = next(acks, _DONE)
                    except grpc.RpcError:
                        status = _status_name(context)
                        raise
                    except ShmError as e:  # the writer resends inline: nothing was stored
                        status = "FAILED_PRECONDITION"
                        abort_shm_refused(context, str(e))
                    except Exception as e:  # noqa: BLE001
                        status = code_for(e).name
                        if not isinstance(e, (errors.ReverbError, ValueError, TypeError)):
                            _log.exception("internal error in Insert")
                        abort_with(context, e)
                    if n is _DONE:
                        break
                    if n is None:  # the client went away while we waited
                        status = "CANCELLED"
                        return
                    ack = protocol.insert_ack(n)
                    sent += len(ack)
                    yield ack
                stats.record(method, "OK", len(raw), sent)
                status, sent = None, 0
        finally:
            if status is not None:  # the stream ended on a request (raw is bound then)
                if status == "UNKNOWN" and not context.is_active():
                    status = "CANCELLED"
                stats.record(method, status, len(raw), sent)
            session.close()
            with self.streams.lock:
                self.streams.active_streams -= 1

    # -- sample ---------------------------------------------------------------------------------
    def sample(self, msg: Any, context: grpc.ServicerContext) -> dict:
        req = protocol.parse_sample_request(msg)
        table = self._table(req.table)
        # Keep the reply under the message limit: items taken from a table and then not sent
        # would be lost (for a queue). The per-item size is learnt from earlier replies.
        per_item = max(self._item_bytes.get(table.name, 0.0), table.approx_item_bytes())
        n = min(req.num_samples, protocol.approx_reply_items(self._max_bytes, per_item))
        gone = threading.Event()
        context.add_callback(lambda: (gone.set(), table.wake()))
        batch = self._wait_slices(
            lambda s: table.sample(n, s, cancelled=gone.is_set, linger=SAMPLE_LINGER_SECONDS),
            req.timeout_ms, context)
        reply = protocol.sample_reply(batch)
        size = protocol.sample_reply_data_bytes(reply)
        self._item_bytes[table.name] = max(size / max(len(batch), 1),
                                           0.5 * self._item_bytes.get(table.name, 0))
        return reply

    # -- the rest ---------------------------------------------------------------------------------
    def mutate(self, msg: Any, context: grpc.ServicerContext) -> dict:
        req = protocol.parse_mutate_request(msg)
        table = self._table(req.table)
        n_del = table.delete(req.delete_keys) if req.delete_keys is not None else 0
        n_upd = 0
        if req.update_keys is not None:
            n_upd = table.update_priorities(req.update_keys, req.priorities)
        return protocol.mutate_reply(n_del, n_upd)

    def reset(self, msg: Any, context: grpc.ServicerContext) -> dict:
        self._table(protocol.parse_reset_request(msg)).reset()
        return {}

    def server_info(self, msg: Any, context: grpc.ServicerContext) -> dict:
        return protocol.server_info_reply([t.info for t in self._server.tables_by_name.values()])

    def checkpoint(self, msg: Any, context: grpc.ServicerContext) -> dict:
        return protocol.checkpoint_reply(self._server.checkpoint())

    def stats(self, msg: Any, context: grpc.ServicerContext) -> dict:
        protocol.parse_stats_request(msg)
        return protocol.stats_reply(self._server.metrics())


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

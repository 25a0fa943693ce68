"""The gRPC transport: a client's side of the ``ostinato.Replay`` service.

Unary calls (``Sample``, ``Mutate``, ``Reset``, ``ServerInfo``, ``Checkpoint``) are made here,
retried with backoff while the server is unavailable; each writer gets an Insert stream of its
own (:mod:`ostinato.wire.writer_stream`). Messages are built and read by
:mod:`ostinato.wire.protocol`.
"""

from __future__ import annotations

import dataclasses
import logging
import random
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import grpc
import numpy as np

from ostinato import errors
from ostinato.core import items as items_lib
from ostinato.core.deadline import Deadline
from ostinato.core.keys import key_array
from ostinato.core.signature import flatten_signature
from ostinato.core.table_info import TableInfo
from ostinato.transport import registry
from ostinato.transport.base import TableMeta, Transport
from ostinato.validate import int_in, positive_int
from ostinato.wire import codec, protocol, shm
from ostinato.wire.protocol import DEFAULT_MAX_MESSAGE_BYTES
from ostinato.wire.status import TLSMismatchError, from_rpc_error, tls_mismatch
from ostinato.wire.writer_stream import GrpcWriterStream, InsertStreams

_log = logging.getLogger(__name__)

#: Items a writer stream may have sent but not had confirmed, before it stops taking more.
DEFAULT_MAX_IN_FLIGHT_ITEMS = 4096
#: Requests a writer stream may have sent but not had acknowledged. Items created while two
#: requests are in flight wait and go out together in the next one: fewer, larger messages
#: (the cost of a gRPC message in Python is ~100 us) while the server always has the next one.
DEFAULT_MAX_IN_FLIGHT_REQUESTS = 2
_QUICK_CALLS = frozenset({"Mutate", "Reset", "ServerInfo", "Stats"})


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
      max_in_flight_requests: insert requests per stream awaiting the server's ack; items
        created meanwhile are batched into the next request.
      shared_memory: pass large rows through a shared-memory ring (:mod:`ostinato.wire.shm`):
        ``None`` when the address is on this machine, ``True`` always try, ``False`` never.
      shared_memory_bytes: size of each Insert stream's ring.
      writers_per_stream: most writers sharing one Insert stream per table
        (:mod:`ostinato.wire.writer_stream`); 1 gives each writer its own.
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
    writers_per_stream: int = 16

    def __post_init__(self) -> None:
        if self.compression not in ("zstd", "none"):
            raise ValueError(f"compression ({self.compression!r}) must be 'zstd' or 'none'")
        if self.unavailable_timeout < 0:
            raise ValueError(f"unavailable_timeout ({self.unavailable_timeout}) must be >= 0")
        if self.shared_memory not in (None, True, False):
            raise ValueError(f"shared_memory ({self.shared_memory!r}) must be None, True or False")
        int_in("shared_memory_bytes", self.shared_memory_bytes, 1 << 20, shm.MAX_RING_BYTES)
        for name in ("max_in_flight_items", "max_in_flight_requests", "writers_per_stream"):
            positive_int(name, getattr(self, name))


class GrpcTransport(Transport):
    """Client side of the gRPC service. Thread-safe."""

    def __init__(self, address: str, options: ClientOptions | None = None):
        self.address = address
        self.options = options or ClientOptions()
        o = self.options
        chan_opts: list[tuple[str, Any]] = [
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
        self._calls = {
            name: self._channel.unary_unary(protocol.method_path(name), ident, ident)
            for name in protocol.UNARY_METHODS
        }
        self._insert = self._channel.stream_stream(
            protocol.method_path(protocol.INSERT_METHOD), ident, ident
        )
        self._meta: dict[str, TableMeta] = {}
        self._closed = False
        want = o.shared_memory
        #: Whether writer streams offer the server a shared-memory ring (cleared, with the
        #: reason in ``shm_refused``, when a server or this machine refuses one).
        self.use_shm = shm.available() and (
            want is True or (want is None and registry.is_loopback(address))
        )
        self.shm_refused: str | None = None
        #: The Insert streams this connection's writers share.
        self.insert_streams = InsertStreams(self)

    # -- unary calls with retry on UNAVAILABLE ---------------------------------------------------
    def _call(self, name: str, msg: dict, deadline: Deadline) -> Any:
        payload = codec.pack(msg)
        if len(payload) > self.options.max_message_bytes:
            raise errors.InvalidArgumentError(
                f"{name} request of {len(payload)} bytes exceeds max_message_bytes "
                f"({self.options.max_message_bytes})"
            )
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
                raw = self._calls[name](
                    payload, timeout=r, metadata=self._metadata, wait_for_ready=False
                )
                return codec.unpack(raw)
            except grpc.RpcError as e:
                err = self.rpc_error(e)
                if implicit and isinstance(err, errors.DeadlineExceededError):
                    raise errors.UnavailableError(
                        f"Server at {self.address} did not answer {name} within "
                        f"{max(self.options.unavailable_timeout, 1.0):g} s",
                        self.address,
                    ) from None
                if (
                    not isinstance(err, errors.UnavailableError)
                    or self._closed
                    or isinstance(err, TLSMismatchError)
                ):
                    raise err from None
                if give_up.expired() or deadline.expired():
                    raise err from None
                wait = min(backoff, give_up.remaining() or backoff)
                if r is not None:
                    wait = min(wait, deadline.remaining() or 0)
                time.sleep(wait * (0.5 + random.random() / 2))
                backoff = min(backoff * 2, 1.0)

    def rpc_error(self, err: grpc.RpcError) -> errors.ReverbError:
        """The Ostinato exception for a failed call; a TLS mismatch between this client and
        the server is recognised (:class:`~ostinato.wire.status.TLSMismatchError`, not
        retried) instead of being retried as an unreachable server until
        ``unavailable_timeout``."""
        out = from_rpc_error(err, self.address)
        if isinstance(out, errors.UnavailableError):
            return (
                tls_mismatch(err, self.address, self.options.root_certificates is not None) or out
            )
        return out

    def server_info(self, deadline: Deadline) -> dict[str, TableInfo]:
        infos = protocol.parse_server_info_reply(self._call("ServerInfo", {}, deadline))
        out = {i.name: i for i in infos}
        for i in infos:
            self._meta[i.name] = _meta_from_info(i)
        return out

    def table_meta(self, table: str, deadline: Deadline | None = None) -> TableMeta:
        meta = self._meta.get(table)
        if meta is None and deadline is not None:
            infos = self.server_info(deadline)
            meta = self._meta.get(table)
            if meta is None:
                raise errors.TableNotFoundError(table, list(infos))
        if meta is None:
            try:
                infos = self.server_info(Deadline.after(max(self.options.unavailable_timeout, 1.0)))
            except errors.DeadlineExceededError:
                raise errors.UnavailableError(
                    f"Server at {self.address} did not answer within "
                    f"{max(self.options.unavailable_timeout, 1.0):g} s",
                    self.address,
                ) from None
            meta = self._meta.get(table)
            if meta is None:
                raise errors.TableNotFoundError(table, list(infos))
        return meta

    def sample(self, table: str, num_samples: int, deadline: Deadline) -> items_lib.SampleBatch:
        r = deadline.remaining()
        msg = protocol.sample_request(table, num_samples, None if r is None else int(r * 1000))
        # The server enforces the rate-limiter deadline; the RPC deadline adds slack for the trip.
        resp = self._call("Sample", msg, Deadline.never() if r is None else Deadline.after(r + 5))
        return protocol.parse_sample_reply(resp)

    def update_priorities(
        self, table: str, keys: Any, priorities: np.ndarray, deadline: Deadline
    ) -> int:
        k = key_array(keys)
        p = np.asarray(priorities, dtype="<f8").reshape(-1)
        if len(k) != len(p):
            raise errors.InvalidArgumentError(
                f"keys ({len(k)}) and priorities ({len(p)}) must have the same length"
            )
        resp = self._call(
            "Mutate", protocol.mutate_request(table, update_keys=k, priorities=p), deadline
        )
        return protocol.parse_mutate_reply(resp)[1]

    def delete(self, table: str, keys: Any, deadline: Deadline) -> int:
        resp = self._call(
            "Mutate", protocol.mutate_request(table, delete_keys=key_array(keys)), deadline
        )
        return protocol.parse_mutate_reply(resp)[0]

    def mutate_priorities(
        self,
        table: str,
        updates: dict[int, float] | None,
        deletes: Sequence[int] | None,
        deadline: Deadline,
    ) -> None:
        msg = protocol.mutate_request(
            table,
            delete_keys=key_array(list(deletes)) if deletes else None,
            update_keys=key_array(list(updates.keys())) if updates else None,
            priorities=np.fromiter(updates.values(), dtype="<f8", count=len(updates))
            if updates
            else None,
        )
        self._call("Mutate", msg, deadline)

    def reset(self, table: str, deadline: Deadline) -> None:
        self._call("Reset", protocol.reset_request(table), deadline)

    def checkpoint(self, deadline: Deadline) -> str:
        return protocol.parse_checkpoint_reply(self._call("Checkpoint", {}, deadline))

    def metrics(self, deadline: Deadline) -> dict[str, Any]:
        """The server's ``metrics()`` (``Stats``); ``UnimplementedError`` from an older server."""
        return protocol.parse_stats_reply(self._call("Stats", protocol.stats_request(), deadline))

    # -- inserts ----------------------------------------------------------------------------------
    def writer_stream(
        self, keep_keys: Callable[[], set[int]] | None = None, max_pending: int | None = None
    ) -> GrpcWriterStream:
        return GrpcWriterStream(self, keep_keys, max_pending)

    def open_insert(self, requests: Iterator[bytes]) -> Any:
        """Starts an Insert call sending ``requests``; iterate it for the acknowledgements."""
        return self._insert(requests, metadata=self._metadata)

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


def _meta_from_info(i: TableInfo) -> TableMeta:
    prio = "prioritized" in (
        i.sampler_options.WhichOneof("distribution"),
        i.remover_options.WhichOneof("distribution"),
    )
    return TableMeta(
        i.name,
        flatten_signature(i.signature),
        i.signature,
        prio,
        i.max_times_sampled,
        i.sampler_options.is_deterministic,
    )

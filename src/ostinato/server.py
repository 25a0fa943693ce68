"""The replay server: a set of tables sharing one chunk store.

Every server listens for gRPC clients (:mod:`ostinato.wire.service`); clients created for its
address in the same process talk to it directly instead (:mod:`ostinato.transport.inprocess`,
found through :mod:`ostinato.transport.registry`).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import threading
import time
from collections.abc import Sequence
from typing import Any

from ostinato import validate
from ostinato.core.chunks import ChunkStore
from ostinato.core.extensions import TableExtension
from ostinato.core.table import Table
from ostinato.transport import registry
from ostinato.validate import is_int

_log = logging.getLogger(__name__)
#: ``Server(max_inflated_bytes=None)`` allows at least this much expansion per Insert request,
#: even with a small ``max_message_bytes`` (a writer's request carries up to 16 MiB of rows).
DEFAULT_MIN_INFLATED_BYTES = 64 * 1024 * 1024


@dataclasses.dataclass
class CheckpointStats:
    """What the server's checkpoints took (for monitoring: :meth:`Server.metrics`).

    Attributes:
      saves: checkpoints written; ``failures``: saves that raised.
      last_path, last_time (Unix time it finished), last_seconds, last_bytes: the newest
        checkpoint written by this server (None before the first).
      restore_path, restore_seconds: the checkpoint loaded at start (None if none).
    """

    saves: int = 0
    failures: int = 0
    last_path: str | None = None
    last_time: float | None = None
    last_seconds: float | None = None
    last_bytes: int | None = None
    restore_path: str | None = None
    restore_seconds: float | None = None


def _dir_bytes(path: str) -> int | None:
    """Bytes of the files under ``path`` (a checkpoint directory), or None if unreadable."""
    total = 0
    try:
        for root, _, files in os.walk(path):
            for f in files:
                total += os.stat(os.path.join(root, f)).st_size
    except OSError:
        return None
    return total


@dataclasses.dataclass(frozen=True)
class ServerTLS:
    """TLS material for a server: PEM certificate chain and private key (bytes)."""

    certificate_chain: bytes
    private_key: bytes

    def problem(self) -> str | None:
        """Why this key and certificate chain cannot serve TLS (checked with the ``ssl``
        module, since gRPC reports a bad pair only as a failed bind), or None."""
        import ssl
        import tempfile

        with tempfile.TemporaryDirectory() as d:
            cert, key = os.path.join(d, "cert.pem"), os.path.join(d, "key.pem")
            with open(cert, "wb") as f:
                f.write(self.certificate_chain)
            with open(key, "wb") as f:
                f.write(self.private_key)
            try:  # an encrypted key fails instead of prompting
                ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_cert_chain(
                    cert, key, password=lambda: b""
                )
            except (ssl.SSLError, OSError) as e:
                return (
                    f"the private key and certificate chain cannot be used together (does "
                    f"the key match the certificate, is it PEM and unencrypted?): {e}"
                )
        return None


class Server:
    """Serves a set of tables.

    Args:
      tables: the tables; names must be unique. At least one.
      port: port to listen on. ``None`` or ``0`` picks a free port; read it back from
        :attr:`port`. A port already in use raises ``ValueError``.
      checkpointer: an :mod:`ostinato.checkpointers` object; the newest checkpoint is restored
        before serving starts and :meth:`checkpoint` writes new ones.
      host: interface to listen on; ``"localhost"`` by default. Use ``"0.0.0.0"`` or ``"[::]"``
        to accept other machines (a warning is logged unless ``tls`` or ``token`` is set).
      token: shared secret every call must carry (``Client(..., token=...)``).
      tls: :class:`ServerTLS` to serve over TLS.
      max_message_bytes: largest gRPC message accepted or sent.
      max_workers: most threads doing the RPCs' work: insert requests use at most
        ``min(max_workers, 8)``, samples ``min(max_workers, 16)``, control calls two of their
        own. Open insert streams hold no thread (see :mod:`ostinato.wire.service`); a request
        waiting for its rate limiter holds one.
      max_streams: open insert streams accepted; past it a new stream is refused at once
        with ``RESOURCE_EXHAUSTED``.
      idle_stream_seconds: an insert stream that sends nothing for this long is ended (a
        writer reopens it when it next writes); ``None`` never.
      max_inflated_bytes: the most bytes of rows one Insert request may expand to on this
        server (zstd segments inflated, rows copied out of a shared-memory ring, string
        segments decoded to check them), checked against the sizes a request declares
        *before* anything is expanded; a stream may moreover hold at most
        ``STREAM_HELD_FACTOR`` (4) times this in rows kept for later items. A request over
        either limit fails with ``ResourceExhaustedError`` naming this option; other clients
        are unaffected. ``None`` (default): ``max(max_message_bytes, 64 MiB)``.
      shared_memory: let writers on this machine pass large rows through a shared-memory
        ring instead of gRPC messages (see :mod:`ostinato.wire.shm`; writers fall back to
        sending rows inline when refused). ``False`` refuses every ring.
      metrics_port: serve Prometheus metrics over HTTP on this port (on ``host``; ``0``
        picks a free one, see :attr:`metrics_port`). Needs ``pip install 'ostinato[metrics]'``.
        :meth:`metrics` works without it.

    Example:
      >>> server = Server([Table.queue("q", 10)])
      >>> client = server.localhost_client()
    """

    def __init__(
        self,
        tables: Sequence[Table] | None = None,
        port: int | None = None,
        checkpointer: Any = None,
        *,
        host: str = "localhost",
        token: str | None = None,
        tls: ServerTLS | None = None,
        max_message_bytes: int = 256 * 1024 * 1024,
        max_workers: int = 64,
        shared_memory: bool = True,
        metrics_port: int | None = None,
        max_streams: int = 4096,
        idle_stream_seconds: float | None = 300.0,
        max_inflated_bytes: int | None = None,
    ):
        if not tables:
            raise ValueError("At least one table must be provided")
        names = [t.name for t in tables]
        dups = sorted({n for n in names if names.count(n) > 1})
        if dups:
            raise ValueError(f"Multiple items in tables have the same name: {', '.join(dups)}")
        for t in tables:
            if not isinstance(t, Table):
                raise TypeError(f"tables must hold ostinato.Table objects, got {t!r}")
        if checkpointer is not None and not (
            hasattr(checkpointer, "save") and hasattr(checkpointer, "restore")
        ):
            raise TypeError(
                f"checkpointer ({checkpointer!r}) must be an "
                "ostinato.checkpointers.CheckpointerBase"
            )
        validate.port("port", port, none_ok=True)
        if token is not None and (not isinstance(token, str) or not token):
            raise ValueError("token must be a non-empty string")
        if max_message_bytes < 1024:
            raise ValueError(f"max_message_bytes ({max_message_bytes}) must be >= 1024")
        if max_inflated_bytes is not None and (
            not is_int(max_inflated_bytes) or max_inflated_bytes < 1024
        ):
            raise ValueError(
                f"max_inflated_bytes ({max_inflated_bytes!r}) must be None or an integer >= 1024"
            )
        #: Largest expansion of one Insert request's rows (see ``max_inflated_bytes``); read by
        #: the gRPC service's insert streams.
        self.max_inflated_bytes: int = (
            max_inflated_bytes
            if max_inflated_bytes is not None
            else max(max_message_bytes, DEFAULT_MIN_INFLATED_BYTES)
        )
        validate.port("metrics_port", metrics_port, none_ok=True)
        if metrics_port is not None:  # fail before anything starts if the extra is missing
            from ostinato.ops.metrics import require_prometheus

            require_prometheus()
        self._store = ChunkStore()
        self._tables = {t.name: t for t in tables}
        self._checkpointer = checkpointer
        self._stopped = threading.Event()
        self.checkpoint_stats = CheckpointStats()
        self.start_time = time.time()
        self._metrics_endpoint: Any = None
        if port and (registry.has_server(port) or not registry.port_is_free(host, port)):
            raise ValueError(f"port ({port}) is already in use")
        for t in tables:
            t.attach(self, self._store)
        if checkpointer is not None:  # before serving, so no call sees a half-restored table
            t0 = time.monotonic()
            restored = checkpointer.restore(list(tables))
            if isinstance(restored, str):
                self.checkpoint_stats.restore_path = restored
                self.checkpoint_stats.restore_seconds = time.monotonic() - t0
        from ostinato.wire.service import start_grpc_server

        try:
            self._grpc, bound, self._service = start_grpc_server(
                self,
                host,
                port or 0,
                token=token,
                tls=tls,
                max_message_bytes=max_message_bytes,
                max_workers=max_workers,
                shared_memory=bool(shared_memory),
                max_streams=max_streams,
                idle_stream_seconds=idle_stream_seconds,
            )
        except ValueError as e:
            for t in tables:
                t.detach(self)
            raise ValueError(f"port ({port}) is already in use or cannot be bound: {e}") from None
        self._host = host
        self._port = bound
        registry.register(bound, self)
        if not registry.is_loopback_host(host) and tls is None and token is None:
            _log.warning(
                "Ostinato server listening on %s:%d without TLS or a token: anyone who can reach "
                "this address can read and change the replay data.",
                host,
                bound,
            )
        _log.info("Ostinato server started on %s:%d with tables %s", host, bound, ", ".join(names))
        if metrics_port is not None:
            from ostinato.ops.metrics import serve

            try:
                self._metrics_endpoint = serve(metrics_port, server=self, host=host)
            except BaseException:
                self.stop()
                raise
        if checkpointer is not None:
            checkpointer.start_periodic(self.checkpoint)

    @property
    def port(self) -> int:
        return self._port

    @property
    def metrics_port(self) -> int | None:
        """The port of the Prometheus endpoint (``metrics_port=``), or None."""
        e = self._metrics_endpoint
        return None if e is None else e.port

    def metrics(self) -> dict[str, Any]:
        """The values the metrics endpoint exports, as a dict (see :mod:`ostinato.ops.stats`
        for the fields); needs no extra packages."""
        from ostinato.ops.stats import server_metrics

        return server_metrics(self)

    @property
    def stopped(self) -> bool:
        return self._stopped.is_set()

    @property
    def tables_by_name(self) -> dict[str, Table]:
        return self._tables

    @property
    def service(self) -> Any:
        """The gRPC service (:class:`~ostinato.wire.service.ReplayService`): its counters of
        requests and writer streams."""
        return self._service

    @property
    def chunk_store(self) -> ChunkStore:
        """The chunk store shared by all tables."""
        return self._store

    def localhost_client(self) -> Any:
        """A client for this server (direct in-process access)."""
        from ostinato.client import Client

        return Client(f"localhost:{self._port}")

    def checkpoint(self) -> str:
        """Writes a checkpoint with the server's checkpointer; returns its path.

        A server built without one gets a ``TempDirCheckpointer`` on the first call (Reverb's
        default, but its temporary directory is only created when a checkpoint is asked for).
        """
        if self._checkpointer is None:
            from ostinato.checkpointers import TempDirCheckpointer

            self._checkpointer = TempDirCheckpointer()
            _log.info(
                "no checkpointer configured; writing checkpoints under %s", self._checkpointer.path
            )
        t0 = time.monotonic()
        stats = self.checkpoint_stats
        try:
            path = self._checkpointer.save(list(self._tables.values()))
        except BaseException:
            stats.failures += 1
            raise
        stats.last_seconds = time.monotonic() - t0
        stats.last_path, stats.last_time = path, time.time()
        stats.last_bytes = _dir_bytes(path) if isinstance(path, str) else None
        stats.saves += 1
        return path

    def stop(self) -> None:
        """Stops serving: blocked calls wake with an error, later calls fail. Idempotent."""
        if self._stopped.is_set():
            return
        if self._checkpointer is not None:
            self._checkpointer.stop_periodic()
        if self._metrics_endpoint is not None:
            self._metrics_endpoint.stop()
        for t in self._tables.values():
            t.close()
        # A short grace lets the calls just woken above send their CANCELLED replies.
        self._grpc.stop(grace=1.0, timeout=3.0)
        self._service.shutdown()
        registry.unregister(self._port, self)
        self._stopped.set()

    def wait(self, timeout: float | None = None) -> bool:
        """Blocks until :meth:`stop` is called (or ``timeout`` seconds pass). Returns True if
        stopped.

        Waiting with no timeout hands the calling thread to the server for good, as a
        dedicated replay-server script does (``server.wait()`` at its end): the process then
        keeps full garbage collections short, as ``ostinato-server`` does
        (:func:`ostinato.gc_pauses.keep_gc_pauses_short`), unless the environment variable
        ``OSTINATO_GC_FREEZE`` is ``0``."""
        if timeout is None and os.environ.get("OSTINATO_GC_FREEZE", "1") != "0":
            from ostinato.gc_pauses import keep_gc_pauses_short

            keep_gc_pauses_short()
        try:
            return self._stopped.wait(timeout)
        except KeyboardInterrupt:
            self.stop()
            raise

    def __enter__(self) -> Server:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def __repr__(self) -> str:
        return (
            f"Server(port={self._port}, "
            f"tables=[{', '.join(repr(t) for t in self._tables.values())}])"
        )


class TableExtensionBase(TableExtension):
    """Reverb's name for the base class of table extensions."""

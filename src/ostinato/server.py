"""The replay server: a set of tables sharing one chunk store.

In this release the server lives in the client's process: clients created for its address in
the same process talk to it directly (see :mod:`ostinato.transport.inprocess`).
"""

from __future__ import annotations

import logging
import socket
import threading
from collections.abc import Sequence
from typing import Any

from ostinato import errors
from ostinato.core.chunk_store import ChunkStore
from ostinato.core.extensions import TableExtension
from ostinato.core.table import Table

_log = logging.getLogger(__name__)

_LOCAL_HOSTS = {"localhost", "127.0.0.1", "::1", "[::1]", "0.0.0.0", "[::]", "::", ""}

# port -> Server, for servers living in this process.
_REGISTRY: dict[int, Server] = {}
_REGISTRY_LOCK = threading.Lock()


def parse_address(address: str) -> tuple[str, int]:
    """Splits ``host:port`` (``[v6]:port`` too). Raises ValueError naming the address."""
    if not isinstance(address, str) or ":" not in address:
        raise ValueError(f"server_address ({address!r}) must look like 'host:port'")
    host, _, port_s = address.rpartition(":")
    try:
        port = int(port_s)
    except ValueError:
        raise ValueError(f"server_address ({address!r}) has a non-numeric port") from None
    if not 0 < port < 65536:
        raise ValueError(f"server_address ({address!r}) has a port outside 1..65535")
    return host, port


def local_server_for(address: str) -> Server | None:
    """The running in-process server that ``address`` names, if any."""
    host, port = parse_address(address)
    if host.lower() not in _LOCAL_HOSTS and host != socket.gethostname():
        return None
    with _REGISTRY_LOCK:
        s = _REGISTRY.get(port)
    return s if s is not None and not s.stopped else None


def _port_is_free(port: int) -> bool:
    for family, host in ((socket.AF_INET, "127.0.0.1"), (socket.AF_INET6, "::1")):
        try:
            with socket.socket(family, socket.SOCK_STREAM) as s:
                s.bind((host, port))
        except OSError as e:
            if family == socket.AF_INET6 and e.errno in (97, 99):  # no IPv6 here
                continue
            return False
    return True


def _pick_port() -> int:
    for _ in range(100):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        with _REGISTRY_LOCK:
            if port not in _REGISTRY:
                return port
    raise RuntimeError("could not find a free port")


class Server:
    """Serves a set of tables.

    Args:
      tables: the tables; names must be unique. At least one.
      port: port the server is addressed by. ``None`` or ``0`` picks a free port; read it back
        from :attr:`port`. A port already used by another server raises ``ValueError``.
      checkpointer: reserved for checkpointing (not available in this release; must be None).

    Example:
      >>> server = Server([Table.queue("q", 10)])
      >>> client = server.localhost_client()
    """

    def __init__(self, tables: Sequence[Table] | None = None, port: int | None = None,
                 checkpointer: Any = None):
        if not tables:
            raise ValueError("At least one table must be provided")
        names = [t.name for t in tables]
        dups = sorted({n for n in names if names.count(n) > 1})
        if dups:
            raise ValueError(f"Multiple items in tables have the same name: {', '.join(dups)}")
        for t in tables:
            if not isinstance(t, Table):
                raise TypeError(f"tables must hold ostinato.Table objects, got {t!r}")
        if checkpointer is not None:
            raise NotImplementedError(
                "checkpointer: checkpoints are not available in this release of Ostinato")
        self._store = ChunkStore()
        self._tables = {t.name: t for t in tables}
        self._checkpointer = checkpointer
        self._stopped = threading.Event()
        with _REGISTRY_LOCK:
            if port is None or port == 0:
                pass
            elif port in _REGISTRY or not _port_is_free(port):
                raise ValueError(f"port ({port}) is already in use")
        if port is None or port == 0:
            port = _pick_port()
        elif not isinstance(port, int) or not 0 < port < 65536:
            raise ValueError(f"port ({port!r}) must be an integer in 1..65535")
        for t in tables:
            t._bind(self, self._store)
        with _REGISTRY_LOCK:
            if port in _REGISTRY:
                raise ValueError(f"port ({port}) is already in use")
            _REGISTRY[port] = self
        self._port = port
        _log.info("Ostinato server started on port %d with tables %s", port, ", ".join(names))

    @property
    def port(self) -> int:
        return self._port

    @property
    def stopped(self) -> bool:
        return self._stopped.is_set()

    @property
    def tables_by_name(self) -> dict[str, Table]:
        return self._tables

    @property
    def chunk_store(self) -> ChunkStore:
        """The chunk store shared by all tables."""
        return self._store

    def localhost_client(self) -> Any:
        """A client for this server (direct in-process access)."""
        from ostinato.client import Client

        return Client(f"localhost:{self._port}")

    def checkpoint(self) -> str:
        raise errors.InvalidArgumentError(
            "no Checkpointer configured for the replay service (checkpoints are not available "
            "in this release of Ostinato).")

    def stop(self) -> None:
        """Stops serving: blocked calls wake with an error, later calls fail. Idempotent."""
        if self._stopped.is_set():
            return
        for t in self._tables.values():
            t.close()
        with _REGISTRY_LOCK:
            if _REGISTRY.get(self._port) is self:
                del _REGISTRY[self._port]
        self._stopped.set()

    def wait(self, timeout: float | None = None) -> bool:
        """Blocks until :meth:`stop` is called (or ``timeout`` seconds pass). Returns True if stopped."""
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
        return f"Server(port={self._port}, tables=[{', '.join(repr(t) for t in self._tables.values())}])"


class TableExtensionBase(TableExtension):
    """Reverb's name for the base class of table extensions."""

"""Addresses, and the servers running in this process.

A :class:`~ostinato.Server` registers itself here under its port; a client whose address names
this host at that port talks to it directly (:mod:`ostinato.transport.inprocess`) instead of over
gRPC. The address parsing and the "is this host / is this loopback" checks live here, once.
"""

from __future__ import annotations

import ipaddress
import os
import socket
import threading
from typing import Any

from ostinato import validate

#: Host parts that name this machine as seen by a server bound to it.
_THIS_HOST = {"localhost", "127.0.0.1", "::1", "[::1]", "0.0.0.0", "[::]", "::", ""}

_servers: dict[int, Any] = {}  # port -> Server living in this process
_lock = threading.Lock()


def parse_address(address: str) -> tuple[str, int]:
    """Splits ``host:port`` (``[v6]:port`` too). Raises ValueError naming the address."""
    if not isinstance(address, str) or ":" not in address:
        raise ValueError(f"server_address ({address!r}) must look like 'host:port'")
    host, _, port_s = address.rpartition(":")
    try:
        port = int(port_s)
    except ValueError:
        raise ValueError(f"server_address ({address!r}) has a non-numeric port") from None
    if not 0 < port <= validate.MAX_PORT:
        raise ValueError(f"server_address ({address!r}) has a port outside 1..{validate.MAX_PORT}")
    return host, port


def split_addresses(server_address: str | list[str] | tuple[str, ...]) -> list[str]:
    """One address, a comma-separated list of them, or a list -> the list of addresses.

    Raises:
      ValueError: nothing that looks like an address was given.
    """
    if isinstance(server_address, (list, tuple)):
        server_address = ",".join(server_address)
    if not isinstance(server_address, str) or not server_address.strip(", "):
        raise ValueError(
            f"server_address ({server_address!r}) must be 'host:port', a comma-separated list "
            "of them, or a list of them"
        )
    return [a.strip() for a in server_address.split(",") if a.strip()]


def is_loopback_host(host: str) -> bool:
    """True for ``localhost`` and loopback IP addresses (brackets allowed)."""
    h = host.strip().strip("[]").lower()
    if h in ("localhost", "ip6-localhost"):
        return True
    try:
        return ipaddress.ip_address(h).is_loopback
    except ValueError:
        return False


def is_loopback(address: str) -> bool:
    """True for gRPC targets on this host: ``localhost:p``, ``127.x.y.z:p``, ``[::1]:p``,
    ``unix:`` sockets (optionally with a ``dns:///``/``ipv4:``/``ipv6:`` scheme)."""
    a = address.strip()
    if a.startswith(("unix:", "unix-abstract:")):
        return True
    for prefix in ("dns:///", "ipv4:", "ipv6:"):
        if a.startswith(prefix):
            a = a[len(prefix) :]
    if a.startswith("["):
        host = a[1 : a.find("]")] if "]" in a else a[1:]
    else:
        host = a.rsplit(":", 1)[0] if a.count(":") == 1 else a
    return is_loopback_host(host)


def _is_this_host(host: str) -> bool:
    return host.lower() in _THIS_HOST or host == socket.gethostname()


def port_is_free(host: str, port: int) -> bool:
    """True if nothing listens on ``port`` for the addresses ``host`` resolves to."""
    try:
        infos = socket.getaddrinfo(
            host.strip("[]") or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )
    except socket.gaierror:
        return True  # let gRPC report the bad host
    for family, kind, proto, _, addr in infos:
        with socket.socket(family, kind, proto) as s:
            if os.name != "nt":
                # Connections of a server that just died linger in TIME_WAIT on its port;
                # they must not count as "in use" (gRPC itself binds with SO_REUSEADDR, and
                # a restarted server has to get its old port back). A listening socket still
                # makes this bind fail on Linux and the BSDs. (Windows' SO_REUSEADDR would
                # let the bind succeed even then, so it is not set there.)
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind(addr)
            except OSError as e:
                if e.errno in (97, 99):  # address family not available here
                    continue
                return False
    return True


# -- servers in this process -----------------------------------------------------------------------
def register(port: int, server: Any) -> None:
    """Records ``server`` as serving ``port`` in this process."""
    with _lock:
        _servers[port] = server


def unregister(port: int, server: Any) -> None:
    """Forgets ``server`` (if it is still the one recorded for ``port``)."""
    with _lock:
        if _servers.get(port) is server:
            del _servers[port]


def has_server(port: int) -> bool:
    """True if a server of this process serves ``port``."""
    with _lock:
        return port in _servers


def local_server(address: str) -> Any:
    """The running server of this process that ``address`` names, or None."""
    host, port = parse_address(address)
    if not _is_this_host(host):
        return None
    with _lock:
        s = _servers.get(port)
    return s if s is not None and not s.stopped else None

"""From a client's address(es) to a :class:`~ostinato.transport.base.Transport`.

* an address served by a :class:`~ostinato.Server` of this process -> the in-process transport
  (unless the client asked for ``in_process=False``);
* any other address -> the gRPC transport (:mod:`ostinato.wire.grpc_transport`, imported only then);
* several addresses -> a :class:`~ostinato.transport.sharded.ShardedTransport` over one
  transport per address.
"""

from __future__ import annotations

from typing import Any

from ostinato import errors
from ostinato.transport import registry
from ostinato.transport.base import Transport
from ostinato.transport.inprocess import InProcessTransport


def connect(addresses: list[str], options: dict[str, Any], in_process: bool | None) -> Transport:
    """A transport to ``addresses`` (see the module docstring).

    Args:
      addresses: one or more ``host:port`` addresses.
      options: keyword arguments of :class:`~ostinato.wire.grpc_transport.ClientOptions`.
      in_process: ``None`` uses an in-process server when there is one at an address,
        ``False`` always goes over gRPC, ``True`` requires an in-process server.

    Raises:
      UnavailableError: ``in_process=True`` and no server of this process has the address.
    """
    if len(addresses) > 1:
        from ostinato.transport.sharded import ShardedTransport

        return ShardedTransport([_connect_one(a, options, in_process) for a in addresses])
    return _connect_one(addresses[0], options, in_process)


def _connect_one(address: str, options: dict[str, Any], in_process: bool | None) -> Transport:
    if in_process is not False:
        server = registry.local_server(address)
        if server is not None:
            return InProcessTransport(server, address)
        if in_process:
            raise errors.UnavailableError(
                f"No Ostinato server is running at {address} in this process.", address
            )
    from ostinato.wire.grpc_transport import ClientOptions, GrpcTransport

    return GrpcTransport(address, ClientOptions(**options))

"""Transports: how a :class:`~ostinato.client.Client` reaches its server.

The client is written against the small interface of :class:`Transport`; the in-process
transport calls the tables directly (no sockets, no serialization). Networked and sharded
transports plug in behind the same interface.
"""

from ostinato.transport.base import TableMeta, Transport
from ostinato.transport.inprocess import InProcessTransport

__all__ = ["InProcessTransport", "TableMeta", "Transport"]

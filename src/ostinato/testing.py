"""Helpers for testing code that uses Ostinato: in-process servers with sensible defaults.

Example (pytest)::

    from ostinato import testing

    def test_my_actor():
        with testing.in_process_server(testing.uniform_table("replay")) as (server, client):
            run_actor(client)
            assert client.server_info()["replay"].current_size > 0
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from ostinato import rate_limiters, selectors
from ostinato.client import Client
from ostinato.core.table import Table
from ostinato.server import Server


def uniform_table(
    name: str = "table", max_size: int = 1000, min_size_to_sample: int = 1, **kwargs: Any
) -> Table:
    """A Uniform-sampled, Fifo-evicted table with a MinSize limiter."""
    return Table(
        name,
        selectors.Uniform(),
        selectors.Fifo(),
        max_size,
        rate_limiters.MinSize(min_size_to_sample),
        **kwargs,
    )


def prioritized_table(
    name: str = "table",
    priority_exponent: float = 0.6,
    max_size: int = 1000,
    min_size_to_sample: int = 1,
    **kwargs: Any,
) -> Table:
    """A Prioritized-sampled, Fifo-evicted table with a MinSize limiter."""
    return Table(
        name,
        selectors.Prioritized(priority_exponent),
        selectors.Fifo(),
        max_size,
        rate_limiters.MinSize(min_size_to_sample),
        **kwargs,
    )


@contextlib.contextmanager
def in_process_server(*tables: Table, **server_kwargs: Any) -> Iterator[tuple[Server, Client]]:
    """Starts a server with ``tables`` (a uniform table named "table" if none) and yields
    ``(server, client)``; the server is stopped on exit, waking any blocked call."""
    server = Server(list(tables) or [uniform_table()], **server_kwargs)
    try:
        yield server, server.localhost_client()
    finally:
        server.stop()

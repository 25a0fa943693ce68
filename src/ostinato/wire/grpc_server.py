"""Running a ``grpc.aio`` server on an event loop in a thread of its own: :func:`serve` starts
one for any handlers, :class:`GrpcServer` stops it. :mod:`ostinato.wire.service` serves a
server's tables with it.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from concurrent import futures
from typing import Any

import grpc


class GrpcServer:
    """A ``grpc.aio`` server on an event loop in a thread of its own.

    Args:
      loop: The loop (running in ``thread``).
      thread: The loop's thread.
      server: The ``grpc.aio.Server``.
    """

    def __init__(
        self, loop: asyncio.AbstractEventLoop, thread: threading.Thread, server: Any
    ) -> None:
        self.loop, self.thread, self.server = loop, thread, server

    def stop(self, grace: float = 1.0, timeout: float = 3.0) -> None:
        """Stops serving (calls in flight get ``grace`` seconds), then the loop. Idempotent."""
        if self.loop.is_closed():
            return

        async def shutdown() -> None:
            await self.server.stop(grace)
            me = asyncio.current_task()
            rest = [t for t in asyncio.all_tasks() if t is not me]
            for t in rest:  # the idle sweeper, and any handler still unwinding
                t.cancel()
            await asyncio.gather(*rest, return_exceptions=True)

        if self.loop.is_running():
            fut = asyncio.run_coroutine_threadsafe(shutdown(), self.loop)
            try:
                fut.result(timeout)
            except (futures.TimeoutError, RuntimeError):
                pass
            self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout)


def _serve(loop: asyncio.AbstractEventLoop) -> None:
    asyncio.set_event_loop(loop)
    try:
        loop.run_forever()
    finally:
        loop.close()


def serve(
    handlers: list[grpc.GenericRpcHandler],
    target: str,
    *,
    options: list[tuple[str, Any]] | None = None,
    tls: Any = None,
    on_start: Callable[[asyncio.AbstractEventLoop], Any] | None = None,
    registered: tuple[str, dict[str, grpc.RpcMethodHandler]] | None = None,
) -> tuple[GrpcServer, int]:
    """Serves ``handlers`` (async handlers, as :class:`ReplayService` makes) with a
    ``grpc.aio`` server on an event loop in a new thread.

    ``registered`` (service name, handlers by method) are also registered with the server
    where gRPC supports it (grpcio >= 1.63): each registered method then has its own queue of
    calls waiting to be accepted, so a burst of new Insert streams (hundreds of actors
    starting at once) does not delay a ``ServerInfo`` or ``Sample`` call. gRPC's event-loop
    server accepts one call per method at a time, a few loop turns each; with generic
    handlers alone every method shares that one queue.

    Returns:
      ``(server, bound port)``; the port is 0 (and nothing serves) when it could not be bound.

    Raises:
      ValueError: If gRPC refuses the address.
    """

    async def setup() -> tuple[Any, int]:
        gs = grpc.aio.server(options=options or [], maximum_concurrent_rpcs=None)
        gs.add_generic_rpc_handlers(tuple(handlers))
        if registered is not None and hasattr(gs, "add_registered_method_handlers"):
            gs.add_registered_method_handlers(*registered)
        if tls is not None:
            creds = grpc.ssl_server_credentials([(tls.private_key, tls.certificate_chain)])
            bound = gs.add_secure_port(target, creds)
        else:
            bound = gs.add_insecure_port(target)
        if bound:
            await gs.start()
            if on_start is not None:
                on_start(asyncio.get_running_loop())
        return gs, bound

    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=_serve, args=(loop,), name="ostinato-rpc-loop", daemon=True)
    thread.start()
    try:
        gs, bound = asyncio.run_coroutine_threadsafe(setup(), loop).result(30)
    except RuntimeError as e:
        loop.call_soon_threadsafe(loop.stop)
        raise ValueError(str(e)) from None
    return GrpcServer(loop, thread, gs), bound

"""One Insert request's acknowledgements: stored on the event loop when it is small and need
not wait, else in the data pool (see :class:`~ostinato.wire.service.ReplayService`)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import Executor
from typing import Any

from ostinato.wire.calls import Gone
from ostinato.wire.inserts import InsertSession

#: Insert requests up to this size are stored on the event loop (unless they must wait).
INLINE_BYTES = 64 * 1024
_DONE: Any = object()


def _drain(
    acks: Iterator[int | None], loop: asyncio.AbstractEventLoop, queue: asyncio.Queue
) -> None:
    """In the data pool: runs a request's store to its end, handing each ack (or the error)
    to the loop."""
    put = queue.put_nowait
    try:
        for n in acks:
            loop.call_soon_threadsafe(put, n)
            if n is None:
                return
    except BaseException as e:  # noqa: BLE001 - handed to the stream's coroutine
        loop.call_soon_threadsafe(put, e)
    finally:
        loop.call_soon_threadsafe(put, _DONE)


async def request_acks(
    session: InsertSession, raw: bytes, gone: Gone, pool: Executor
) -> AsyncIterator[int | None]:
    """Stores one request; yields its acks. A small request is handled on the loop until it
    would wait for a rate limiter (most never do: no thread hand-off, no queue); a large one,
    one whose rows come from a shared-memory ring, and the waiting rest of any go to
    ``pool``."""
    acks = session.handle(raw, gone.active)
    if len(raw) <= INLINE_BYTES and not session.ring_mapped:
        total = 0
        for n in acks:
            if n is None:
                if total:
                    yield total
                yield None
                return
            total += n
            if session.waiting:  # the client hears what is in before we wait
                yield total
                break
        else:
            # Stored whole without waiting: one ack, and the request is complete before the
            # client hears it (so a client that then ends its call at once is not counted as
            # having cancelled a request).
            session.complete = True
            yield total
            return
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue = asyncio.Queue()
    loop.run_in_executor(pool, _drain, acks, loop, queue)
    while True:
        n = await queue.get()
        if n is _DONE:
            return
        if isinstance(n, BaseException):
            raise n
        yield n
        if n is None:
            return

"""Where a writer's items go: the :class:`WriterStream` contract, and :class:`Delivery`, the
stream to tables in this process.

A writer hands each item it creates to its stream and forgets it; the stream delivers items in
order and counts those not yet in their tables. There is one queue per writer, in its stream,
with one bound (``max_pending``): a writer that runs ahead of its tables' rate limiters (or of
the network) blocks in ``insert`` instead of queueing without bound. Streams over the network
(``ostinato.wire.writer_stream``) keep their queue of requests in flight; :class:`Delivery`
inserts at once what the rate limiter admits and queues the rest for one thread that waits on
the limiter.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from ostinato import errors
from ostinato.core.client_stats import CLIENT
from ostinato.core.deadline import Deadline, wait_for

#: Items a writer may hold that its tables have not accepted yet, before ``create_item`` blocks
#: (in-process; over the network the gRPC transport's ``ClientOptions.max_in_flight_items``).
DEFAULT_MAX_PENDING_ITEMS = 10_000

#: An item as a stream carries it: (key, priority, packed trajectory, squeeze flags).
Item = tuple[Any, ...]


class WriterStream(Protocol):
    """One writer's connection to a server (or to the tables of this process)."""

    def insert(self, table: str, items: Sequence[Item], deadline: Deadline) -> None:
        """Takes ``items`` for delivery, in order, after those given before.

        Blocks while the stream holds its limit of undelivered items.

        Raises:
          DeadlineExceededError: the limit did not make room before ``deadline``.
          ReverbError: an earlier item could not be delivered (the stream has stopped).
        """

    def pending(self) -> int:
        """Items taken but not yet confirmed in their tables."""

    def wait(self, n: int, deadline: Deadline, what: str = "flush") -> None:
        """Waits until at most ``n`` items are pending.

        Raises:
          DeadlineExceededError: naming ``what`` and how many items are still pending.
        """

    def close(self) -> int:
        """Stops; items not yet sent are dropped. Returns how many were dropped."""


class InsertSink(Protocol):
    """Tables that :class:`Delivery` inserts into (an in-process transport)."""

    def inserter(self, table: str) -> Callable[[Sequence[Item]], int]:
        """``try_insert(items)`` for one table: inserts the prefix of ``items`` that the rate
        limiter admits now and returns its length (raises once the table is closed)."""

    def insert(self, table: str, items: Sequence[Item], deadline: Deadline) -> None: ...


class Delivery:
    """A :class:`WriterStream` to tables in this process.

    Items the rate limiter admits at once go straight in, from the writer's thread; the rest
    wait in one queue (at most ``max_pending`` items) that one background thread delivers in
    order, waiting on the rate limiter. If an item cannot be delivered (its table was closed,
    the server stopped) the thread stops and every later call raises
    ``FailedPreconditionError`` naming the cause.

    Args:
      sink: the tables (``inserter``/``insert`` of an in-process transport).
      max_pending: most items queued before ``insert`` blocks.
    """

    #: Items the thread inserts per call (runs of items for one table).
    BATCH = 256
    #: Longest single wait of the thread on a rate limiter, so that ``close()`` is noticed.
    SLICE = 0.5

    def __init__(self, sink: InsertSink, max_pending: int = DEFAULT_MAX_PENDING_ITEMS):
        self._sink = sink
        self._inserters: dict[str, Callable[[Sequence[Item]], int]] = {}
        self._max = max_pending
        self._queue: deque[tuple[str, Item]] = deque()
        self._queued_at: deque[tuple[float, int]] = deque()  # per insert() queued: (when, items)
        self._stats = CLIENT.register(getattr(sink, "address", "in-process"), self)
        self._cv = threading.Condition()
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        self._closed = False

    def pending(self) -> int:
        return len(self._queue)

    def insert(self, table: str, items: Sequence[Item], deadline: Deadline) -> None:
        if not self._queue and not self._error:
            inserter = self._inserters.get(table)
            if inserter is None:
                inserter = self._inserters[table] = self._sink.inserter(table)
            done = inserter(items)  # the usual case: admitted at once
            if done == len(items):
                return
            items = items[done:]
        with self._cv:
            q = self._queue
            wait_for(
                self._cv,
                lambda: len(q) < self._max or self._error is not None,
                deadline,
                lambda: errors.DeadlineExceededError(
                    f"{len(q)} items are waiting for their tables' rate limiters "
                    f"(max_pending_items={self._max})."
                ),
                self._raise_error,
                0.5,
            )
            self._queue.extend((table, it) for it in items)
            self._queued_at.append((time.monotonic(), len(items)))
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="ostinato-writer", daemon=True
                )
                self._thread.start()
            self._cv.notify_all()

    def wait(self, n: int, deadline: Deadline, what: str = "flush") -> None:
        with self._cv:
            q = self._queue
            wait_for(
                self._cv,
                lambda: len(q) <= n,
                deadline,
                lambda: errors.DeadlineExceededError(
                    f"{what}: {len(q)} items are not yet in their tables."
                ),
                self._raise_error,
                0.05,
            )

    def close(self) -> int:
        with self._cv:
            self._closed = True
            dropped = len(self._queue)
            self._queue.clear()
            self._queued_at.clear()
            self._cv.notify_all()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=5)
        return dropped

    def _raise_error(self) -> None:
        if self._error is not None:
            raise errors.FailedPreconditionError(
                f"The writer could not deliver an item and stopped: {self._error}"
            ) from self._error

    def _run(self) -> None:
        """Delivers queued items in order, waiting on the rate limiter in short slices."""
        while True:
            with self._cv:
                if self._closed or not self._queue:
                    self._thread = None
                    self._cv.notify_all()
                    return
                table = self._queue[0][0]
                batch: list[Item] = []
                for t, it in self._queue:  # deliver runs of items for one table together
                    if t != table or len(batch) >= self.BATCH:
                        break
                    batch.append(it)
            try:
                self._sink.insert(table, batch, Deadline.after(self.SLICE))
                done = len(batch)
            except errors.RateLimiterTimeout as e:
                done = len(getattr(e, "inserted", ()))
            except BaseException as e:  # noqa: BLE001 - handed to the writer's next call
                with self._cv:
                    self._error = e
                    self._thread = None
                    self._cv.notify_all()
                return
            if done:
                with self._cv:
                    if not self._closed:  # close() emptied the queue meanwhile
                        for _ in range(done):
                            self._queue.popleft()
                        self._delivered(done)
                    self._cv.notify_all()

    def _delivered(self, n: int) -> None:
        """Records, for monitoring, how long the ``n`` items just delivered waited: once per
        ``insert()`` whose items are now all in (lock held)."""
        q = self._queued_at
        now = time.monotonic()
        while n > 0 and q:
            at, size = q[0]
            if size <= n:
                q.popleft()
                n -= size
                self._stats.confirmed(now - at, size)
            else:
                q[0] = (at, size - n)
                n = 0

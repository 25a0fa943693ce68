"""The queue of one Insert stream (:mod:`ostinato.wire.writer_stream`), shared by the writers
that send through it: items waiting to be sent, requests in flight, and as the server confirms
items, each writer's count of items pending (the count ``flush`` waits on and the bound
``max_pending`` applies to).
"""

from __future__ import annotations

import inspect
import time
import weakref
from collections import deque
from collections.abc import Callable
from typing import Any

from ostinato.core.items import chunk_refs

#: Most items in one request.
MAX_REQUEST_ITEMS = 4096


class Share:
    """One writer's part of a shared Insert stream; guarded by the connection's lock.

    ``pending`` counts the writer's items from ``insert`` until the server confirms them (or
    ``close`` drops them); ``error`` is why the stream could not deliver them (raised by the
    writer's every later call); ``keep`` names the chunks its later items may still refer to.
    """

    __slots__ = ("__weakref__", "_keep", "closed", "error", "max_pending", "pending")

    def __init__(self, keep_keys: Callable[[], set[int]] | None, max_pending: int):
        self.pending = 0
        self.max_pending = max_pending
        self.error: BaseException | None = None
        self.closed = False
        # Weakly for a bound method: the stream must not keep an abandoned writer alive.
        self._keep: Callable[[], Callable[[], set[int]] | None]
        if keep_keys is None:
            self._keep = lambda: None
        elif inspect.ismethod(keep_keys):
            self._keep = weakref.WeakMethod(keep_keys)
        else:
            self._keep = lambda: keep_keys

    def keep(self) -> set[int]:
        f = self._keep()
        return set() if f is None else f()


Entry = tuple[str, tuple[Any, ...], Share]  # (table, item, the writer's share)


class Outbox:
    """Items of a stream's writers not yet confirmed by the server; every method is called with
    the connection's lock held."""

    def __init__(self, stats: Any = None) -> None:
        self.queue: deque[Entry] = deque()  # not sent yet
        self.in_flight: deque[list[Entry]] = deque()  # one batch per request awaiting its ack
        self.ring_cost: deque[int] = deque()  # ring bytes each request in flight holds
        self.sent_at: deque[tuple[float, int]] = deque()  # per request: (when sent, items)
        self._stats = stats  # ostinato.core.client_stats target: confirmation latency per request
        self.n_in_flight = 0
        self.n_encoding = 0  # items of the batch being encoded into a request
        self.retry_keys: set[int] = set()  # keys of items resent after a broken connection

    def pending(self) -> int:
        # Items being encoded count too: a flush must not see them as confirmed.
        return len(self.queue) + self.n_encoding + self.n_in_flight

    def take(self) -> list[Entry]:
        """The next batch to encode (everything queued, up to :data:`MAX_REQUEST_ITEMS`)."""
        q = self.queue
        batch = [q.popleft() for _ in range(min(len(q), MAX_REQUEST_ITEMS))]
        self.n_encoding = len(batch)
        return batch

    def sent(self, batch: list[Entry], ring_cost: int) -> None:
        self.n_encoding = 0
        self.in_flight.append(batch)
        self.ring_cost.append(ring_cost)
        self.sent_at.append((time.monotonic(), len(batch)))
        self.n_in_flight += len(batch)

    def unsent(self, batch: list[Entry]) -> None:
        """Puts a batch (or its tail) back at the front of the queue."""
        self.n_encoding = 0
        self.queue.extendleft(reversed(batch))

    def acked(self, n: int) -> int:
        """The server confirmed ``n`` more items (in order); returns the ring bytes of the
        requests now fully confirmed."""
        freed = 0
        while n > 0 and self.in_flight:
            b = self.in_flight[0]
            if len(b) <= n:
                for e in b:
                    e[2].pending -= 1
                self.in_flight.popleft()
                freed += self.ring_cost.popleft() if self.ring_cost else 0
                n -= len(b)
                self.n_in_flight -= len(b)
                if self.sent_at:
                    at, size = self.sent_at.popleft()
                    if self._stats is not None:
                        self._stats.confirmed(time.monotonic() - at, size)
            else:
                for e in b[:n]:
                    e[2].pending -= 1
                del b[:n]
                self.n_in_flight -= n
                n = 0
        return freed

    def requeue_in_flight(self) -> None:
        """Puts the unconfirmed items back in front of the queue, to be resent (with all their
        rows) on the next call; the server skips those it stored before the break."""
        for batch in reversed(self.in_flight):
            self.retry_keys.update(it[1][0] for it in batch)
            self.queue.extendleft(reversed(batch))
        self.in_flight.clear()
        self.ring_cost.clear()
        self.sent_at.clear()
        self.n_in_flight = 0

    def queued_chunk_keys(self) -> set[int]:
        return {c.key for _, (_, _, packed, _), _ in self.queue for c in chunk_refs(packed)}

    def drop(self, share: Share) -> int:
        """Removes ``share``'s items that are not sent yet; returns how many."""
        q = self.queue
        kept = [e for e in q if e[2] is not share]
        dropped = len(q) - len(kept)
        if dropped:
            q.clear()
            q.extend(kept)
            share.pending -= dropped
        return dropped

    def clear(self) -> list[Entry]:
        """Empties the queue and the requests in flight; returns their items."""
        gone = [e for b in self.in_flight for e in b] + list(self.queue)
        self.queue.clear()
        self.in_flight.clear()
        self.ring_cost.clear()
        self.sent_at.clear()
        self.n_in_flight = 0
        self.retry_keys.clear()
        return gone

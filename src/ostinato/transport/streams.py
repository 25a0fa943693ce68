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

import os
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from ostinato import errors
from ostinato.core.client_stats import CLIENT
from ostinato.core.deadline import Deadline, wait_for
from ostinato.core.locations import LocatedCall

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

    def inserter(self, table: str) -> Callable[..., int]:
        """``try_insert(items, located=None)`` for one table: inserts the prefix of ``items``
        that the rate limiter admits now and returns its length (raises once the table is
        closed). Items reach it only after the table's ``checker``: it need not check their
        priorities. ``located``: where the items have their rows, from their writer (see
        ``Table.try_insert_many``)."""

    def checker(self, table: str) -> Callable[[Sequence[Item]], None]:
        """``check(items)`` for one table: raises for a priority it cannot take."""

    def checks_only_nan(self, table: str) -> bool:
        """Whether :meth:`checker` refuses NaN priorities only, for ``table``."""

    def insert(self, table: str, items: Sequence[Item], deadline: Deadline) -> None: ...


#: Items a :class:`Delivery` holds before it inserts them into their table in one call. A
#: batch insert costs a table about 17 us plus 1 us per item (W9's items): 256 spend 6% of it
#: on the batch where 64 spent 20% (embedded W9 -13%, W1 -6% per item against 64). A slow
#: writer's items still wait at most :data:`HOLD_SECONDS`.
HOLD_ITEMS = 256
#: Longest an item is held (seconds) before it is inserted, whatever the writer does next.
HOLD_SECONDS = 0.002
#: A writer's calls read the clock once in this many (and at a batch's first item): a held
#: batch goes in at the first call at least :data:`HOLD_SECONDS` after its first item, among
#: every ``CLOCK_EVERY``-th call (the sweeper delivers it if the writer goes quiet). Reading
#: the clock cost about 400 CPU instructions, a twelfth of an in-process insert.
CLOCK_EVERY = 8


class Delivery:
    """A :class:`WriterStream` to tables in this process.

    Items are inserted in batches: a writer's items are held until :data:`HOLD_ITEMS` are
    there, the writer names another table, ``flush``/``close`` is called, or the first of them
    has waited :data:`HOLD_SECONDS` (one thread per process, :class:`_Sweeper`, delivers those
    whose writer went quiet). A batch costs a table far less per item than single inserts.
    Reverb's writers also send items after ``create_item`` returns; ``flush`` is the call
    that waits until they are in their tables. A priority the table cannot take is refused
    when the item is created, as before.

    Items the rate limiter admits go straight in; the rest wait in one queue (at most
    ``max_pending`` items) that one background thread delivers in order, waiting on the rate
    limiter. If an item cannot be delivered (its table was closed, the server stopped) the
    thread stops and every later call raises ``FailedPreconditionError`` naming the cause.

    Args:
      sink: the tables (``inserter``/``checker``/``insert`` of an in-process transport).
      max_pending: most items queued before ``insert`` blocks.
    """

    #: ``insert`` takes where the items have their rows (``located``), which a vector writer
    #: works out (:mod:`ostinato.writers.vector_rows`).
    takes_located_calls = True
    #: ``insert`` takes ``nan_checked`` (a writer that checked its priorities for NaN).
    takes_nan_checked = True
    #: Items the thread inserts per call (runs of items for one table).
    BATCH = 256
    #: Longest single wait of the thread on a rate limiter, so that ``close()`` is noticed.
    SLICE = 0.5

    def __init__(self, sink: InsertSink, max_pending: int = DEFAULT_MAX_PENDING_ITEMS):
        self._sink = sink
        self._inserters: dict[str, Callable[..., int]] = {}
        self._checkers: dict[str, Callable[[Sequence[Item]], None]] = {}
        self._max = max_pending
        self._queue: deque[tuple[str, Item]] = deque()
        self._queued_at: deque[tuple[float, int]] = deque()  # per insert() queued: (when, items)
        self._stats = CLIENT.register(getattr(sink, "address", "in-process"), self)
        self._cv = threading.Condition()
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        self._closed = False
        # Items held for the next batch, all for one table; the lock is taken before _cv.
        self._held: list[Item] = []
        # Where the held items have their rows, one entry per insert() (None: not known for
        # every one of them).
        self._held_located: list[LocatedCall] | None = None
        self._held_table = ""
        self._held_since = 0.0
        self._held_lock = threading.Lock()
        #: Tables whose check refuses NaN priorities only (see ``insert``'s ``nan_checked``).
        self._nan_only: set[str] = set()
        #: Calls of ``insert`` since the clock was last read (see :data:`CLOCK_EVERY`).
        self._unclocked = 0
        #: Held items at which ``insert`` delivers them (:meth:`_hold_limit`).
        self._flush_at = HOLD_ITEMS

    def pending(self) -> int:
        return len(self._queue) + len(self._held)

    def insert(
        self,
        table: str,
        items: Sequence[Item],
        deadline: Deadline,
        located: LocatedCall | None = None,
        nan_checked: bool = False,
    ) -> None:
        """See :class:`WriterStream`. ``located``: where ``items`` have their rows, from their
        writer; handed to the table with them when they go in as one batch. ``nan_checked``:
        the caller made sure no priority is NaN, all a table without a Prioritized selector
        would check."""
        if self._error is not None:
            with self._cv:
                self._raise_error()
        if not (nan_checked and table in self._nan_only):  # (only tables set up below)
            check = self._checkers.get(table)
            if check is None:
                check = self._checkers[table] = self._sink.checker(table)
                self._inserters[table] = self._sink.inserter(table)
                if self._sink.checks_only_nan(table):
                    self._nan_only.add(table)
            check(items)  # a bad priority is refused now, before anything of this call is held
        lock = self._held_lock
        lock.acquire()  # not `with`: half the cost, paid on every item of a writer
        try:
            held = self._held
            if held:
                if self._held_table != table:
                    self._take_and_deliver(deadline, 0)
                else:
                    n = self._unclocked + 1
                    if n < CLOCK_EVERY:
                        self._unclocked = n
                    else:
                        self._unclocked = 0
                        if time.monotonic() - self._held_since > HOLD_SECONDS:
                            self._take_and_deliver(deadline, 0)
            first = not held
            if first:
                self._held_table, self._held_since = table, time.monotonic()
                self._unclocked = 0
                self._held_located = []
                self._flush_at = self._hold_limit()
            runs = self._held_located
            if runs is not None:
                if located is None:
                    self._held_located = None
                else:
                    runs.append(located)
            held.extend(items)
            if len(held) >= self._flush_at:
                self._take_and_deliver(deadline, len(items))
            elif first:  # after extend: the sweeper drops a delivery it finds with none held
                _SWEEPER.watch(self)
        finally:
            lock.release()

    def _hold_limit(self) -> int:
        """Held items at which ``insert`` delivers them: :data:`HOLD_ITEMS`, or fewer when
        they and the queue would pass ``max_pending`` items. Computed when a batch starts
        (held lock taken): while items are held the queue can only shrink (it grows when
        held items are delivered), so the limit is never too high, at worst early."""
        return min(HOLD_ITEMS, self._max - len(self._queue))

    def _take(self) -> tuple[str, list[Item], list[LocatedCall] | None]:
        """Empties the held batch (held lock taken); returns its table, items and where they
        have their rows (or None)."""
        items = self._held[:]
        self._held.clear()
        located, self._held_located = self._held_located, None
        return self._held_table, items, located

    def _fail(self, e: BaseException) -> None:
        """Records the error that stops delivery; the writer's next call raises it."""
        with self._cv:
            if self._error is None:
                self._error = e
            self._cv.notify_all()

    def _take_and_deliver(self, deadline: Deadline, own: int) -> None:
        """Delivers the held items (held lock taken). ``own``: how many of them, at the end,
        are the current ``insert`` call's: if the deadline passes while they wait for room in
        the queue, those not stored are dropped (the call raises, as for a single item) and
        the earlier ones are held again."""
        table, items, located = self._take()
        try:
            self._deliver(table, items, deadline, located)
        except errors.DeadlineExceededError as e:
            left = getattr(e, "undelivered", 0)
            keep = items[len(items) - left : len(items) - own] if left > own else []
            self._held[:0] = keep
            self._flush_at = self._hold_limit()
            if keep:
                self._held_since = time.monotonic()
                _SWEEPER.watch(self)
            raise

    def release(self, now: float) -> bool:
        """Delivers held items that waited :data:`HOLD_SECONDS` (the sweeper's call; never
        blocks on the writer or on room in the queue). Returns whether items remain held."""
        if not self._held_lock.acquire(blocking=False):
            return True  # the writer is in a call: it will deliver or come back
        try:
            if self._held and now - self._held_since >= HOLD_SECONDS:
                table, items, located = self._take()
                try:
                    self._deliver(table, items, None, located)
                except BaseException as e:  # noqa: BLE001 - handed to the writer's next call
                    self._fail(e)
            return bool(self._held)
        finally:
            self._held_lock.release()

    def _deliver(
        self,
        table: str,
        items: Sequence[Item],
        deadline: Deadline | None,
        located: list[LocatedCall] | None = None,
    ) -> None:
        """Inserts what the rate limiter admits now and queues the rest for the thread;
        ``deadline=None`` queues without waiting for room."""
        if not self._queue and not self._error:
            # The usual case: admitted at once.
            done = self._inserters[table](items, located=located)
            if done == len(items):
                return
            items = items[done:]
        with self._cv:
            q = self._queue
            if deadline is not None:
                try:
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
                except errors.DeadlineExceededError as e:
                    e.undelivered = len(items)  # type: ignore[attr-defined]
                    raise
            elif self._error is not None:
                self._raise_error()
            self._queue.extend((table, it) for it in items)
            self._queued_at.append((time.monotonic(), len(items)))
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="ostinato-writer", daemon=True
                )
                self._thread.start()
            self._cv.notify_all()

    def wait(self, n: int, deadline: Deadline, what: str = "flush") -> None:
        # Counted with the held lock taken: the sweeper holds it from taking held items until
        # they are in their table or queued (counted without it, items it had taken but not
        # yet inserted were in neither list, and a flush could return before them).
        lock = self._held_lock
        lock.acquire()
        try:
            if len(self._held) + len(self._queue) <= n and self._error is None:
                return  # nothing to deliver or wait for (Acme's adders flush after each item)
            if self._held:
                self._take_and_deliver(deadline, 0)
        finally:
            lock.release()
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
        with self._held_lock:  # held items go in as they would have: what the limiter admits
            table, items, _ = self._take()
        dropped = 0
        if items and self._error is None and not self._queue:
            try:
                dropped = len(items) - self._inserters[table](items)
            except BaseException:  # noqa: BLE001 - the tables are gone: nothing was stored
                dropped = len(items)
        else:
            dropped = len(items)
        with self._cv:
            self._closed = True
            dropped += len(self._queue)
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
                    self._thread = None
                self._fail(e)
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


class _Sweeper:
    """One thread per process that delivers items a :class:`Delivery` held for
    :data:`HOLD_SECONDS` (its writer went quiet). It sleeps while no items are held."""

    def __init__(self) -> None:
        self._cv = threading.Condition()
        self._watched: set[Delivery] = set()
        self._thread: threading.Thread | None = None

    def watch(self, delivery: Delivery) -> None:
        """``delivery`` now holds items (called once per batch, not per item)."""
        with self._cv:
            self._watched.add(delivery)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="ostinato-deliver", daemon=True
                )
                self._thread.start()
            self._cv.notify()

    def _run(self) -> None:
        while True:
            with self._cv:
                while not self._watched:
                    self._cv.wait()
            time.sleep(HOLD_SECONDS)
            with self._cv:
                watched = list(self._watched)
            now = time.monotonic()
            idle = [d for d in watched if not d.release(now)]
            with self._cv:  # a writer holding items again has called watch() or will
                self._watched.difference_update(d for d in idle if not d._held)

    def after_fork(self) -> None:
        """In a forked child the thread is gone: start afresh."""
        self._cv = threading.Condition()
        self._watched = set()
        self._thread = None


_SWEEPER = _Sweeper()
os.register_at_fork(after_in_child=_SWEEPER.after_fork)

"""Where a table's callers wait: its lock, the condition variables, lingering samplers, wake-ups.

Only tables block (see docs/architecture.md, "blocking lives in one place"). A call that the rate
limiter does not admit waits on :attr:`Gate.cond` until another call changes the table, the table is
closed, or its deadline passes; the timeout error says what it waited for. A remote sampler
that was admitted fewer items than it asked for may *linger* a few milliseconds for the rest, on
a condition of its own, so that inserts do not pay a thread switch each to wake it.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable
from typing import Any

from ostinato import errors
from ostinato.core.deadline import Deadline


@dataclasses.dataclass(frozen=True)
class WaitStats:
    """Who is waiting on a table's rate limiter, and for how long they have waited.

    Attributes:
      blocked_inserters: calls waiting to insert now.
      blocked_samplers: calls waiting to sample now.
      insert_wait_seconds: total seconds calls have waited to insert (waits still going on
        count up to now).
      sample_wait_seconds: the same for samples.
    """

    blocked_inserters: int = 0
    blocked_samplers: int = 0
    insert_wait_seconds: float = 0.0
    sample_wait_seconds: float = 0.0


class _Waits:
    """Counters of one kind of wait (inserts or samples), kept under the table lock.

    The time waited is kept as the total of finished waits plus, for waits going on, the sum
    of their start times, so that it can be read at any moment in O(1)."""

    __slots__ = ("now", "started_sum", "finished_seconds")

    def __init__(self) -> None:
        self.now = 0
        self.started_sum = 0.0
        self.finished_seconds = 0.0

    def seconds(self, now: float) -> float:
        return self.finished_seconds + self.now * now - self.started_sum


class Gate:
    """The lock of one table and the waits on it. Every method but :meth:`close` is called
    with :attr:`lock` held.

    Args:
      name: the table's name, for error messages.
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self.lock = threading.Lock()
        self.cond = threading.Condition(self.lock)
        # Samplers lingering for a fuller batch wait on their own condition, woken only when
        # their batch is admitted, an insert has to wait, or the table changes otherwise (not
        # by every insert: that would cost a thread switch per insert).
        self._linger_cond = threading.Condition(self.lock)
        self._lingering: list[int] = []  # the batch size each lingering sampler waits for
        self._waiting = 0  # threads blocked in wait()
        self._insert_waits = _Waits()  # for monitoring (ostinato.ops): who waits, how long
        self._sample_waits = _Waits()
        self.closed = False

    def check_open(self) -> None:
        if self.closed:
            raise errors.CancelledError(f"Table {self.name!r} has been closed.")

    def close(self) -> None:
        """Wakes every waiting call with ``CancelledError``; later calls fail the same way."""
        with self.lock:
            self.closed = True
            self.notify_all()

    # -- waiting -------------------------------------------------------------------------------
    def wait(
        self,
        ready: Callable[[], bool],
        deadline: Deadline,
        what: str,
        describe: Callable[[], str],
        done: list[Any] | None = None,
    ) -> None:
        """Waits until ``ready()``.

        Raises:
          CancelledError: the table was closed meanwhile.
          RateLimiterTimeout: the deadline passed first; the message ends with ``describe()``
            (the limiter's counters) and ``err.inserted`` holds ``done`` (what the call had
            already done).
        """
        waits: _Waits | None = None  # set once the call really waits (not for a try)
        started = 0.0
        try:
            while not ready():
                if self.closed:
                    raise errors.CancelledError(
                        f"Table {self.name!r} was closed while waiting to {what}."
                    )
                remaining = deadline.remaining()
                if remaining is not None and remaining <= 0:
                    err = errors.RateLimiterTimeout(
                        f"Rate limiter of table {self.name!r} did not allow the {what} before "
                        f"the deadline ({describe()})."
                    )
                    err.inserted = list(done or [])  # type: ignore[attr-defined]
                    raise err
                if waits is None:
                    waits = self._insert_waits if what == "insert" else self._sample_waits
                    started = time.monotonic()
                    waits.now += 1
                    waits.started_sum += started
                self._waiting += 1
                try:
                    self.cond.wait(remaining if remaining is not None else 1.0)
                finally:
                    self._waiting -= 1
        finally:
            if waits is not None:  # the lock is held again here
                waits.now -= 1
                # (exactly 0 when nobody waits: no rounding drift over a long run)
                waits.started_sum = waits.started_sum - started if waits.now else 0.0
                waits.finished_seconds += time.monotonic() - started

    def wait_stats(self) -> WaitStats:
        """The current :class:`WaitStats` (caller holds :attr:`lock`)."""
        now = time.monotonic()
        i, s = self._insert_waits, self._sample_waits
        return WaitStats(i.now, s.now, i.seconds(now), s.seconds(now))

    def linger(self, n: int, seconds: float, deadline: Deadline, short: Callable[[], bool]) -> None:
        """Waits up to ``seconds`` (and within ``deadline``) while ``short()``: a sampler that
        was admitted fewer than the ``n`` items it asked for, waiting for the rest."""
        end = time.monotonic() + seconds
        remaining = deadline.remaining()
        if remaining is not None:
            end = min(end, time.monotonic() + remaining)
        while not self.closed and short():
            left = end - time.monotonic()
            if left <= 0:
                return
            self._lingering.append(n)
            try:
                self._linger_cond.wait(left)
            finally:
                self._lingering.remove(n)

    def wait_to_sample(
        self,
        n: int,
        allowed: Callable[[int], int],
        deadline: Deadline,
        describe: Callable[[], str],
        cancelled: Callable[[], bool] | None,
        linger: float,
        can_insert: Callable[[int], bool],
    ) -> bool:
        """Waits until at least one of ``n`` samples is ``allowed``; then, if fewer than ``n``
        are and ``linger`` > 0, lingers once for the rest (while inserts are not blocked).
        Stops early once ``cancelled()``. Returns whether the call had to wait."""
        waited = False
        while True:
            if allowed(1) < 1:
                waited = True
                if cancelled is None:
                    self.wait(lambda: allowed(1) >= 1, deadline, "sample", describe)
                else:
                    self.wait(lambda: cancelled() or allowed(1) >= 1, deadline, "sample", describe)
            if linger > 0 and n > 1 and allowed(n) < n:
                self.linger(
                    n,
                    linger,
                    deadline,
                    lambda: (
                        allowed(n) < n
                        and not (cancelled is not None and cancelled())
                        and can_insert(1)
                    ),
                )
                linger = 0.0  # once: then take what is admitted (or wait again if others
                continue  # sampled everything meanwhile)
            return waited

    # -- waking --------------------------------------------------------------------------------
    def notify_all(self) -> None:
        """Wakes every blocked and lingering call (the table changed in some other way)."""
        self.cond.notify_all()
        if self._lingering:
            self._linger_cond.notify_all()

    def notify_waiters(self) -> None:
        """Wakes blocked calls (not lingering ones)."""
        if self._waiting:
            self.cond.notify_all()

    def notify_inserted(
        self, admitted: Callable[[int], int], inserts_blocked: Callable[[], bool]
    ) -> None:
        """After inserts: wakes blocked calls, and lingering samplers whose batch is now
        ``admitted`` -- or all of them if inserts now block (a lingering sampler must not hold
        writers back)."""
        if self._waiting:
            self.cond.notify_all()
        if self._lingering:
            n = min(self._lingering)
            if admitted(n) >= n or inserts_blocked():
                self._linger_cond.notify_all()

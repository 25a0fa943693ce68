"""One deadline type used by every blocking call."""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable


class Deadline:
    """A point in time on the monotonic clock, or "never".

    Public APIs accept Reverb's styles (``timeout_ms``, ``timeout`` in seconds, ``None``); they
    convert to a Deadline once at the edge and pass it down. Milliseconds are converted in one
    place, :meth:`from_ms`, with one rule everywhere: ``None`` or negative waits forever, ``0``
    means "now" (Reverb treated 0 as forever in some calls and not in others).
    """

    __slots__ = ("_at",)

    def __init__(self, at: float | None):
        self._at = at

    @classmethod
    def never(cls) -> Deadline:
        return cls(None)

    @classmethod
    def after(cls, seconds: float | None) -> Deadline:
        """``None`` means no deadline; 0 or less means already expired."""
        if seconds is None or math.isinf(seconds):
            return cls(None)
        return cls(time.monotonic() + max(0.0, float(seconds)))

    @classmethod
    def from_ms(cls, timeout_ms: int | float | None) -> Deadline:
        """``None`` or negative: no deadline; ``0``: already expired; else milliseconds from now."""
        return cls.after(seconds_from_ms(timeout_ms))

    @property
    def is_never(self) -> bool:
        return self._at is None

    def remaining(self) -> float | None:
        """Seconds left (>= 0), or ``None`` if there is no deadline."""
        if self._at is None:
            return None
        return max(0.0, self._at - time.monotonic())

    def expired(self) -> bool:
        return self._at is not None and time.monotonic() >= self._at

    def __repr__(self) -> str:
        r = self.remaining()
        return "Deadline(never)" if r is None else f"Deadline(in {r:.3f}s)"


def seconds_from_ms(timeout_ms: int | float | None) -> float | None:
    """Milliseconds as seconds, by :meth:`Deadline.from_ms`'s rule (``None``: no limit)."""
    if timeout_ms is None or timeout_ms < 0:
        return None
    return timeout_ms / 1000.0


def wait_for(
    cv: threading.Condition,
    done: Callable[[], bool],
    deadline: Deadline,
    expired: Callable[[], BaseException],
    check: Callable[[], None] | None = None,
    slice_s: float = 0.2,
) -> None:
    """Waits, with ``cv`` held, until ``done()``.

    ``check()`` runs before each wait and once more at the end; it raises to stop the wait
    (an error another thread reported). When the deadline passes first, ``expired()`` is
    raised. The condition is waited on in slices of ``slice_s`` seconds, so a state change
    that was not notified is still seen.
    """
    while not done():
        if check is not None:
            check()
        r = deadline.remaining()
        if r is not None and r <= 0:
            raise expired()
        cv.wait(slice_s if r is None else min(r, slice_s))
    if check is not None:
        check()

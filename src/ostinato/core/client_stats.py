"""Plain counters of a client process, read by monitoring (:mod:`ostinato.ops.metrics`).

Writers' streams register here while they live, so that the items they hold can be counted
when someone asks (nothing is counted per item on the way); each stream records, per request
or delivered batch, how long its items took to be confirmed in a :class:`Histogram`. No
Prometheus here: :mod:`ostinato.ops.metrics` turns these into metric families at scrape time.
"""

from __future__ import annotations

import bisect
import threading
import weakref
from collections.abc import Sequence
from typing import Any, Protocol

#: Upper bounds (seconds) of the confirmation-latency buckets: 100 us to 60 s.
LATENCY_BUCKETS: tuple[float, ...] = (
    0.0001,
    0.00025,
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
)


class Histogram:
    """Counts of observations per bucket, their sum and count. Thread-safe.

    Args:
      bounds: increasing upper bounds; a last ``+inf`` bucket is implied.
    """

    def __init__(self, bounds: Sequence[float] = LATENCY_BUCKETS):
        b = [float(x) for x in bounds]
        if not b or any(x >= y for x, y in zip(b, b[1:])):
            raise ValueError(f"bounds ({list(bounds)!r}) must be non-empty and increasing")
        self.bounds = tuple(b)
        self._counts = [0] * (len(b) + 1)
        self._sum = 0.0
        self._lock = threading.Lock()

    def observe_with(self, value: float, counters: list[int], adds: Sequence[int]) -> None:
        """Observes ``value`` and adds ``adds`` to ``counters`` under the same lock."""
        i = bisect.bisect_left(self.bounds, value)
        with self._lock:
            self._counts[i] += 1
            self._sum += value
            for j, a in enumerate(adds):
                counters[j] += a

    def snapshot(self) -> dict[str, Any]:
        """``{"bounds", "counts" (per bucket, the last one +inf), "sum", "count"}``."""
        with self._lock:
            counts = list(self._counts)
            total = self._sum
        return {"bounds": list(self.bounds), "counts": counts, "sum": total, "count": sum(counts)}


class _Stream(Protocol):
    def pending(self) -> int: ...


class _Target:
    """What the writer streams to one address have done."""

    __slots__ = ("latency", "counts", "streams")

    def __init__(self) -> None:
        self.latency = Histogram()
        self.counts = [0, 0]  # requests (or delivered batches) confirmed, items confirmed
        self.streams: weakref.WeakSet[Any] = weakref.WeakSet()

    def confirmed(self, seconds: float, items: int) -> None:
        """A request (or a batch delivered in process) of ``items`` items was confirmed
        ``seconds`` after it was sent (queued)."""
        self.latency.observe_with(seconds, self.counts, (1, items))


class ClientStats:
    """Process-wide counters of writer streams, per server address."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._targets: dict[str, _Target] = {}

    def target(self, address: str) -> _Target:
        """The counters of streams to ``address`` (created on first use)."""
        t = self._targets.get(address)
        if t is None:
            with self._lock:
                t = self._targets.setdefault(address, _Target())
        return t

    def register(self, address: str, stream: _Stream) -> _Target:
        """Counts ``stream`` (weakly: a stream that is gone is no longer counted)."""
        t = self.target(address)
        with self._lock:
            t.streams.add(stream)
        return t

    def snapshot(self) -> dict[str, dict[str, Any]]:
        """Per address: live ``streams``, items ``pending`` in them, items ``confirmed`` and
        ``requests`` confirmed so far, and the ``latency`` histogram (seconds from a request
        being sent, or items being queued in process, to their confirmation)."""
        with self._lock:
            targets = list(self._targets.items())
            live = {a: list(t.streams) for a, t in targets}
        out = {}
        for address, t in targets:
            streams = live[address]
            pending = 0
            for s in streams:
                try:
                    pending += int(s.pending())
                except Exception:  # noqa: BLE001 - a stream closing meanwhile
                    continue
            lat = t.latency.snapshot()
            out[address] = {
                "streams": len(streams),
                "pending": pending,
                "requests": t.counts[0],
                "confirmed": t.counts[1],
                "latency": lat,
            }
        return out


#: The counters of this process.
CLIENT = ClientStats()

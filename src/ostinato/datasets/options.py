"""Options of a :class:`~ostinato.datasets.stream.SampleStream`, with Reverb's names and
meanings."""

from __future__ import annotations

import dataclasses
import operator
from typing import Any

from ostinato.core.deadline import seconds_from_ms

#: Reverb's default for ``max_samples_per_stream`` (``-1``).
DEFAULT_MAX_SAMPLES_PER_STREAM = 10_000


def _int(value: Any, name: str) -> int:
    if isinstance(value, bool):
        raise ValueError(f"{name} ({value!r}) must be an integer, not a bool")
    try:
        return operator.index(value)
    except TypeError:
        raise ValueError(f"{name} ({value!r}) must be an integer") from None


@dataclasses.dataclass(frozen=True)
class StreamOptions:
    """How a sampler fetches items. Arguments are validated as Reverb validates them.

    Attributes:
      max_in_flight_samples_per_worker: items a worker asks for in one request; the sampler
        holds at most ``max_in_flight_samples_per_worker * num_workers`` fetched or requested
        items that the consumer has not taken yet (this bounds prefetching). Must be >= 1.
      num_workers_per_iterator: worker threads fetching in parallel. ``-1`` (default) picks
        one worker for a table in this process and two for a server reached over the
        network (so that one request travels while the other is decoded). Tables whose
        sampler is deterministic (Fifo, Lifo, MinHeap, MaxHeap) or whose items are deleted
        after ``max_times_sampled`` samples always get one worker, so that order is kept.
        With ``max_samples`` set, never more than
        ``max(1, max_samples // max_in_flight_samples_per_worker)`` workers (Reverb's rule).
      max_samples_per_stream: Reverb re-opened a worker's gRPC stream after this many
        samples. Ostinato's requests are independent (for sharded clients each goes to the
        next server), so it only caps a request's size. ``-1`` means Reverb's default,
        10,000.
      rate_limiter_timeout_ms: how long a request may wait for the table's rate limiter.
        When it expires while the consumer is waiting for data, the stream ends cleanly:
        items already sampled are still delivered, then iteration stops. ``-1`` waits forever.
        ``0`` ends the stream as soon as the table has nothing to give, in this process and
        over the network alike (Reverb waited forever over the network).
      max_samples: total items the stream returns; ``-1`` means no limit. The sampler never
        requests more than this from the table, so a queue table loses nothing beyond it.
    """

    max_in_flight_samples_per_worker: int = 100
    num_workers_per_iterator: int = -1
    max_samples_per_stream: int = -1
    rate_limiter_timeout_ms: int = -1
    max_samples: int = -1

    def __post_init__(self) -> None:
        inflight = _int(self.max_in_flight_samples_per_worker, "max_in_flight_samples_per_worker")
        if inflight < 1:
            raise ValueError(
                f"max_in_flight_samples_per_worker ({inflight}) must be a positive integer"
            )
        for name in ("num_workers_per_iterator", "max_samples_per_stream", "max_samples"):
            v = _int(getattr(self, name), name)
            if v < 1 and v != -1:
                raise ValueError(f"{name} ({v}) must be a positive integer or -1")
        timeout = _int(self.rate_limiter_timeout_ms, "rate_limiter_timeout_ms")
        if timeout < -1:
            raise ValueError(f"rate_limiter_timeout_ms ({timeout}) must be an integer >= -1")

    @property
    def samples_per_stream(self) -> int:
        """``max_samples_per_stream`` with ``-1`` resolved to Reverb's default."""
        s = int(self.max_samples_per_stream)
        return DEFAULT_MAX_SAMPLES_PER_STREAM if s == -1 else s

    def num_workers(self, *, ordered: bool, remote: bool) -> int:
        """The number of worker threads to start.

        Args:
          ordered: the table's order must be kept (deterministic sampler or
            ``max_times_sampled``): always one worker.
          remote: the table is reached over the network.
        """
        if ordered:
            return 1
        n = int(self.num_workers_per_iterator)
        if n == -1:
            n = 2 if remote else 1
        if self.max_samples != -1:
            n = min(n, max(1, int(self.max_samples) // int(self.max_in_flight_samples_per_worker)))
        return max(1, n)

    def deadline_seconds(self) -> float | None:
        """The rate limiter timeout in seconds (``None`` for no timeout)."""
        return seconds_from_ms(int(self.rate_limiter_timeout_ms))

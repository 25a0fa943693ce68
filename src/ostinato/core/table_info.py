"""What a table reports about itself: ``TableInfo`` and the plain look-alikes of Reverb's
protobuf messages inside it (``KeyDistributionOptions``, ``RateLimiterInfo``, ...)."""

from __future__ import annotations

import dataclasses
from typing import Any


@dataclasses.dataclass(frozen=True)
class PrioritizedOptions:
    priority_exponent: float


@dataclasses.dataclass(frozen=True)
class HeapOptions:
    min_heap: bool


@dataclasses.dataclass(frozen=True)
class KeyDistributionOptions:
    """Which selector a table uses, in the shape of Reverb's ``KeyDistributionOptions`` proto.

    Exactly one of ``fifo``, ``uniform``, ``prioritized``, ``heap``, ``lifo`` is set;
    ``WhichOneof('distribution')`` names it, as with the protobuf message.
    """

    fifo: bool = False
    uniform: bool = False
    lifo: bool = False
    prioritized: PrioritizedOptions | None = None
    heap: HeapOptions | None = None
    is_deterministic: bool = False

    def WhichOneof(self, name: str) -> str | None:  # noqa: N802 - protobuf's spelling
        if name != "distribution":
            raise ValueError(f"KeyDistributionOptions has no oneof named {name!r}")
        for field in ("fifo", "uniform", "lifo", "prioritized", "heap"):
            if getattr(self, field):
                return field
        return None

    def HasField(self, name: str) -> bool:  # noqa: N802 - protobuf's spelling
        return bool(getattr(self, name))


@dataclasses.dataclass(frozen=True)
class RateLimiterCallStats:
    completed: int = 0


@dataclasses.dataclass(frozen=True)
class RateLimiterInfo:
    """Configuration and lifetime counters of a table's rate limiter."""

    samples_per_insert: float
    min_diff: float
    max_diff: float
    min_size_to_sample: int
    insert_stats: RateLimiterCallStats = RateLimiterCallStats()
    sample_stats: RateLimiterCallStats = RateLimiterCallStats()
    delete_count: int = 0


@dataclasses.dataclass(frozen=True)
class TableWorkerTime:
    """Kept for Reverb compatibility; Ostinato tables have no worker thread, so all zero."""

    running_ms: int = 0
    sampling_ms: int = 0
    inserting_ms: int = 0
    sleeping_ms: int = 0
    waiting_for_sampling_ms: int = 0
    waiting_for_inserts_ms: int = 0


@dataclasses.dataclass(frozen=True)
class TableInfo:
    """A snapshot of a table's configuration and statistics (Reverb's ``TableInfo``)."""

    name: str
    sampler_options: KeyDistributionOptions
    remover_options: KeyDistributionOptions
    max_size: int
    max_times_sampled: int
    rate_limiter_info: RateLimiterInfo
    signature: Any
    current_size: int
    num_episodes: int
    num_deleted_episodes: int
    num_unique_samples: int
    table_worker_time: TableWorkerTime = TableWorkerTime()

"""Rate limiters: when a table may take an insert or give a sample.

The formulas are Reverb's (``reverb/cc/rate_limiter.cc``):

* ``can_insert(n)``: true while ``inserts + n - deletes <= min_size_to_sample``; otherwise true iff
  ``(inserts + n) * samples_per_insert - samples <= max_diff``.
* ``can_sample(n)``: false while ``inserts - deletes < min_size_to_sample``; otherwise true iff
  ``inserts * samples_per_insert - samples - n >= min_diff``.

A limiter is passive: the owning table calls it under its lock. Unlike Reverb, bad values raise
``ValueError`` instead of aborting the process, and one limiter cannot be attached to two tables.
"""

from __future__ import annotations

import logging
import math
import operator
import sys
import threading

from ostinato.core.table_info import RateLimiterCallStats, RateLimiterInfo
from ostinato.validate import positive_int

_log = logging.getLogger(__name__)
_MAX = sys.float_info.max


def _as_int(value: object, name: str) -> int:
    if isinstance(value, bool):
        raise ValueError(f"{name} ({value!r}) must be a positive integer")
    if isinstance(value, float) and value.is_integer():
        return int(value)
    try:
        return operator.index(value)  # type: ignore[arg-type]
    except TypeError:
        raise ValueError(f"{name} ({value!r}) must be a positive integer") from None


def _fmt(x: float) -> str:
    return f"{x:g}"


class RateLimiter:
    """Base rate limiter; directly usable (as Reverb's ``Table.replace`` does).

    Args:
      samples_per_insert: average number of samples per inserted item; must be > 0.
      min_size_to_sample: the table must hold at least this many items before sampling; >= 1.
      min_diff: lower bound of ``inserts * samples_per_insert - samples`` for sampling.
      max_diff: upper bound of ``inserts * samples_per_insert - samples`` for inserting.
    """

    def __init__(
        self, samples_per_insert: float, min_size_to_sample: int, min_diff: float, max_diff: float
    ):
        min_size_to_sample = _as_int(min_size_to_sample, "min_size_to_sample")
        if min_size_to_sample < 1:
            raise ValueError(
                f"min_size_to_sample ({min_size_to_sample}) must be a positive integer"
            )
        samples_per_insert = float(samples_per_insert)
        if not samples_per_insert > 0 or math.isinf(samples_per_insert):
            raise ValueError(f"samples_per_insert ({samples_per_insert}) must be > 0 and finite")
        min_diff, max_diff = float(min_diff), float(max_diff)
        if math.isnan(min_diff) or math.isnan(max_diff):
            raise ValueError(f"min_diff ({min_diff}) and max_diff ({max_diff}) must not be NaN")
        if min_diff > max_diff:
            raise ValueError(f"min_diff ({min_diff}) must be <= max_diff ({max_diff})")
        self._samples_per_insert = samples_per_insert
        self._min_size_to_sample = min_size_to_sample
        self._min_diff = min_diff
        self._max_diff = max_diff
        self.inserts = 0
        self.samples = 0
        self.deletes = 0
        self._owner: str | None = None
        self._owner_lock = threading.Lock()

    # -- configuration -------------------------------------------------------------------------
    samples_per_insert = property(lambda self: self._samples_per_insert)
    min_size_to_sample = property(lambda self: self._min_size_to_sample)
    min_diff = property(lambda self: self._min_diff)
    max_diff = property(lambda self: self._max_diff)

    def attach(self, table_name: str) -> None:
        """Binds the limiter to one table; a second table is refused (Reverb aborted here)."""
        with self._owner_lock:
            if self._owner is not None:
                raise ValueError(
                    f"this rate limiter is already used by table {self._owner!r}; "
                    f"table {table_name!r} needs its own rate limiter object"
                )
            self._owner = table_name

    def clone(self) -> RateLimiter:
        """A fresh limiter with the same configuration and zero counters."""
        return RateLimiter(
            self._samples_per_insert, self._min_size_to_sample, self._min_diff, self._max_diff
        )

    # -- queries (caller holds the table lock) --------------------------------------------------
    def can_insert(self, n: int = 1) -> bool:
        if n < 1:
            raise ValueError(f"num_inserts ({n}) must be >= 1")
        if self.inserts + n - self.deletes <= self._min_size_to_sample:
            return True
        return (self.inserts + n) * self._samples_per_insert - self.samples <= self._max_diff

    def can_sample(self, n: int = 1) -> bool:
        if n < 1:
            raise ValueError(f"num_samples ({n}) must be >= 1")
        if self.inserts - self.deletes < self._min_size_to_sample:
            return False
        return self.inserts * self._samples_per_insert - self.samples - n >= self._min_diff

    def num_samples_allowed(self, limit: int) -> int:
        """The largest ``n <= limit`` for which ``can_sample(n)`` holds (0 if none)."""
        if self.inserts - self.deletes < self._min_size_to_sample:
            return 0
        room = self.inserts * self._samples_per_insert - self.samples - self._min_diff
        if room < 1 - 1e-9:
            return 0
        n = limit if room >= limit else int(math.floor(room + 1e-9))
        # Reverb's exact formula decides at the boundary (rounding can differ from `room`).
        while n > 0 and not self.can_sample(n):
            n -= 1
        return n

    # -- commits --------------------------------------------------------------------------------
    def insert(self) -> None:
        self.inserts += 1

    def sample(self, n: int = 1) -> None:
        self.samples += n

    def delete(self, n: int = 1) -> None:
        self.deletes += n

    def reset(self) -> None:
        self.inserts = self.samples = self.deletes = 0

    def restore_counters(self, inserts: int, samples: int, deletes: int) -> None:
        self.inserts, self.samples, self.deletes = int(inserts), int(samples), int(deletes)

    def info(self) -> RateLimiterInfo:
        return RateLimiterInfo(
            samples_per_insert=self._samples_per_insert,
            min_diff=self._min_diff,
            max_diff=self._max_diff,
            min_size_to_sample=self._min_size_to_sample,
            insert_stats=RateLimiterCallStats(self.inserts),
            sample_stats=RateLimiterCallStats(self.samples),
            delete_count=self.deletes,
        )

    def describe_state(self, size: int) -> str:
        """Human-readable state for timeout messages."""
        return (
            f"table size {size}, inserts {self.inserts}, samples {self.samples}, "
            f"deletes {self.deletes}, samples_per_insert {_fmt(self._samples_per_insert)}, "
            f"min_size_to_sample {self._min_size_to_sample}, min_diff {_fmt(self._min_diff)}, "
            f"max_diff {_fmt(self._max_diff)}"
        )

    def __repr__(self) -> str:
        return (
            f"RateLimiter(samples_per_insert={_fmt(self._samples_per_insert)}, "
            f"min_diff={_fmt(self._min_diff)}, max_diff={_fmt(self._max_diff)}, "
            f"min_size_to_sample={self._min_size_to_sample})"
        )


class MinSize(RateLimiter):
    """Blocks sampling until the table holds ``min_size_to_sample`` items; never blocks inserts."""

    def __init__(self, min_size_to_sample: int):
        if not isinstance(min_size_to_sample, (int, float)) or min_size_to_sample < 1:
            raise ValueError(
                f"min_size_to_sample ({min_size_to_sample}) must be a positive integer"
            )
        super().__init__(
            samples_per_insert=1.0,
            min_size_to_sample=min_size_to_sample,
            min_diff=-_MAX,
            max_diff=_MAX,
        )


class SampleToInsertRatio(RateLimiter):
    """Keeps the ratio of samples to inserts near ``samples_per_insert``.

    Args:
      samples_per_insert: the target ratio (> 0).
      min_size_to_sample: items needed before sampling starts (>= 1).
      error_buffer: a number (the allowed deviation around ``samples_per_insert *
        min_size_to_sample``) or an explicit ``(min_diff, max_diff)`` pair.
    """

    def __init__(
        self,
        samples_per_insert: float,
        min_size_to_sample: int,
        error_buffer: float | tuple[float, float],
    ):
        if isinstance(error_buffer, (int, float)) and not isinstance(error_buffer, bool):
            offset = samples_per_insert * min_size_to_sample
            min_diff = offset - error_buffer
            max_diff = offset + error_buffer
        else:
            try:
                min_diff, max_diff = error_buffer  # type: ignore[misc]
            except (TypeError, ValueError) as e:
                raise ValueError(
                    f"error_buffer ({error_buffer!r}) must be a number or a "
                    "(min_diff, max_diff) pair"
                ) from e
        if samples_per_insert <= 0:
            raise ValueError(f"samples_per_insert ({samples_per_insert}) must be > 0")
        if max_diff - min_diff < 2 * max(1.0, samples_per_insert):
            raise ValueError(
                "The size of error_buffer must be >= max(1.0, samples_per_insert) as otherwise "
                f"the system could deadlock (got min_diff={min_diff}, max_diff={max_diff}, "
                f"samples_per_insert={samples_per_insert})"
            )
        if max_diff < samples_per_insert * min_size_to_sample:
            _log.warning(
                "max_diff (%s) is lower than samples_per_insert * min_size_to_sample (%s); "
                "inserts can block before sampling may start, which deadlocks unless samplers "
                "and writers run concurrently.",
                max_diff,
                samples_per_insert * min_size_to_sample,
            )
        if min_diff > samples_per_insert * min_size_to_sample:
            raise ValueError(
                f"min_diff ({min_diff}) must be <= samples_per_insert * min_size_to_sample "
                f"({samples_per_insert * min_size_to_sample}), otherwise sampling deadlocks once "
                "min_size_to_sample items are stored"
            )
        if min_size_to_sample < 1:
            raise ValueError(
                f"min_size_to_sample ({min_size_to_sample}) must be a positive integer"
            )
        super().__init__(samples_per_insert, min_size_to_sample, min_diff, max_diff)


class _AtMostUnsampled(RateLimiter):
    """At most ``size`` unsampled items, each sampled once: the body of :class:`Queue` and
    :class:`Stack`, which differ only in the table's selectors."""

    def __init__(self, size: int):
        size = positive_int("size", size)
        super().__init__(
            samples_per_insert=1.0, min_size_to_sample=1, min_diff=0.0, max_diff=float(size)
        )


class Queue(_AtMostUnsampled):
    """Limiter of ``Table.queue``: at most ``size`` unsampled items. Not for direct use."""


class Stack(_AtMostUnsampled):
    """Limiter of ``Table.stack``: at most ``size`` unsampled items. Not for direct use."""


__all__ = ["MinSize", "Queue", "RateLimiter", "SampleToInsertRatio", "Stack"]

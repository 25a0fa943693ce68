"""A transport over several servers holding the same tables (client-side sharding).

* Writers: each writer stream is pinned to one shard, chosen round-robin, so the rows an item
  needs always live where the item goes; ``Client.insert`` rotates per call.
* Sampling: each request goes to the next shard in turn; a shard whose rate limiter does not
  admit a sample right away is skipped for one that does, before waiting on one; a shard that
  could not be reached is left out for a few seconds.
* Priority updates and deletes go to the shard that returned the key (remembered for recently
  sampled keys); keys it does not know are sent to every shard (shards ignore unknown keys).
* ``server_info`` adds up sizes and counters across shards; ``reset`` and ``checkpoint`` go to all
  (concurrently over the network, as do updates of keys the client did not sample). The
  round-robin starts at the first address, so that a client is reproducible: clients in many
  processes should list the addresses in different orders (``ostinato.ray``'s
  ``ShardGroup.client()`` does), or their first writers all go to one shard.

To use a gRPC load balancer instead, give the client the balancer's single address: every call
then goes to whichever backend the balancer picks. That works for inserts from
``Client.insert`` and for sampling, but a TrajectoryWriter's stream must stay on one backend
(use connection-level, not request-level, balancing) and priority updates must reach the
backend that holds the key, which a balancer cannot know; client-side sharding handles both.
"""

from __future__ import annotations

import dataclasses
import itertools
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import numpy as np

from ostinato import errors
from ostinato.core.deadline import Deadline
from ostinato.core.items import SampleBatch
from ostinato.core.keys import key_array
from ostinato.core.table_info import RateLimiterCallStats, TableInfo
from ostinato.transport.base import TableMeta, Transport
from ostinato.transport.streams import WriterStream

_KEY_MEMORY = 1_000_000
#: Seconds a shard that could not be reached is left out of sampling.
_DOWN_SECONDS = 2.0
_T = TypeVar("_T")


class ShardedTransport(Transport):
    """Spreads a client's work over ``shards`` (transports to servers with the same tables)."""

    def __init__(self, shards: Sequence[Transport]):
        if not shards:
            raise ValueError("a sharded client needs at least one server address")
        self.shards = list(shards)
        self.address = ",".join(s.address for s in self.shards)
        self.is_local = all(s.is_local for s in self.shards)
        self._rr = itertools.count()
        self._lock = threading.Lock()
        self._key_shard: OrderedDict[int, int] = OrderedDict()
        self._down_until = [0.0] * len(self.shards)  # a shard that was unreachable is skipped
        self._executor: ThreadPoolExecutor | None = None

    def _next(self) -> int:
        return next(self._rr) % len(self.shards)

    def _remember(self, keys: np.ndarray, shard: int) -> None:
        with self._lock:
            ks = self._key_shard
            for k in keys.tolist():
                ks[k] = shard
            while len(ks) > _KEY_MEMORY:
                ks.popitem(last=False)

    def _split(self, keys: np.ndarray) -> tuple[dict[int, list[int]], list[int]]:
        """Positions of keys per known shard, and positions of unknown keys."""
        key_list = keys.tolist()
        known: dict[int, list[int]] = {}
        unknown = []
        with self._lock:
            for i, k in enumerate(key_list):
                s = self._key_shard.get(k)
                if s is None:
                    unknown.append(i)
                else:
                    known.setdefault(s, []).append(i)
        return known, unknown

    def _each(self, fn: Callable[[Transport], _T]) -> list[_T]:
        """``fn(shard)`` for every shard, in shard order: one after another in this process,
        concurrently over the network (the slowest shard's time, not the sum)."""
        if len(self.shards) == 1 or self.is_local:
            return [fn(s) for s in self.shards]
        with self._lock:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(
                    max_workers=min(16, len(self.shards)), thread_name_prefix="ostinato-shards"
                )
            executor = self._executor
        return list(executor.map(fn, self.shards))

    def _up(self, i: int) -> bool:
        return self._down_until[i] <= time.monotonic()

    # -- Transport ----------------------------------------------------------------------------
    def server_info(self, deadline: Deadline) -> dict[str, TableInfo]:
        infos = self._each(lambda s: s.server_info(deadline))
        merged: dict[str, TableInfo] = {}
        for name, first in infos[0].items():
            parts = [i[name] for i in infos if name in i]
            if len(parts) != len(infos):
                raise errors.FailedPreconditionError(
                    f"table {name!r} is missing on some shards of {self.address}"
                )
            rl = first.rate_limiter_info
            merged[name] = dataclasses.replace(
                first,
                current_size=sum(p.current_size for p in parts),
                num_episodes=sum(p.num_episodes for p in parts),
                num_deleted_episodes=sum(p.num_deleted_episodes for p in parts),
                num_unique_samples=sum(p.num_unique_samples for p in parts),
                rate_limiter_info=dataclasses.replace(
                    rl,
                    insert_stats=RateLimiterCallStats(
                        sum(p.rate_limiter_info.insert_stats.completed for p in parts)
                    ),
                    sample_stats=RateLimiterCallStats(
                        sum(p.rate_limiter_info.sample_stats.completed for p in parts)
                    ),
                    delete_count=sum(p.rate_limiter_info.delete_count for p in parts),
                ),
            )
        return merged

    def table_meta(self, table: str, deadline: Deadline | None = None) -> TableMeta:
        return self.shards[0].table_meta(table, deadline)

    def healthy(self) -> bool:
        return all(s.healthy() for s in self.shards)

    def writer_stream(
        self, keep_keys: Callable[[], set[int]] | None = None, max_pending: int | None = None
    ) -> WriterStream:
        return self.shards[self._next()].writer_stream(keep_keys, max_pending)

    def insert(self, table: str, items: Sequence[tuple[Any, ...]], deadline: Deadline) -> None:
        self.shards[self._next()].insert(table, items, deadline)

    def sample(self, table: str, num_samples: int, deadline: Deadline) -> SampleBatch:
        start = self._next()
        n = len(self.shards)
        if n > 1:  # first look for a shard that can answer at once
            order = [(start + j) % n for j in range(n)]
            up = [i for i in order if self._up(i)] or order
            for i in up:
                try:
                    batch = self.shards[i].sample(table, num_samples, Deadline.after(0))
                except errors.RateLimiterTimeout:
                    continue
                except errors.UnavailableError:
                    # Skipped for a while (a Ray or Kubernetes restart takes seconds) while
                    # the other shards serve; tried again after that.
                    self._down_until[i] = time.monotonic() + _DOWN_SECONDS
                    continue
                self._remember(batch.keys, i)
                return batch
            start = next((i for i in order if self._up(i)), start)
        batch = self.shards[start].sample(table, num_samples, deadline)
        self._remember(batch.keys, start)
        return batch

    def _check_priorities(self, table: str, p: np.ndarray) -> None:
        """Validates once for all shards, so that no shard changes unless all would."""
        if np.isnan(p).any():
            raise errors.InvalidArgumentError(f"Priority must not be NaN (table {table!r}).")
        if self.table_meta(table).reject_negative and (p < 0).any():
            raise errors.InvalidArgumentError(
                f"Priority must not be negative (got {p[p < 0][0]} for table {table!r})."
            )

    def update_priorities(
        self, table: str, keys: Any, priorities: np.ndarray, deadline: Deadline
    ) -> int:
        p = np.asarray(priorities, dtype=np.float64).reshape(-1)
        k = key_array(keys)
        if len(k) != len(p):
            raise errors.InvalidArgumentError(
                f"keys ({len(k)}) and priorities ({len(p)}) must have the same length"
            )
        self._check_priorities(table, p)
        known, unknown = self._split(k)
        total = 0
        for s, pos in known.items():
            total += self.shards[s].update_priorities(table, k[pos], p[pos], deadline)
        if unknown:
            ku, pu = k[unknown], p[unknown]
            total += sum(self._each(lambda s: s.update_priorities(table, ku, pu, deadline)))
        return total

    def delete(self, table: str, keys: Any, deadline: Deadline) -> int:
        k = key_array(keys)
        known, unknown = self._split(k)
        total = 0
        for s, pos in known.items():
            total += self.shards[s].delete(table, k[pos], deadline)
        if unknown:
            ku = k[unknown]
            total += sum(self._each(lambda s: s.delete(table, ku, deadline)))
        return total

    def mutate_priorities(
        self,
        table: str,
        updates: dict[int, float] | None,
        deletes: Sequence[int] | None,
        deadline: Deadline,
    ) -> None:
        if updates:
            p = np.fromiter(updates.values(), dtype=np.float64, count=len(updates))
            self._check_priorities(table, p)  # before the deletes: nothing changes on a bad one
        if deletes:
            self.delete(table, list(deletes), deadline)
        if updates:
            self.update_priorities(table, list(updates.keys()), p, deadline)

    def reset(self, table: str, deadline: Deadline) -> None:
        self._each(lambda s: s.reset(table, deadline))

    def checkpoint(self, deadline: Deadline) -> str:
        return ",".join(self._each(lambda s: s.checkpoint(deadline)))

    def close(self) -> None:
        for s in self.shards:
            s.close()
        with self._lock:
            executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=False)

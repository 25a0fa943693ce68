"""A table's bookkeeping under its lock: the state changes that :class:`~ostinato.core.table.Table`
makes once the rate limiter admitted a call.

Each keeps the slots, both selectors, the rate limiter's counters, the table's statistics
(``num_unique_samples``, the samples left under ``max_times_sampled``) and the extensions' hooks
in step: storing one item (evicting one if the table is over ``max_size``), taking admitted
samples, re-prioritising or removing one slot. :class:`~ostinato.core.table.Table` builds on this
class; its public calls validate arguments, wait for the rate limiter and wake other calls.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

import numpy as np

from ostinato.core import items as items_lib
from ostinato.core.locations import LocatedCall
from ostinato.core.ordered_selectors import Fifo
from ostinato.core.table_contents import TableContents

#: Batches of fewer items are inserted one by one: a batch costs a table about 100,000 CPU
#: instructions plus 10,000 per item, a single insert about 38,000.
BATCH_FROM = 4


class TableBookkeeping(TableContents):
    """The locked state changes of a table; :class:`~ostinato.core.table.Table` sets up the
    attributes below and holds the lock around every call."""

    _rng: np.random.Generator
    _prioritized: tuple[Any, ...]
    _key_rng: random.Random

    # -- one admitted insert -----------------------------------------------------------------------
    def _insert_locked(
        self,
        key: int,
        priority: float,
        traj: items_lib.Packed,
        squeeze: tuple[bool, ...],
        assign: bool,
    ) -> int:
        """Inserts one admitted item; returns the key used. Caller holds the lock."""
        slots = self._slots
        k2s = slots.key_to_slot
        if key in k2s:
            if assign:
                self._update_slot(k2s[key], key, priority)
                return key
            while key in k2s:  # a 64-bit collision: draw a fresh key
                key = self._key_rng.getrandbits(64)
        slot = slots.add(key, priority, traj, squeeze)
        self._sampler.insert(slot, priority)
        self._remover.insert(slot, priority)
        if self._max_times_sampled:
            self._remaining_samples += self._max_times_sampled
        if self._hooks is not None:
            self._hooks.inserted([key], [priority])
        if len(k2s) > self._max_size:
            victim, _ = self._remover.sample(self._rng)
            self._delete_slot(victim)
        self._limiter.insert()
        return key

    def _insert_batch_locked(
        self,
        items: Sequence[Any],
        assign: bool,
        located: Sequence[LocatedCall] | None = None,
    ) -> bool:
        """Inserts :data:`BATCH_FROM` or more items at once, as :meth:`_insert_locked` in turn
        would, when that needs no per-item decision: the rate limiter admits all of them, no
        key is re-assigned (``assign`` is False), the keys are new and distinct, and the table
        either stays within ``max_size`` or is full with a Fifo remover (each insert past
        ``max_size`` evicts the oldest item from before the batch). Returns False (nothing
        done) otherwise. ``located``: see :meth:`~ostinato.core.slots.Slots.add_many`. Caller
        holds the lock."""
        slots = self._slots
        k2s = slots.key_to_slot
        n = len(items)
        if n < BATCH_FROM or assign or not self._limiter.can_insert(n):
            return False
        size = len(k2s)
        evict = size + n - self._max_size
        if evict > 0 and (
            type(self._remover) is not Fifo
            or n > self._max_size  # a new item would be evicted
            or size > self._max_size
            or self._hooks is not None  # they see inserts and deletes interleaved
        ):
            return False
        keys, prios, trajs, sqs = zip(*items)
        # A vector writer's keys (``located``) are drawn from the process's counter: distinct.
        if not k2s.keys().isdisjoint(keys) or (located is None and len(set(keys)) != n):
            return False
        mts = self._max_times_sampled
        victims: list[int] = []
        if evict > 0:
            victims = self._remover.oldest(evict)  # type: ignore[attr-defined]  # a Fifo
            # Samples the victims had left, read before their slots are reused.
            left = sum(mts - slots.a_times[v] for v in victims) if mts else 0
        new = slots.add_many(keys, prios, trajs, sqs, victims, located)
        if new is None:
            return False
        if victims:
            self._sampler.insert_replacing(new, prios, victims)
            self._remover.insert_replacing(new, prios, victims)
            self._remaining_samples -= left
            self._limiter.delete(evict)
        else:
            self._sampler.insert_many(new, prios)
            self._remover.insert_many(new, prios)
        if mts:
            self._remaining_samples += mts * n
        if self._hooks is not None:
            self._hooks.inserted(list(keys), list(prios))
        self._limiter.inserts += n
        return True

    # -- sampling admitted items -------------------------------------------------------------------
    def _allowed_locked(self, n: int) -> int:
        k = self._limiter.num_samples_allowed(n)
        if self._max_times_sampled and k > self._remaining_samples:
            k = self._remaining_samples
        return k

    def _sample_vectorised(self, k: int) -> items_lib.SampleBatch:
        slots, probs = self._sampler.sample_many(k, self._rng)
        reported, first_time = self._slots.record_samples(slots)
        self._num_unique_samples += first_time
        self._limiter.sample(k)
        if self._hooks is not None:
            self._hooks.sampled(self._slots.keys[slots].tolist(), reported.tolist())
        batch = self._slots.sample_batch(slots, probs, reported)
        if self._prioritized:  # their priorities are usually updated next
            self._slots.remember_sampled(batch.keys, slots)
        return batch

    def _sample_one_by_one(self, k: int) -> items_lib.SampleBatch:
        keys = np.empty(k, dtype=np.uint64)
        probs = np.empty(k)
        sizes = np.empty(k, dtype=np.int64)
        prios = np.empty(k)
        times_out = np.empty(k, dtype=np.int32)
        trajs = []
        sqs = []
        mts = self._max_times_sampled
        s = self._slots
        for i in range(k):
            if i and self._allowed_locked(1) < 1:
                # Deletions by max_times_sampled can take the table below min_size_to_sample.
                k = i
                keys, probs, sizes, prios, times_out = (
                    keys[:k],
                    probs[:k],
                    sizes[:k],
                    prios[:k],
                    times_out[:k],
                )
                break
            slot, p = self._sampler.sample(self._rng)
            t = s.a_times[slot] + 1
            s.a_times[slot] = t
            if t == 1:
                self._num_unique_samples += 1
            self._remaining_samples -= 1
            keys[i] = s.a_keys[slot]
            probs[i] = p
            sizes[i] = len(s.key_to_slot)
            prios[i] = s.a_prio[slot]
            times_out[i] = t
            trajs.append(s.traj[slot])
            sqs.append(s.squeeze[slot])
            self._limiter.sample(1)
            if self._hooks is not None:
                self._hooks.sampled([int(keys[i])], [t])
            if t >= mts:
                self._delete_slot(slot)
        return items_lib.SampleBatch(keys, probs, sizes, prios, times_out, trajs, sqs)

    # -- one slot's priority, or its removal -------------------------------------------------------
    def _update_slot(self, slot: int, key: int, priority: float) -> None:
        self._slots.a_prio[slot] = priority
        self._sampler.update(slot, priority)
        self._remover.update(slot, priority)
        if self._hooks is not None:
            self._hooks.updated([key], [priority])

    def _delete_slot(self, slot: int) -> None:
        self._sampler.delete(slot)
        self._remover.delete(slot)
        if self._max_times_sampled:
            self._remaining_samples -= self._max_times_sampled - self._slots.a_times[slot]
        key = self._slots.remove(slot)
        self._limiter.delete()
        if self._hooks is not None:
            self._hooks.deleted(key)

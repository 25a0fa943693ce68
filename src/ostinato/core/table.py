"""The replay table: items, selectors, rate limiter, eviction; thread-safe, no I/O.

All state sits under one lock (:class:`~ostinato.core.gate.Gate`). Callers' threads do the work
themselves (there is no worker thread); a call that the rate limiter does not admit waits in the
gate until another call changes the state or its deadline passes. Items live in
:class:`~ostinato.core.slots.Slots` (metadata in numpy arrays indexed by slot, so selectors and
batch operations work on them vectorised); checkpoints go through
:mod:`~ostinato.core.table_state`, reached from
:class:`~ostinato.core.table_contents.TableContents` (``get``, ``keys``, ``snapshot``,
``restore_items``). The state changes made under the lock once a call is admitted (storing an
item, taking samples, re-prioritising or removing a slot) are in
:class:`~ostinato.core.table_bookkeeping.TableBookkeeping`, which this class extends.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from operator import itemgetter
from typing import Any

import numpy as np

from ostinato import errors
from ostinato.core import items as items_lib
from ostinato.core.chunks import ChunkStore
from ostinato.core.deadline import Deadline
from ostinato.core.gate import Gate, WaitStats
from ostinato.core.keys import key_list
from ostinato.core.locations import LocatedCall
from ostinato.core.rate_limiter import RateLimiter
from ostinato.core.selectors import ItemSelector, check_priorities
from ostinato.core.signature import flatten_signature
from ostinato.core.slots import Slots
from ostinato.core.table_bookkeeping import TableBookkeeping
from ostinato.core.table_info import TableInfo
from ostinato.validate import positive_int

#: An item as handed to a table: (key, priority, packed trajectory, squeeze flags).
Item = tuple[int, float, items_lib.Packed, tuple[bool, ...]]


_PRIORITY = itemgetter(1)  # an item's priority


class Table(TableBookkeeping):
    """A replay table (Reverb's ``reverb.Table``).

    Args:
      name: unique, non-empty name.
      sampler: selector that picks items to sample (``ostinato.selectors.*``).
      remover: selector that picks the item to evict when the table exceeds ``max_size``.
      max_size: maximum number of items; a positive integer.
      rate_limiter: ``ostinato.rate_limiters.*``; one limiter object per table.
      max_times_sampled: an item is deleted after this many samples; ``< 1`` means never.
      extensions: :class:`~ostinato.core.extensions.TableExtension` objects.
      signature: optional nest of ``TensorSpec`` (ours or TensorFlow's) describing one item;
        writers validate items against it.

    Example:
      >>> import ostinato as reverb
      >>> t = reverb.Table("replay", reverb.selectors.Uniform(), reverb.selectors.Fifo(),
      ...                  max_size=1000, rate_limiter=reverb.rate_limiters.MinSize(1))
    """

    def __init__(
        self,
        name: str,
        sampler: ItemSelector,
        remover: ItemSelector,
        max_size: int,
        rate_limiter: RateLimiter,
        max_times_sampled: int = 0,
        extensions: Sequence[Any] = (),
        signature: Any = None,
    ):
        super().__init__(
            name, sampler, remover, max_size, rate_limiter, max_times_sampled, extensions, signature
        )
        self._gate = Gate(name)
        self._lock = self._gate.lock
        self._cond = self._gate.cond
        self._slots = Slots(ChunkStore())
        self._server: Any = None
        self._num_unique_samples = 0
        self._remaining_samples = 0  # sum of (max_times_sampled - times) over items, if limited
        self._rng = np.random.default_rng()
        self._key_rng = random.Random()

    # -- joining a server ------------------------------------------------------------------------
    def attach(self, server: Any, store: ChunkStore) -> None:
        """Makes the table one of ``server``'s, sharing its chunk store (once)."""
        with self._lock:
            if self._server is not None and self._server is not server:
                raise ValueError(f"table {self._name!r} already belongs to another server")
            # Items inserted before joining move their chunk references into the shared store.
            self._slots.move_to(store)
            self._server = server

    def detach(self, server: Any) -> None:
        """Undoes :meth:`attach` (a server that failed to start gives its tables back)."""
        with self._lock:
            if self._server is server:
                self._server = None

    def set_signature(self, signature: Any) -> None:
        """Gives a table built without a signature one (a checkpoint's, on restore).

        Raises:
          FailedPreconditionError: the table already has a different signature.
        """
        flat = flatten_signature(signature)
        with self._lock:
            if self._signature is not None and self._signature != signature:
                raise errors.FailedPreconditionError(
                    f"table {self._name!r} already has a signature: {self._signature!r}"
                )
            self._signature = signature if flat is not None else None
            self._flat_signature = flat

    @property
    def closed(self) -> bool:
        return self._gate.closed

    @property
    def chunk_store(self) -> ChunkStore:
        return self._slots.store

    def __len__(self) -> int:
        return len(self._slots.key_to_slot)

    def __bool__(self) -> bool:
        # A table is truthy even when empty (``table or default`` keeps the caller's table).
        return True

    @property
    def size(self) -> int:
        return len(self._slots.key_to_slot)

    def __contains__(self, key: int) -> bool:
        return key in self._slots.key_to_slot

    def contains(self, key: int) -> bool:
        """Whether an item with this key is in the table."""
        return key in self._slots.key_to_slot

    def can_sample(self, num_samples: int) -> bool:
        """Whether ``num_samples`` samples would be admitted now.

        Unlike Reverb this also counts ``max_times_sampled``: a queue with 2 items cannot give 3.
        """
        n = positive_int("num_samples", num_samples)
        with self._lock:
            if self._max_times_sampled and n > self._remaining_samples:
                return False
            return self._limiter.can_sample(n)

    def can_insert(self, num_inserts: int) -> bool:
        """Whether ``num_inserts`` new items would be admitted now."""
        n = positive_int("num_inserts", num_inserts)
        with self._lock:
            return self._limiter.can_insert(n)

    @property
    def info(self) -> TableInfo:
        """A :class:`~ostinato.core.table_info.TableInfo` snapshot."""
        with self._lock:
            return TableInfo(
                name=self._name,
                sampler_options=self._sampler.options(),
                remover_options=self._remover.options(),
                max_size=self._max_size,
                max_times_sampled=self._max_times_sampled,
                rate_limiter_info=self._limiter.info(),
                signature=self._signature,
                current_size=len(self._slots.key_to_slot),
                num_episodes=len(self._slots.episode_refs),
                num_deleted_episodes=self._slots.num_deleted_episodes,
                num_unique_samples=self._num_unique_samples,
            )

    def wait_stats(self) -> WaitStats:
        """Calls waiting on the rate limiter now, and the seconds waited so far (monitoring)."""
        with self._lock:
            return self._gate.wait_stats()

    def approx_item_bytes(self) -> float:
        """Bytes of data of one (arbitrary) item, from its chunks' specs; 0 if the table is
        empty or the specs are unknown (a server bounds sample replies with it)."""
        with self._lock:
            slots = self._slots
            if not slots.key_to_slot:
                return 0.0
            packed = slots.traj[next(iter(slots.key_to_slot.values()))]
        return float(items_lib.approx_nbytes(packed) or 0)

    # -- validation -------------------------------------------------------------------------------
    def validate_priority(self, priority: float) -> None:
        """Raises ``InvalidArgumentError`` for a priority this table cannot take."""
        check_priorities(self._prioritized, priority, self._name)

    def _describe_limiter(self) -> str:
        return self._limiter.describe_state(len(self._slots.key_to_slot))

    # -- insert -----------------------------------------------------------------------------------
    def insert(
        self,
        key: int,
        priority: float,
        trajectory: items_lib.Packed,
        squeeze: tuple[bool, ...],
        timeout: float | None = None,
        assign: bool = True,
    ) -> int:
        """Inserts (or, with ``assign``, re-prioritises) one item, waiting for the rate limiter.

        Args:
          key: 64-bit item key.
          priority: the item's priority.
          trajectory: packed trajectory (see :mod:`ostinato.core.items`).
          squeeze: one flag per column.
          timeout: seconds to wait for the rate limiter; ``None`` waits forever.
          assign: if the key exists, update its priority (Reverb's insert-or-assign). If False,
            a colliding key is replaced by a fresh random one instead.

        Returns:
          The key of the stored item.
        """
        return self.insert_many(
            [(key, priority, trajectory, squeeze)], Deadline.after(timeout), assign=assign
        )[0]

    def check_item_priorities(self, items: Sequence[Item]) -> None:
        """Raises ``InvalidArgumentError`` before anything is stored if an item's priority is
        one this table cannot take (:meth:`validate_priority`). Only NaN is looked for on a
        table without a Prioritized selector (that comparison is all the per-item cost)."""
        if self._prioritized:  # each value once, in order (a writer's items share theirs)
            for p in dict.fromkeys(map(_PRIORITY, items)):
                self.validate_priority(p)
            return
        if len(items) == 1:  # a writer's single item: one comparison (NaN != NaN)
            p = items[0][1]
            if p != p:
                self.validate_priority(p)
        elif any(map(math.isnan, map(_PRIORITY, items))):  # in C: no per-item Python
            for it in items:
                self.validate_priority(it[1])

    def try_insert_many(
        self,
        items: Sequence[Item],
        assign: bool = False,
        checked: bool = False,
        located: Sequence[LocatedCall] | None = None,
    ) -> int:
        """Inserts items in order while the rate limiter admits them, without waiting.

        ``checked``: the caller already ran :meth:`check_item_priorities` on ``items``.
        ``located``: where the items have their rows, from their writer (``Slots.add_many``).
        Returns how many of ``items`` (a prefix) were inserted.
        """
        if not checked:
            self.check_item_priorities(items)
        done = 0
        gate = self._gate
        with self._lock:
            if gate.closed:
                gate.check_open()
            lim = self._limiter
            if self._insert_batch_locked(items, assign, located):
                done = len(items)
            else:
                for key, priority, traj, squeeze in items:
                    if not lim.can_insert(1):
                        break
                    self._insert_locked(key, priority, traj, squeeze, assign)
                    done += 1
            if done and (gate._waiting or gate._lingering):  # nobody to wake: no call
                gate.notify_inserted(self._allowed_locked, self._inserts_blocked)
        return done

    def insert_many(
        self,
        items: Sequence[Item],
        deadline: Deadline | None = None,
        assign: bool = False,
        cancelled: Callable[[], bool] | None = None,
    ) -> list[int]:
        """Inserts items in order, waiting for the rate limiter between them.

        ``cancelled`` (optional) is checked whenever a wait for the rate limiter wakes: once
        it returns True nothing more is stored (a writer that went away while its item waited
        must not have that item stored later).

        Raises:
          RateLimiterTimeout: the deadline passed; the items before the one that waited are
            stored, the rest are not (``len(err.inserted)`` tells how many).
          CancelledError: ``cancelled()`` became true during a wait; ``err.inserted`` as for
            a timeout.
          InvalidArgumentError: a priority is NaN, or negative or too large on a Prioritized
            table; nothing was stored.
        """
        self.check_item_priorities(items)
        deadline = deadline or Deadline.never()
        keys: list[int] = []
        gate = self._gate
        with self._cond:
            gate.check_open()
            lim = self._limiter
            if self._insert_batch_locked(items, assign):
                gate.notify_inserted(self._allowed_locked, self._inserts_blocked)
                return [it[0] for it in items]
            for key, priority, traj, squeeze in items:
                if not lim.can_insert(1):
                    gate.notify_all()  # lingering samplers too: take what is there
                    gate.wait(
                        lambda: lim.can_insert(1) or (cancelled is not None and cancelled()),
                        deadline,
                        "insert",
                        self._describe_limiter,
                        keys,
                    )
                    if cancelled is not None:
                        gate.check_open()  # a closed table says so, as without cancelled
                        if cancelled():
                            if keys:
                                gate.notify_inserted(self._allowed_locked, self._inserts_blocked)
                            err = errors.CancelledError(
                                f"insert into table {self._name!r} was cancelled by its "
                                "caller while waiting for the rate limiter"
                            )
                            err.inserted = list(keys)  # type: ignore[attr-defined]
                            raise err
                keys.append(self._insert_locked(key, priority, traj, squeeze, assign))
            gate.notify_inserted(self._allowed_locked, self._inserts_blocked)
        return keys

    def _inserts_blocked(self) -> bool:
        return not self._limiter.can_insert(1)

    # -- sample -----------------------------------------------------------------------------------
    def wake(self) -> None:
        """Wakes blocked calls so that they re-check their conditions (e.g. ``cancelled``)."""
        with self._cond:
            self._gate.notify_all()

    def sample(
        self,
        num_samples: int = 1,
        timeout: float | None = None,
        cancelled: Any = None,
        linger: float = 0.0,
    ) -> items_lib.SampleBatch:
        """Samples between 1 and ``num_samples`` items (fewer only if the limiter stops early).

        Waits until at least one sample is admitted. Each sample counts for the rate limiter,
        increments the item's ``times_sampled``, and may delete the item at
        ``max_times_sampled``.

        Args:
          num_samples: most items to sample.
          timeout: seconds to wait for the rate limiter (``None``: forever).
          cancelled: optional callable; once it returns True the call stops waiting and raises
            ``CancelledError`` without taking anything (used when a remote caller goes away).
          linger: when the call had to wait for the rate limiter and fewer than
            ``num_samples`` are then admitted, wait up to this many more seconds (bounded by
            ``timeout``) for the rest. Remote samplers use it so that a sampler kept waiting by
            inserts takes them in batches rather than one round trip per few items.

        Raises:
          RateLimiterTimeout: nothing could be sampled before the deadline.
          CancelledError: the table was closed, or ``cancelled()`` became true.
        """
        n = positive_int("num_samples", num_samples)
        deadline = Deadline.after(timeout)
        gate = self._gate
        allowed = self._allowed_locked
        with self._cond:
            gate.check_open()
            rate_limited = gate.wait_to_sample(
                n,
                allowed,
                deadline,
                self._describe_limiter,
                cancelled,
                linger,
                self._limiter.can_insert,
            )
            if cancelled is not None and cancelled():
                raise errors.CancelledError(
                    f"sample from table {self._name!r} was cancelled by its caller"
                )
            return self._take_locked(allowed(n), rate_limited)

    def sample_now(self, num_samples: int) -> items_lib.SampleBatch | None:
        """Samples ``num_samples`` items if the rate limiter admits all of them now, without
        waiting; else takes nothing and returns None (the caller may then :meth:`sample`).

        Raises:
          CancelledError: the table was closed.
        """
        n = positive_int("num_samples", num_samples)
        with self._cond:
            self._gate.check_open()
            if self._allowed_locked(n) < n:
                return None
            return self._take_locked(n, False)

    def _take_locked(self, k: int, rate_limited: bool) -> items_lib.SampleBatch:
        """Samples ``k`` admitted items (lock held)."""
        if self._max_times_sampled:
            batch = self._sample_one_by_one(k)
        else:
            batch = self._sample_vectorised(k)
        batch.rate_limited = rate_limited
        self._gate.notify_waiters()
        return batch

    # -- mutate -----------------------------------------------------------------------------------
    def update_priorities(
        self, keys: Sequence[int] | np.ndarray, priorities: Sequence[float] | np.ndarray
    ) -> int:
        """Sets new priorities; unknown keys are ignored. Validates all before changing any.

        Returns:
          The number of items updated.
        """
        p = np.asarray(priorities, dtype=np.float64).reshape(-1)
        klist = key_list(keys)
        if len(klist) != len(p):
            raise errors.InvalidArgumentError(
                f"keys ({len(klist)}) and priorities ({len(p)}) must have the same length"
            )
        check_priorities(self._prioritized, p, self._name)
        return self._update_checked(klist, p)

    def _update_checked(self, klist: list[int], p: np.ndarray) -> int:
        """:meth:`update_priorities` once keys and priorities are validated."""
        with self._cond:
            self._gate.check_open()
            pos, slots = self._slots.slots_of(klist)
            if not slots:
                return 0
            s = np.array(slots, dtype=np.int64)
            pv = p if pos is None else p[pos]
            self._slots.priorities[s] = pv
            self._sampler.update_many(s, pv)
            self._remover.update_many(s, pv)
            if self._hooks is not None:
                self._hooks.updated(klist if pos is None else [klist[i] for i in pos], pv.tolist())
            self._gate.notify_all()
            return len(slots)

    def delete(self, keys: Sequence[int] | np.ndarray) -> int:
        """Deletes items; unknown keys are ignored. Returns the number deleted."""
        klist = key_list(keys)
        with self._cond:
            self._gate.check_open()
            n = 0
            k2s = self._slots.key_to_slot
            for k in klist:
                s = k2s.get(k)
                if s is not None:
                    self._delete_slot(s)
                    n += 1
            if n:
                self._gate.notify_all()
            return n

    def mutate_priorities(
        self, updates: dict[int, float] | None = None, deletes: Sequence[int] | None = None
    ) -> None:
        """Reverb's ``MutateItems``: deletes first, then updates; unknown keys are ignored."""
        if updates:  # every key and priority is checked before anything changes
            klist = key_list(updates.keys())
            p = np.fromiter(updates.values(), dtype=np.float64, count=len(updates))
            check_priorities(self._prioritized, p, self._name)
        if deletes:
            self.delete(list(deletes))
        if updates:
            self._update_checked(klist, p)

    def reset(self) -> None:
        """Removes every item and resets the rate limiter and statistics."""
        with self._cond:
            self._gate.check_open()
            self._slots.clear()
            self._sampler.clear()
            self._remover.clear()
            self._num_unique_samples = 0
            self._remaining_samples = 0
            self._limiter.reset()
            if self._hooks is not None:
                self._hooks.reset()
            self._gate.notify_all()

    def close(self) -> None:
        """Wakes every waiting call with ``CancelledError``; later calls fail the same way."""
        self._gate.close()

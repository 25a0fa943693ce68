"""The replay table: items, selectors, rate limiter, eviction; thread-safe, no I/O.

All state sits under one lock. Callers' threads do the work themselves (there is no worker
thread); a call that the rate limiter does not admit waits on a condition variable until
another call changes the state or its deadline passes. Per-item metadata lives in numpy arrays
indexed by *slot*, so selectors and batch operations can work on it vectorised.
"""

from __future__ import annotations

import array
import operator
import random
import threading
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from ostinato import errors
from ostinato.core import items as items_lib
from ostinato.core.chunk_store import Chunk, ChunkStore
from ostinato.core.deadline import Deadline
from ostinato.core.extensions import TableExtension
from ostinato.core.rate_limiter import Queue, RateLimiter, Stack
from ostinato.core.selectors import (
    Fifo,
    HeapSelector,
    ItemSelector,
    Lifo,
    Prioritized,
    selector_from_options,
)
from ostinato.core.signature import flatten_signature
from ostinato.types import TableInfo

#: An item as handed to a table: (key, priority, packed trajectory, squeeze flags).
Item = tuple[int, float, items_lib.Packed, tuple[bool, ...]]


def _key_list(keys: Any) -> list[int]:
    """Item keys as Python ints, from an array or any iterable of integers (never via float)."""
    if isinstance(keys, np.ndarray):
        if keys.dtype.kind not in "ui":
            raise errors.InvalidArgumentError(f"keys must be integers, got an array of {keys.dtype}")
        return keys.astype(np.uint64, copy=False).reshape(-1).tolist()
    try:
        return [operator.index(k) for k in keys]
    except TypeError:
        raise errors.InvalidArgumentError(f"keys ({keys!r}) must be integers") from None


def _positive_int(value: Any, name: str) -> int:
    if isinstance(value, bool):
        raise ValueError(f"{name} ({value!r}) must be a positive integer")
    try:
        v = operator.index(value)
    except TypeError:
        raise ValueError(f"{name} ({value!r}) must be a positive integer") from None
    if v <= 0:
        raise ValueError(f"{name} ({v}) must be a positive integer")
    return v


class Table:
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

    def __init__(self, name: str, sampler: ItemSelector, remover: ItemSelector, max_size: int,
                 rate_limiter: RateLimiter, max_times_sampled: int = 0,
                 extensions: Sequence[Any] = (), signature: Any = None):
        if not name or not isinstance(name, str):
            raise ValueError("name must be nonempty")
        max_size = _positive_int(max_size, "max_size")
        if not isinstance(sampler, ItemSelector):
            raise TypeError(f"sampler ({sampler!r}) must be a selector from ostinato.selectors")
        if not isinstance(remover, ItemSelector):
            raise TypeError(f"remover ({remover!r}) must be a selector from ostinato.selectors")
        if sampler is remover:
            remover = remover.clone()
        if not isinstance(rate_limiter, RateLimiter):
            raise TypeError(f"rate_limiter ({rate_limiter!r}) must be an ostinato.rate_limiters object")
        try:
            mts = operator.index(max_times_sampled)
        except TypeError:
            raise ValueError(f"max_times_sampled ({max_times_sampled!r}) must be an integer") from None
        exts: list[TableExtension] = []
        for e in extensions:
            built = e.build_internal_extensions(name) if hasattr(e, "build_internal_extensions") else [e]
            exts.extend(built)
        flat_signature = flatten_signature(signature if signature else None)
        self._name = name
        self._sampler = sampler
        self._remover = remover
        self._max_size = max_size
        self._max_times_sampled = mts if mts > 0 else 0
        self._limiter = rate_limiter
        self._extensions: tuple[Any, ...] = tuple(extensions)
        self._hooks = tuple(exts)
        self._signature = signature if signature else None
        self._flat_signature = flat_signature
        self._prioritized = tuple(s for s in (sampler, remover) if isinstance(s, Prioritized))
        self._reject_negative = bool(self._prioritized)
        rate_limiter.attach(name)  # last: a table that failed to build does not keep the limiter

        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._store = ChunkStore()
        self._server: Any = None
        self._closed = False
        self._waiting = 0  # threads blocked in _wait_locked
        # Samplers lingering for a fuller batch wait on their own condition, woken only when
        # their batch is admitted, an insert has to wait, or the table changes otherwise (not
        # by every insert: that would cost a thread switch per insert).
        self._linger_cond = threading.Condition(self._lock)
        self._lingering: list[int] = []  # the batch size each lingering sampler waits for
        self._rng = np.random.default_rng()
        self._key_rng = random.Random()

        cap = 64
        # Per-slot metadata: array.array for fast scalar access, with numpy views of the same
        # memory (the arrays are replaced, never resized, so the views stay valid).
        self._a_keys = array.array("Q", bytes(8 * cap))
        self._a_prio = array.array("d", bytes(8 * cap))
        self._a_times = array.array("i", bytes(4 * cap))
        self._a_seq = array.array("q", bytes(8 * cap))
        self._make_views()
        self._traj: list[Any] = [None] * cap
        self._squeeze: list[Any] = [None] * cap
        self._key_to_slot: dict[int, int] = {}
        self._free: list[int] = list(range(cap - 1, -1, -1))
        self._next_seq = 0
        self._episode_refs: dict[int, int] = {}
        self._num_deleted_episodes = 0
        self._num_unique_samples = 0
        self._remaining_samples = 0  # sum of (max_times_sampled - times) over items, if limited

    # -- construction helpers --------------------------------------------------------------------
    @classmethod
    def queue(cls, name: str, max_size: int, extensions: Sequence[Any] = (),
              signature: Any = None) -> Table:
        """A FIFO queue: Fifo sampler and remover, ``max_times_sampled=1``, Queue limiter."""
        return cls(name, Fifo(), Fifo(), max_size, Queue(max_size), 1, extensions, signature)

    @classmethod
    def stack(cls, name: str, max_size: int, extensions: Sequence[Any] = (),
              signature: Any = None) -> Table:
        """A LIFO stack: Lifo sampler and remover, ``max_times_sampled=1``, Stack limiter."""
        return cls(name, Lifo(), Lifo(), max_size, Stack(max_size), 1, extensions, signature)

    def replace(self, name: str | None = None, sampler: ItemSelector | None = None,
                remover: ItemSelector | None = None, max_size: int | None = None,
                rate_limiter: RateLimiter | None = None, max_times_sampled: int | None = None,
                extensions: Sequence[Any] | None = None, signature: Any = None) -> Table:
        """A new, empty table with some settings changed and the rest taken from this one."""
        return Table(
            name=name if name is not None else self._name,
            sampler=sampler or selector_from_options(self._sampler.options()),
            remover=remover or selector_from_options(self._remover.options()),
            max_size=max_size if max_size is not None else self._max_size,
            rate_limiter=rate_limiter or self._limiter.clone(),
            max_times_sampled=(max_times_sampled if max_times_sampled is not None
                               else self._max_times_sampled),
            extensions=extensions if extensions is not None else self._extensions,
            signature=signature if signature is not None else self._signature,
        )

    def _bind(self, server: Any, store: ChunkStore) -> None:
        """Attaches the table to a server and its shared chunk store (once)."""
        with self._lock:
            if self._server is not None and self._server is not server:
                raise ValueError(f"table {self._name!r} already belongs to another server")
            if self._key_to_slot:
                # Move the references of items inserted before binding into the shared store.
                all_chunks = [c for s in self._key_to_slot.values()
                              for c in items_lib.iter_chunks(self._traj[s])]
                self._store.release(all_chunks)
                store.acquire(all_chunks)
            self._server = server
            self._store = store

    # -- read-only properties ----------------------------------------------------------------------
    @property
    def name(self) -> str:
        return self._name

    @property
    def max_size(self) -> int:
        return self._max_size

    @property
    def max_times_sampled(self) -> int:
        return self._max_times_sampled

    @property
    def sampler(self) -> ItemSelector:
        return self._sampler

    @property
    def remover(self) -> ItemSelector:
        return self._remover

    @property
    def rate_limiter(self) -> RateLimiter:
        return self._limiter

    @property
    def signature(self) -> Any:
        return self._signature

    @property
    def flat_signature(self) -> list[Any] | None:
        return self._flat_signature

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def chunk_store(self) -> ChunkStore:
        return self._store

    def __len__(self) -> int:
        return len(self._key_to_slot)

    def __bool__(self) -> bool:
        # A table is truthy even when empty (``table or default`` keeps the caller's table).
        return True

    @property
    def size(self) -> int:
        return len(self._key_to_slot)

    def can_sample(self, num_samples: int) -> bool:
        """Whether ``num_samples`` samples would be admitted now.

        Unlike Reverb this also counts ``max_times_sampled``: a queue with 2 items cannot give 3.
        """
        n = _positive_int(num_samples, "num_samples")
        with self._lock:
            if self._max_times_sampled and n > self._remaining_samples:
                return False
            return self._limiter.can_sample(n)

    def can_insert(self, num_inserts: int) -> bool:
        """Whether ``num_inserts`` new items would be admitted now."""
        n = _positive_int(num_inserts, "num_inserts")
        with self._lock:
            return self._limiter.can_insert(n)

    @property
    def info(self) -> TableInfo:
        """A :class:`~ostinato.types.TableInfo` snapshot."""
        with self._lock:
            return TableInfo(
                name=self._name,
                sampler_options=self._sampler.options(),
                remover_options=self._remover.options(),
                max_size=self._max_size,
                max_times_sampled=self._max_times_sampled,
                rate_limiter_info=self._limiter.info(),
                signature=self._signature,
                current_size=len(self._key_to_slot),
                num_episodes=len(self._episode_refs),
                num_deleted_episodes=self._num_deleted_episodes,
                num_unique_samples=self._num_unique_samples,
            )

    # -- validation -------------------------------------------------------------------------------
    def validate_priority(self, priority: float) -> None:
        """Raises ``InvalidArgumentError`` for a priority this table cannot take."""
        if priority != priority:
            raise errors.InvalidArgumentError(f"`priority` must not be nan (table {self._name!r}).")
        for sel in self._prioritized:
            try:
                sel.validate_priority(priority)
            except ValueError as e:
                raise errors.InvalidArgumentError(
                    f"{e} (table {self._name!r} uses a Prioritized selector)") from None

    def _validate_priorities(self, p: np.ndarray) -> None:
        if np.isnan(p).any():
            raise errors.InvalidArgumentError(f"Priority must not be NaN (table {self._name!r}).")
        for sel in self._prioritized:
            try:
                sel.validate_priorities(p)
            except ValueError as e:
                raise errors.InvalidArgumentError(
                    f"{e} (table {self._name!r} uses a Prioritized selector)") from None

    def _check_open(self) -> None:
        if self._closed:
            raise errors.CancelledError(f"Table {self._name!r} has been closed.")

    # -- slots ------------------------------------------------------------------------------------
    def _make_views(self) -> None:
        self._keys = np.frombuffer(self._a_keys, dtype=np.uint64)
        self._prio = np.frombuffer(self._a_prio, dtype=np.float64)
        self._times = np.frombuffer(self._a_times, dtype=np.int32)
        self._seq = np.frombuffer(self._a_seq, dtype=np.int64)

    def _grow(self) -> None:
        old = len(self._a_keys)
        for attr in ("_a_keys", "_a_prio", "_a_times", "_a_seq"):
            a = getattr(self, attr)
            b = array.array(a.typecode, a)
            b.extend(array.array(a.typecode, bytes(a.itemsize * old)))
            setattr(self, attr, b)
        self._make_views()
        self._traj.extend([None] * old)
        self._squeeze.extend([None] * old)
        self._free.extend(range(2 * old - 1, old - 1, -1))

    # -- insert -----------------------------------------------------------------------------------
    def _insert_locked(self, key: int, priority: float, traj: items_lib.Packed,
                       squeeze: tuple[bool, ...], assign: bool) -> int:
        """Inserts one admitted item; returns the key used. Caller holds the lock."""
        k2s = self._key_to_slot
        if key in k2s:
            if assign:
                self._update_slot(k2s[key], key, priority)
                return key
            while key in k2s:  # a 64-bit collision: draw a fresh key
                key = self._key_rng.getrandbits(64)
        if not self._free:
            self._grow()
        slot = self._free.pop()
        self._a_keys[slot] = key
        self._a_prio[slot] = priority
        self._a_times[slot] = 0
        self._a_seq[slot] = self._next_seq
        self._next_seq += 1
        self._traj[slot] = traj
        self._squeeze[slot] = squeeze
        k2s[key] = slot
        self._sampler.insert(slot, priority)
        self._remover.insert(slot, priority)
        chunks = traj[0::3] if type(traj[0]) is Chunk else tuple(items_lib.iter_chunks(traj))
        with self._store._lock:
            d = self._store._chunks
            for c in chunks:
                if c.refs == 0:
                    d[id(c)] = c
                c.refs += 1
        er = self._episode_refs
        for c in chunks:
            e = c.episode_id
            er[e] = er.get(e, 0) + 1
        if self._max_times_sampled:
            self._remaining_samples += self._max_times_sampled
        if self._hooks:
            for h in self._hooks:
                h.on_insert(self._name, key, priority)
        if len(k2s) > self._max_size:
            victim, _ = self._remover.sample(self._rng)
            self._delete_slot(victim)
        self._limiter.inserts += 1
        return key

    def insert(self, key: int, priority: float, trajectory: items_lib.Packed,
               squeeze: tuple[bool, ...], timeout: float | None = None,
               assign: bool = True) -> int:
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
        return self.insert_many([(key, priority, trajectory, squeeze)], Deadline.after(timeout),
                                assign=assign)[0]

    def try_insert_many(self, items: Sequence[Item], assign: bool = False) -> int:
        """Inserts items in order while the rate limiter admits them, without waiting.

        Returns:
          How many of ``items`` (a prefix) were inserted.
        """
        neg = self._reject_negative
        for it in items:
            p = it[1]
            if p != p or (neg and p < 0):
                self.validate_priority(p)
        done = 0
        with self._lock:
            if self._closed:
                self._check_open()
            lim = self._limiter
            for key, priority, traj, squeeze in items:
                if not lim.can_insert(1):
                    break
                self._insert_locked(key, priority, traj, squeeze, assign)
                done += 1
            if done:
                self._notify_inserted_locked()
        return done

    def insert_many(self, items: Sequence[Item], deadline: Deadline | None = None,
                    assign: bool = False) -> list[int]:
        """Inserts items in order, waiting for the rate limiter between them.

        Raises:
          RateLimiterTimeout: the deadline passed; the items before the one that waited are
            stored, the rest are not (``len(err.inserted)`` tells how many).
          InvalidArgumentError: a priority is NaN, or negative on a Prioritized table; nothing
            was stored.
        """
        for it in items:
            self.validate_priority(it[1])
        deadline = deadline or Deadline.never()
        keys: list[int] = []
        with self._cond:
            self._check_open()
            lim = self._limiter
            for key, priority, traj, squeeze in items:
                if not lim.can_insert(1):
                    self._notify_all_locked()  # lingering samplers too: take what is there
                    self._wait_locked(lambda: lim.can_insert(1), deadline, "insert", keys)
                keys.append(self._insert_locked(key, priority, traj, squeeze, assign))
            self._notify_inserted_locked()
        return keys

    def _notify_inserted_locked(self) -> None:
        """After inserts: wakes blocked calls, and lingering samplers whose batch is now
        admitted (or if the limiter now blocks inserts: a lingering sampler must not hold
        writers back)."""
        if self._waiting:
            self._cond.notify_all()
        if self._lingering:
            n = min(self._lingering)
            if self._allowed_locked(n) >= n or not self._limiter.can_insert(1):
                self._linger_cond.notify_all()

    def _notify_all_locked(self) -> None:
        self._cond.notify_all()
        if self._lingering:
            self._linger_cond.notify_all()

    def _wait_locked(self, ready: Any, deadline: Deadline, what: str,
                     done: list[Any] | None = None) -> None:
        while not ready():
            if self._closed:
                raise errors.CancelledError(f"Table {self._name!r} was closed while waiting to {what}.")
            remaining = deadline.remaining()
            if remaining is not None and remaining <= 0:
                err = errors.RateLimiterTimeout(
                    f"Rate limiter of table {self._name!r} did not allow the {what} before the "
                    f"deadline ({self._limiter.describe_state(len(self._key_to_slot))}).")
                err.inserted = list(done or [])  # type: ignore[attr-defined]
                raise err
            self._waiting += 1
            try:
                self._cond.wait(remaining if remaining is not None else 1.0)
            finally:
                self._waiting -= 1

    def _linger_locked(self, n: int, linger: float, deadline: Deadline, cancelled: Any) -> None:
        """Waits up to ``linger`` seconds (and within ``deadline``) for ``n`` admitted samples."""
        end = time.monotonic() + linger
        remaining = deadline.remaining()
        if remaining is not None:
            end = min(end, time.monotonic() + remaining)
        while not self._closed and self._allowed_locked(n) < n \
                and not (cancelled is not None and cancelled()) and self._limiter.can_insert(1):
            left = end - time.monotonic()
            if left <= 0:
                return
            self._lingering.append(n)
            try:
                self._linger_cond.wait(left)
            finally:
                self._lingering.remove(n)

    # -- sample -----------------------------------------------------------------------------------
    def _allowed_locked(self, n: int) -> int:
        k = self._limiter.num_samples_allowed(n)
        if self._max_times_sampled and k > self._remaining_samples:
            k = self._remaining_samples
        return k

    def wake(self) -> None:
        """Wakes blocked calls so that they re-check their conditions (e.g. ``cancelled``)."""
        with self._cond:
            self._notify_all_locked()

    def sample(self, num_samples: int = 1, timeout: float | None = None,
               cancelled: Any = None, linger: float = 0.0) -> items_lib.SampleBatch:
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
        n = _positive_int(num_samples, "num_samples")
        deadline = Deadline.after(timeout)
        with self._cond:
            self._check_open()
            rate_limited = False
            while True:
                if self._allowed_locked(1) < 1:
                    rate_limited = True
                    if cancelled is None:
                        self._wait_locked(lambda: self._allowed_locked(1) >= 1, deadline, "sample")
                    else:
                        self._wait_locked(lambda: cancelled() or self._allowed_locked(1) >= 1,
                                          deadline, "sample")
                if linger > 0 and n > 1 and self._allowed_locked(n) < n:
                    self._linger_locked(n, linger, deadline, cancelled)
                    linger = 0.0  # once: then take what is admitted (or wait again if others
                    continue      # sampled everything meanwhile)
                break
            if cancelled is not None and cancelled():
                raise errors.CancelledError(
                    f"sample from table {self._name!r} was cancelled by its caller")
            k = self._allowed_locked(n)
            if self._max_times_sampled:
                batch = self._sample_one_by_one(k)
            else:
                batch = self._sample_vectorised(k)
            batch.rate_limited = rate_limited
            if self._waiting:
                self._cond.notify_all()
            return batch

    def _sample_vectorised(self, k: int) -> items_lib.SampleBatch:
        slots, probs = self._sampler.sample_many(k, self._rng)
        times = self._times
        old = times[slots]
        if k == 1:
            reported = old + 1
            times[slots] += 1
            self._num_unique_samples += int((old == 0).sum())
        else:
            order = np.argsort(slots, kind="stable")
            s_sorted = slots[order]
            first = np.empty(k, dtype=bool)
            first[0] = True
            np.not_equal(s_sorted[1:], s_sorted[:-1], out=first[1:])
            ar = np.arange(k)
            start = np.maximum.accumulate(np.where(first, ar, 0))
            rank = np.empty(k, dtype=np.int64)
            rank[order] = ar - start
            reported = old + rank + 1
            np.add.at(times, slots, 1)
            self._num_unique_samples += int(((old == 0) & (rank == 0)).sum())
        self._limiter.sample(k)
        size = len(self._key_to_slot)
        sl = slots.tolist()
        traj = self._traj
        sq = self._squeeze
        if self._hooks:
            for s, t in zip(sl, reported.tolist()):
                for h in self._hooks:
                    h.on_sample(self._name, int(self._keys[s]), t)
        return items_lib.SampleBatch(
            self._keys[slots], probs, np.full(k, size, dtype=np.int64), self._prio[slots],
            reported.astype(np.int32), [traj[s] for s in sl], [sq[s] for s in sl])

    def _sample_one_by_one(self, k: int) -> items_lib.SampleBatch:
        keys = np.empty(k, dtype=np.uint64)
        probs = np.empty(k)
        sizes = np.empty(k, dtype=np.int64)
        prios = np.empty(k)
        times_out = np.empty(k, dtype=np.int32)
        trajs = []
        sqs = []
        mts = self._max_times_sampled
        for i in range(k):
            if i and self._allowed_locked(1) < 1:
                # Deletions by max_times_sampled can take the table below min_size_to_sample.
                k = i
                keys, probs, sizes, prios, times_out = (
                    keys[:k], probs[:k], sizes[:k], prios[:k], times_out[:k])
                break
            slot, p = self._sampler.sample(self._rng)
            t = self._a_times[slot] + 1
            self._a_times[slot] = t
            if t == 1:
                self._num_unique_samples += 1
            self._remaining_samples -= 1
            keys[i] = self._a_keys[slot]
            probs[i] = p
            sizes[i] = len(self._key_to_slot)
            prios[i] = self._a_prio[slot]
            times_out[i] = t
            trajs.append(self._traj[slot])
            sqs.append(self._squeeze[slot])
            self._limiter.sample(1)
            for h in self._hooks:
                h.on_sample(self._name, int(keys[i]), t)
            if t >= mts:
                self._delete_slot(slot)
        return items_lib.SampleBatch(keys, probs, sizes, prios, times_out, trajs, sqs)

    # -- mutate -----------------------------------------------------------------------------------
    def _update_slot(self, slot: int, key: int, priority: float) -> None:
        self._a_prio[slot] = priority
        self._sampler.update(slot, priority)
        self._remover.update(slot, priority)
        for h in self._hooks:
            h.on_update(self._name, key, priority)

    def _delete_slot(self, slot: int) -> None:
        key = self._a_keys[slot]
        traj = self._traj[slot]
        self._sampler.delete(slot)
        self._remover.delete(slot)
        del self._key_to_slot[key]
        chunks = traj[0::3] if type(traj[0]) is Chunk else tuple(items_lib.iter_chunks(traj))
        self._store.release(chunks)
        er = self._episode_refs
        for c in chunks:
            e = c.episode_id
            v = er[e] - 1
            if v:
                er[e] = v
            else:
                del er[e]
                self._num_deleted_episodes += 1
        if self._max_times_sampled:
            self._remaining_samples -= self._max_times_sampled - self._a_times[slot]
        self._traj[slot] = None
        self._squeeze[slot] = None
        self._free.append(slot)
        self._limiter.deletes += 1
        if self._hooks:
            for h in self._hooks:
                h.on_delete(self._name, key)

    def _slots_of(self, keys: list[int]) -> tuple[list[int] | None, list[int]]:
        """Maps keys to slots, skipping unknown keys. Returns (positions or None if all
        keys are known, slots)."""
        slots = list(map(self._key_to_slot.get, keys))
        if None not in slots:
            return None, slots  # type: ignore[return-value]
        pos = [i for i, s in enumerate(slots) if s is not None]
        return pos, [slots[i] for i in pos]  # type: ignore[misc]

    def update_priorities(self, keys: Sequence[int] | np.ndarray,
                          priorities: Sequence[float] | np.ndarray) -> int:
        """Sets new priorities; unknown keys are ignored. Validates all before changing any.

        Returns:
          The number of items updated.
        """
        p = np.asarray(priorities, dtype=np.float64).reshape(-1)
        key_list = _key_list(keys)
        if len(key_list) != len(p):
            raise errors.InvalidArgumentError(
                f"keys ({len(key_list)}) and priorities ({len(p)}) must have the same length")
        self._validate_priorities(p)
        with self._cond:
            self._check_open()
            pos, slots = self._slots_of(key_list)
            if not slots:
                return 0
            s = np.array(slots, dtype=np.int64)
            pv = p if pos is None else p[pos]
            self._prio[s] = pv
            self._sampler.update_many(s, pv)
            self._remover.update_many(s, pv)
            if self._hooks:
                known = key_list if pos is None else [key_list[i] for i in pos]
                for k, v in zip(known, pv.tolist()):
                    for h in self._hooks:
                        h.on_update(self._name, k, v)
            self._notify_all_locked()
            return len(slots)

    def delete(self, keys: Sequence[int] | np.ndarray) -> int:
        """Deletes items; unknown keys are ignored. Returns the number deleted."""
        key_list = _key_list(keys)
        with self._cond:
            self._check_open()
            n = 0
            for k in key_list:
                s = self._key_to_slot.get(k)
                if s is not None:
                    self._delete_slot(s)
                    n += 1
            if n:
                self._notify_all_locked()
            return n

    def mutate_priorities(self, updates: dict[int, float] | None = None,
                          deletes: Sequence[int] | None = None) -> None:
        """Reverb's ``MutateItems``: deletes first, then updates; unknown keys are ignored."""
        if updates:
            p = np.fromiter(updates.values(), dtype=np.float64, count=len(updates))
            self._validate_priorities(p)
        if deletes:
            self.delete(list(deletes))
        if updates:
            self.update_priorities(list(updates.keys()), p)

    def reset(self) -> None:
        """Removes every item and resets the rate limiter and statistics."""
        with self._cond:
            self._check_open()
            all_chunks = [c for s in self._key_to_slot.values()
                          for c in items_lib.iter_chunks(self._traj[s])]
            self._store.release(all_chunks)
            self._sampler.clear()
            self._remover.clear()
            self._key_to_slot.clear()
            cap = len(self._keys)
            self._traj = [None] * cap
            self._squeeze = [None] * cap
            self._free = list(range(cap - 1, -1, -1))
            self._episode_refs.clear()
            self._num_deleted_episodes = 0
            self._num_unique_samples = 0
            self._remaining_samples = 0
            self._limiter.reset()
            for h in self._hooks:
                h.on_reset(self._name)
            self._notify_all_locked()

    def close(self) -> None:
        """Wakes every waiting call with ``CancelledError``; later calls fail the same way."""
        with self._cond:
            self._closed = True
            self._notify_all_locked()

    # -- introspection (tests, checkpoints) ---------------------------------------------------------
    def get(self, key: int) -> dict[str, Any]:
        """Metadata of one item: key, priority, times_sampled, trajectory, squeeze."""
        with self._lock:
            s = self._key_to_slot.get(key)
            if s is None:
                raise KeyError(f"Key not found: {key} (table {self._name!r})")
            return {"key": key, "priority": float(self._prio[s]),
                    "times_sampled": int(self._times[s]), "trajectory": self._traj[s],
                    "squeeze": self._squeeze[s], "insertion_order": int(self._seq[s])}

    def keys(self) -> np.ndarray:
        """Keys of all items in insertion order."""
        with self._lock:
            slots = np.fromiter(self._key_to_slot.values(), dtype=np.int64,
                                count=len(self._key_to_slot))
            slots = slots[np.argsort(self._seq[slots], kind="stable")]
            return self._keys[slots].copy()

    # -- checkpoints -------------------------------------------------------------------------------
    def snapshot(self) -> dict[str, Any]:
        """A consistent copy of all items and counters, taken under the lock (for checkpoints).

        Metadata arrays are copied in insertion order; trajectories are the items' immutable
        packed tuples, so the chunk data can be written after the lock is released.
        ``heap_order`` is the order in which a heap selector last saw the items (its ties).
        """
        with self._lock:
            slots = np.fromiter(self._key_to_slot.values(), dtype=np.int64,
                                count=len(self._key_to_slot))
            slots = slots[np.argsort(self._seq[slots], kind="stable")]
            heaps = [s for s in (self._sampler, self._remover) if isinstance(s, HeapSelector)]
            sl = slots.tolist()
            lim = self._limiter
            return {"keys": self._keys[slots], "priorities": self._prio[slots],
                    "times_sampled": self._times[slots],
                    "trajectories": [self._traj[s] for s in sl],
                    "squeeze": [self._squeeze[s] for s in sl],
                    "heap_order": (np.argsort(heaps[0]._version[slots], kind="stable")
                                   if heaps else None),
                    "inserts": lim.inserts, "samples": lim.samples, "deletes": lim.deletes,
                    "num_deleted_episodes": self._num_deleted_episodes,
                    "num_unique_samples": self._num_unique_samples}

    def restore_items(self, keys: np.ndarray, priorities: np.ndarray, times_sampled: np.ndarray,
                      trajectories: Sequence[items_lib.Packed], squeeze: Sequence[tuple[bool, ...]],
                      counters: dict[str, int], heap_order: np.ndarray | None = None,
                      chunk_refs: tuple[Sequence[Chunk], Sequence[int]] | None = None) -> None:
        """Fills this empty table with checkpointed items (given in insertion order).

        Bypasses the rate limiter, keeps each item's priority and ``times_sampled``, then sets
        the limiter and statistics counters to the checkpointed values. Built in bulk: the items
        take slots ``0..n-1``, the per-slot arrays are filled at once and each selector is built
        by :meth:`ItemSelector.bulk_insert` (the state inserting the items one by one gives).

        Args:
          heap_order: the order in which heap selectors last saw the items (a permutation of
            ``range(n)``; of equal priorities, the item earlier in it is selected first), or
            None for insertion order.
          chunk_refs: optional ``(chunks, counts)``: the chunks the trajectories reference and
            how many slices reference each, when the caller knows them (else counted here).
        """
        if isinstance(keys, np.ndarray) and keys.dtype.kind in "ui":
            karr = keys.astype(np.uint64, copy=False).reshape(-1)
            klist = karr.tolist()
        else:
            klist = _key_list(keys)
            karr = np.array(klist, dtype=np.uint64)
        n = len(klist)
        prio = np.asarray(priorities, dtype=np.float64).reshape(-1)
        times = np.asarray(times_sampled, dtype=np.int64).reshape(-1)
        if not len(prio) == len(times) == len(trajectories) == len(squeeze) == n:
            raise errors.FailedPreconditionError(
                f"restore into table {self._name!r}: {n} keys, {len(prio)} priorities, "
                f"{len(times)} times_sampled, {len(trajectories)} trajectories and "
                f"{len(squeeze)} squeeze flags")
        order = None
        if heap_order is not None:
            order = np.asarray(heap_order, dtype=np.int64).reshape(-1)
            if len(order) != n or (n and (order.min() < 0 or order.max() >= n
                                          or np.bincount(order).max() > 1)):
                raise errors.FailedPreconditionError(
                    f"restore into table {self._name!r}: heap_order is not a permutation of "
                    f"the {n} items")
        with self._cond:
            self._check_open()
            if self._key_to_slot or n > self._max_size:
                raise errors.FailedPreconditionError(
                    f"cannot restore {n} items into table {self._name!r} holding "
                    f"{len(self._key_to_slot)} items with max_size {self._max_size}")
            k2s = dict(zip(klist, range(n)))
            if len(k2s) != n:
                seen: set[int] = set()
                for k in klist:
                    if k in seen:
                        raise errors.FailedPreconditionError(f"duplicate key {k} in checkpoint")
                    seen.add(k)
            cap = len(self._a_keys)
            if cap < n:
                while cap < n:
                    cap *= 2
                for attr in ("_a_keys", "_a_prio", "_a_times", "_a_seq"):
                    a = getattr(self, attr)
                    setattr(self, attr, array.array(a.typecode, bytes(a.itemsize * cap)))
                self._make_views()
                self._traj.extend([None] * (cap - len(self._traj)))
                self._squeeze.extend([None] * (cap - len(self._squeeze)))
            self._keys[:n] = karr
            self._prio[:n] = prio
            self._times[:n] = times
            self._seq[:n] = np.arange(self._next_seq, self._next_seq + n, dtype=np.int64)
            self._next_seq += n
            self._traj[:n] = trajectories
            self._squeeze[:n] = squeeze
            self._free = list(range(cap - 1, n - 1, -1))
            self._key_to_slot.update(k2s)
            slots = np.arange(n, dtype=np.int64)  # slot i holds item i
            for sel in (self._sampler, self._remover):
                if order is not None and isinstance(sel, HeapSelector):
                    sel.bulk_insert(order, prio[order])  # replays the heap's tie order
                else:
                    sel.bulk_insert(slots, prio)
            if chunk_refs is None:  # count the slices of each chunk (by identity)
                found: dict[int, list[Any]] = {}
                for tr in trajectories:
                    for c in (tr[0::3] if type(tr[0]) is Chunk else items_lib.iter_chunks(tr)):
                        e = found.get(id(c))
                        if e is None:
                            found[id(c)] = [c, 1]
                        else:
                            e[1] += 1
                chunk_refs = ([e[0] for e in found.values()], [e[1] for e in found.values()])
            chunks, counts = chunk_refs
            counts = counts.tolist() if isinstance(counts, np.ndarray) else list(counts)
            with self._store._lock:
                d = self._store._chunks
                for c, m in zip(chunks, counts):
                    if m:
                        if c.refs == 0:
                            d[id(c)] = c
                        c.refs += m
            er = self._episode_refs
            for c, m in zip(chunks, counts):
                if m:
                    er[c.episode_id] = er.get(c.episode_id, 0) + m
            if self._max_times_sampled:
                self._remaining_samples += self._max_times_sampled * n - int(times.sum())
            if self._hooks:
                for k, p in zip(klist, prio.tolist()):
                    for h in self._hooks:
                        h.on_insert(self._name, k, p)
            self._limiter.restore_counters(counters["inserts"], counters["samples"],
                                           counters["deletes"])
            self._num_deleted_episodes = int(counters["num_deleted_episodes"])
            self._num_unique_samples = int(counters["num_unique_samples"])
            self._notify_all_locked()

    def __repr__(self) -> str:
        s = (f"Table(sampler={self._sampler!r}, remover={self._remover!r}, "
             f"max_size={self._max_size}, max_times_sampled={self._max_times_sampled}, "
             f"name={self._name}, rate_limiter={self._limiter!r}, "
             f"signature={'nullptr' if self._signature is None else self._signature!r}")
        if self._extensions:
            s += f", extensions={list(self._extensions)!r}"
        return s + ")"


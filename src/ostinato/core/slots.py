"""The items of one table: per-slot metadata arrays and the chunks each item holds.

A table gives every item a *slot*, a small dense integer, and keeps the item's metadata in flat
arrays indexed by slot (key, priority, times sampled, insertion sequence number), so selectors
and batch operations work on them vectorised. :class:`Slots` owns those arrays, their growth,
the free list, the key -> slot index, each item's packed trajectory and squeeze flags, and the
references the items hold on chunks in the server's :class:`~ostinato.core.chunks.ChunkStore`
(and so which episodes are still referenced).

Not thread-safe: the owning table calls it under its lock.
"""

from __future__ import annotations

import array
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

from ostinato.core import items as items_lib
from ostinato.core.chunk_counts import count_chunks, count_located
from ostinato.core.chunks import Chunk, ChunkStore
from ostinato.core.locations import LocatedCall, Locations
from ostinato.core.selector_base import consecutive
from ostinato.core.untrack import untrack, untrack_objects

_INITIAL_CAPACITY = 64
#: A table's items from this many on have their trajectories taken off the cyclic garbage
#: collector (:mod:`ostinato.core.untrack`); below it, full collections visiting them cost less
#: than untracking them would.
UNTRACK_FROM = 65_536

#: Runs an iterator in C, keeping nothing.
_consume: Callable[[Iterable[Any]], None] = deque(maxlen=0).extend


#: Sampled items per generation whose slots :meth:`Slots.remember_sampled` keeps (two
#: generations: between RECENT_MAX and twice that many of the last sampled).
RECENT_MAX = 2_048


class Slots:
    """Items by slot, with their chunk and episode references.

    The metadata live in ``array.array`` objects (fast scalar access) with numpy views of the
    same memory (:attr:`keys`, :attr:`priorities`, :attr:`times_sampled`, :attr:`sequence`),
    replaced -- never resized -- when the capacity grows, so a view taken after the last growth
    stays valid.
    """

    def __init__(self, store: ChunkStore) -> None:
        self.store = store
        cap = _INITIAL_CAPACITY
        self.a_keys = array.array("Q", bytes(8 * cap))
        self.a_prio = array.array("d", bytes(8 * cap))
        self.a_times = array.array("i", bytes(4 * cap))
        self.a_seq = array.array("q", bytes(8 * cap))
        self._make_views()
        self.traj: list[Any] = [None] * cap
        self.squeeze: list[Any] = [None] * cap
        untrack_objects(self.traj, self.squeeze)  # not walked by full garbage collections
        self.key_to_slot: dict[int, int] = {}
        # key -> slot of recently sampled items (see remember_sampled), in two generations of
        # at most RECENT_MAX: small dicts that stay in the CPU's caches, where a lookup in
        # key_to_slot of a big table is a cache miss.
        self.recent: dict[int, int] = {}
        self.recent_old: dict[int, int] = {}
        self.free: list[int] = list(range(cap - 1, -1, -1))
        self.next_seq = 0
        self.episode_refs: dict[int, int] = {}  # episode id -> chunk references to it
        self.num_deleted_episodes = 0
        #: Where located items have their rows (for batch assembly with one ``take``).
        self.locations = Locations(cap)

    # -- capacity -----------------------------------------------------------------------------
    def _make_views(self) -> None:
        self.keys = np.frombuffer(self.a_keys, dtype=np.uint64)
        self.priorities = np.frombuffer(self.a_prio, dtype=np.float64)
        self.times_sampled = np.frombuffer(self.a_times, dtype=np.int32)
        self.sequence = np.frombuffer(self.a_seq, dtype=np.int64)

    @property
    def capacity(self) -> int:
        return len(self.a_keys)

    def _resize(self, cap: int) -> None:
        """Capacity ``cap`` (>= the current one); new slots are empty."""
        old = self.capacity
        for attr in ("a_keys", "a_prio", "a_times", "a_seq"):
            a = getattr(self, attr)
            b = array.array(a.typecode, a)
            b.extend(array.array(a.typecode, bytes(a.itemsize * (cap - old))))
            setattr(self, attr, b)
        self._make_views()
        self.traj.extend([None] * (cap - len(self.traj)))
        self.squeeze.extend([None] * (cap - len(self.squeeze)))
        self.locations.grow(cap)

    def _grow(self) -> None:
        old = self.capacity
        self._resize(2 * old)
        self.free.extend(range(2 * old - 1, old - 1, -1))

    def _reserve(self, n: int) -> None:
        """Capacity >= ``n`` (only while no item is held)."""
        cap = self.capacity
        if cap >= n:
            return
        while cap < n:
            cap *= 2
        self._resize(cap)

    # -- items ---------------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.key_to_slot)

    def add(
        self, key: int, priority: float, traj: items_lib.Packed, squeeze: tuple[bool, ...]
    ) -> int:
        """Stores a new item (its key must be unused) and references its chunks; returns its
        slot."""
        if not self.free:
            self._grow()
        slot = self.free.pop()
        self.a_keys[slot] = key
        self.a_prio[slot] = priority
        self.a_times[slot] = 0
        self.a_seq[slot] = self.next_seq
        self.next_seq += 1
        self.traj[slot] = traj
        flat = items_lib.is_flat(traj)
        if flat and len(self.key_to_slot) >= UNTRACK_FROM:  # out of full garbage collections
            untrack_objects(traj)
        self.squeeze[slot] = squeeze
        self.key_to_slot[key] = slot
        chunks = traj[0::3] if flat else items_lib.chunk_refs(traj)
        self.store.acquire(chunks)
        er = self.episode_refs
        for c in chunks:
            e = c.episode_id
            er[e] = er.get(e, 0) + 1
        loc = self.locations
        if flat and loc.flat_len == len(traj):  # the usual case: one call, on every insert
            loc.add_flat(loc.array, slot * loc.stride_bytes, traj)
        else:
            loc.add(slot, traj)
        return slot

    def add_many(
        self,
        keys: Sequence[int],
        priorities: Sequence[float],
        trajs: Sequence[items_lib.Packed],
        squeezes: Sequence[tuple[bool, ...]],
        victims: Sequence[int] = (),
        located: Sequence[LocatedCall] | None = None,
    ) -> Sequence[int] | None:
        """Stores new items (their keys distinct and unused) as :meth:`add` in turn would (the
        same slots, sequence numbers and references), with the per-item work in C-level maps;
        returns their slots.

        ``victims``: items of a full table to evict, each after one of the last
        ``len(victims)`` adds, as :meth:`remove` would then (their slots are reused as they
        would be). Returns None, having changed nothing, when that order cannot be kept in a
        batch: an episode that only victims refer to, and new items too, would be counted as
        deleted in between. The slots are returned as a ``range`` when they are consecutive.

        ``located``: where the items have their rows, as their writer worked it out, call
        by call (a vector writer in this process holds it as arrays; for every item it is
        what :meth:`Locations.add` would record, item by item, at a far higher cost). Used
        when it fits this table's locations (then every item is flat, of the table's number
        of columns), else ignored.
        """
        n = len(keys)
        k = len(victims)
        loc = self.locations
        firsts = None if located is None else loc.firsts(located, n)
        # References of the new items per distinct chunk (a writer's items share chunks).
        per_chunk: dict[Chunk, int] = {}
        nested: list[int] = []  # the items that are not flat (a column of several slices)
        if firsts is None:
            length, nested, fields = count_chunks(per_chunk, trajs, transpose=True)
        else:  # every item flat, of the table's number of columns
            fields = None
            count_located(per_chunk, located, loc.ncols)  # type: ignore[arg-type]
            length = loc.flat_len
        er = self.episode_refs
        if k:
            gone_chunks: dict[Chunk, int] = {}
            count_chunks(gone_chunks, list(map(self.traj.__getitem__, victims)))
            gone_episodes: dict[int, int] = {}
            for chunk, count in gone_chunks.items():
                e = chunk.episode_id
                gone_episodes[e] = gone_episodes.get(e, 0) + count
            if any(er[e] == c for e, c in gone_episodes.items()):
                new_episodes = {c.episode_id for c in per_chunk}
                if any(er[e] == c and e in new_episodes for e, c in gone_episodes.items()):
                    return None
        free = self.free
        slots: list[int] = []
        # Slots from the free list: every add's, up to the first one followed by an eviction.
        take = n - k + 1 if k else n
        while len(slots) < take:  # the slots (and growth) that pop() in turn would give
            if not free:
                self._grow()
                free = self.free
            m = min(take - len(slots), len(free))
            slots += free[len(free) - m :][::-1]
            del free[len(free) - m :]
        if k:
            # Each eviction frees the slot the next add takes; the last one stays free.
            slots += victims[:-1]
            self._forget(victims)
            free.append(victims[-1])
        if len(self.key_to_slot) + n > UNTRACK_FROM:  # kept out of full garbage collections
            untrack(trajs, all_flat=length > 0 and not nested)
        first = slots[0]
        run = consecutive(slots)
        seq = self.next_seq
        if run is not None:
            # Consecutive slots (a fresh table, or a full Fifo table between wrap-arounds):
            # slices instead of an index per item, here and in the selectors (given the range).
            where: Any = slice(first, first + n)
            slots = run  # type: ignore[assignment]
            self.traj[where] = trajs
            self.squeeze[where] = squeezes
        else:
            where = np.array(slots, dtype=np.int64)
            _consume(map(self.traj.__setitem__, slots, trajs))
            _consume(map(self.squeeze.__setitem__, slots, squeezes))
        self.keys[where] = keys
        p = priorities[0]
        # One priority for all (a writer's call; `count` compares by identity first): no
        # conversion per item.
        self.priorities[where] = p if priorities.count(p) == n else priorities
        self.times_sampled[where] = 0
        self.sequence[where] = np.arange(seq, seq + n, dtype=np.int64)
        self.next_seq = seq + n
        self.key_to_slot.update(zip(keys, slots))
        if firsts is not None:
            loc.put(where, located, firsts)  # type: ignore[arg-type]
        elif length > 0 and length == loc.flat_len:
            for i in nested:  # located one by one (rows of several chunks)
                loc.add(slots[i], trajs[i])
            if fields is None or not loc.add_runs(where, n, nested, fields):
                stride = loc.stride_bytes
                offsets = (
                    list(range(first * stride, (first + n) * stride, stride))
                    if type(where) is slice
                    else (where * stride).tolist()
                )
                flat = trajs
                if nested:  # the others together
                    flat = list(trajs)
                    for i in reversed(nested):
                        del offsets[i], flat[i]
                loc.add_flat_many(loc.array, offsets, flat)
        else:
            _consume(map(loc.add, slots, trajs))
        counts = list(per_chunk.values())
        self.store.acquire_many(list(per_chunk), counts)
        for chunk, count in zip(per_chunk, counts):  # a few distinct chunks, not every ref
            e = chunk.episode_id
            er[e] = er.get(e, 0) + count
        if k:  # released after the new items' references: a shared chunk stays stored
            self.store.release_many(list(gone_chunks), list(gone_chunks.values()))
            for e, c in gone_episodes.items():
                v = er[e] - c
                if v:
                    er[e] = v
                else:
                    del er[e]
                    self.num_deleted_episodes += 1
        return slots

    def _forget(self, slots: Sequence[int]) -> None:
        """:meth:`remove` of each of ``slots`` but for their chunk and episode references and
        the free list (the caller's)."""
        if not slots:
            return
        # Consecutive slots (a full Fifo table between wrap-arounds): slices, not a step each.
        run = consecutive(slots)
        keys = (
            self.a_keys[run.start : run.stop].tolist()
            if run is not None
            else list(map(self.a_keys.__getitem__, slots))
        )
        _consume(map(self.key_to_slot.__delitem__, keys))
        if self.recent or self.recent_old:
            for key in keys:
                self.recent.pop(key, None)
                self.recent_old.pop(key, None)
        if run is not None:
            start, stop = run.start, run.stop
            self.locations.remove_run(start, stop)
            self.traj[start:stop] = self.squeeze[start:stop] = [None] * len(run)
            return
        _consume(map(self.locations.remove, slots))
        traj = self.traj
        squeeze = self.squeeze
        for s in slots:
            traj[s] = None
            squeeze[s] = None

    def remove(self, slot: int) -> int:
        """Drops the item in ``slot`` and its chunk references; returns its key."""
        key = self.a_keys[slot]
        traj = self.traj[slot]
        del self.key_to_slot[key]
        if self.recent or self.recent_old:
            self.recent.pop(key, None)
            self.recent_old.pop(key, None)
        self.locations.remove(slot)
        chunks = items_lib.chunk_refs(traj)
        self.store.release(chunks)
        er = self.episode_refs
        for c in chunks:
            e = c.episode_id
            v = er[e] - 1
            if v:
                er[e] = v
            else:
                del er[e]
                self.num_deleted_episodes += 1
        self.traj[slot] = None
        self.squeeze[slot] = None
        self.free.append(slot)
        return key

    def _chunk_ref_counts(self) -> dict[Chunk, int]:
        """The references the items hold, per distinct chunk (counted column by column)."""
        counts: dict[Chunk, int] = {}
        if self.key_to_slot:
            count_chunks(counts, list(map(self.traj.__getitem__, self.key_to_slot.values())))
        return counts

    def clear(self) -> None:
        """Drops every item (capacity is kept) and resets the episode counters."""
        counts = self._chunk_ref_counts()
        self.store.release_many(list(counts), list(counts.values()))
        self.key_to_slot.clear()
        self.recent.clear()
        self.recent_old.clear()
        cap = self.capacity
        self.traj = [None] * cap
        self.squeeze = [None] * cap
        untrack_objects(self.traj, self.squeeze)
        self.free = list(range(cap - 1, -1, -1))
        self.episode_refs.clear()
        self.num_deleted_episodes = 0
        self.locations.clear()

    def move_to(self, store: ChunkStore) -> None:
        """Moves the items' chunk references into another store (a table joining a server)."""
        counts = self._chunk_ref_counts()
        chunks, times = list(counts), list(counts.values())
        self.store.release_many(chunks, times)
        store.acquire_many(chunks, times)
        self.store = store

    def remember_sampled(self, keys: np.ndarray, slots: np.ndarray) -> None:
        """Notes the slots of sampled items, whose priorities are usually updated next (a
        table's own choice: Prioritized tables do). At most :data:`RECENT_MAX` are kept."""
        if len(self.recent) >= RECENT_MAX:
            self.recent_old, self.recent = self.recent, {}
        self.recent.update(zip(keys.tolist(), slots.tolist()))

    def slots_of(self, keys: list[int]) -> tuple[list[int] | None, list[int]]:
        """Maps keys to slots, skipping unknown keys. Returns (positions of the known keys, or
        None if all are known; their slots)."""
        recent = self.recent  # live items only: remove() and clear() forget theirs
        if recent:
            slots = list(map(recent.get, keys))
            if None in slots:
                old, k2s = self.recent_old, self.key_to_slot
                slots = [
                    s if s is not None else old[k] if k in old else k2s.get(k)
                    for s, k in zip(slots, keys)
                ]
        else:
            slots = list(map(self.key_to_slot.get, keys))
        if None not in slots:
            return None, slots  # type: ignore[return-value]
        pos = [i for i, s in enumerate(slots) if s is not None]
        return pos, [slots[i] for i in pos]  # type: ignore[misc]

    def record_samples(self, slots: np.ndarray) -> tuple[np.ndarray, int]:
        """Counts one sample of each entry of ``slots`` (a slot may repeat).

        Returns:
          Each sample's ``times_sampled``, counting it (a slot sampled twice in the batch
          reports n+1 then n+2), and how many items were sampled for the first time.
        """
        times = self.times_sampled
        old = times[slots]
        k = len(slots)
        if k == 1:
            times[slots] += 1
            return old + 1, int((old == 0).sum())
        order = np.argsort(slots, kind="stable")
        s_sorted = slots[order]
        first = np.empty(k, dtype=bool)
        first[0] = True
        np.not_equal(s_sorted[1:], s_sorted[:-1], out=first[1:])
        ar = np.arange(k)
        start = np.maximum.accumulate(np.where(first, ar, 0))
        rank = np.empty(k, dtype=np.int64)
        rank[order] = ar - start
        new = old + rank + 1
        # Each slot's count after the batch: its last (highest-ranked) sample's, written once
        # per distinct slot (cheaper than np.add.at).
        last = np.empty(k, dtype=bool)
        last[:-1] = first[1:]
        last[-1] = True
        times[s_sorted[last]] = new[order][last]
        return new, int(((old == 0) & (rank == 0)).sum())

    def sample_batch(
        self, slots: np.ndarray, probabilities: np.ndarray, times_sampled: np.ndarray
    ) -> items_lib.SampleBatch:
        """The :class:`~ostinato.core.items.SampleBatch` of the items in ``slots``."""
        sl = slots.tolist()
        traj = self.traj
        sq = self.squeeze
        return items_lib.SampleBatch(
            self.keys[slots],
            probabilities,
            np.full(len(sl), len(self.key_to_slot), np.int64),
            self.priorities[slots],
            times_sampled.astype(np.int32),
            [traj[i] for i in sl],
            [sq[i] for i in sl],
            located=self.locations.take(slots),
        )

    def in_insertion_order(self) -> np.ndarray:
        """The slots of all items, oldest insertion first."""
        slots = np.fromiter(self.key_to_slot.values(), dtype=np.int64, count=len(self.key_to_slot))
        return slots[np.argsort(self.sequence[slots], kind="stable")]

    def fill(
        self,
        keys: np.ndarray,
        key_to_slot: dict[int, int],
        priorities: np.ndarray,
        times_sampled: np.ndarray,
        trajectories: Sequence[items_lib.Packed],
        squeeze: Sequence[tuple[bool, ...]],
        chunks: Sequence[Chunk],
        counts: Sequence[int],
    ) -> None:
        """Fills an empty instance with ``n`` items at slots ``0..n-1`` at once (restores).

        ``key_to_slot`` maps item ``i``'s key to ``i``; ``chunks``/``counts``: every chunk the
        trajectories reference and how many slices reference it (acquired in bulk).
        """
        assert not self.key_to_slot
        n = len(key_to_slot)
        self._reserve(n)
        self.keys[:n] = keys
        self.priorities[:n] = priorities
        self.times_sampled[:n] = times_sampled
        self.sequence[:n] = np.arange(self.next_seq, self.next_seq + n, dtype=np.int64)
        self.next_seq += n
        self.traj[:n] = trajectories
        if n > UNTRACK_FROM:
            untrack(trajectories)
        self.squeeze[:n] = squeeze
        self.free = list(range(self.capacity - 1, n - 1, -1))
        self.key_to_slot.update(key_to_slot)
        self.store.acquire_many(chunks, counts)
        er = self.episode_refs
        for c, m in zip(chunks, counts):
            if m:
                er[c.episode_id] = er.get(c.episode_id, 0) + m

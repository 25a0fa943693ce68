"""Deterministic selectors: by insertion order (:class:`Fifo`, :class:`Lifo`) and by priority
(:class:`HeapSelector`, built by ``MinHeap()`` / ``MaxHeap()``). Each picks one item with
probability 1.
"""

from __future__ import annotations

import array
import heapq
from collections.abc import Sequence

import numpy as np

from ostinato.core.selector_base import (
    _UNREAD,
    _VECTORISE_FROM,
    ItemSelector,
    _grow,
    _minus_ones,
    _run,
    consecutive,
)
from ostinato.core.table_info import HeapOptions, KeyDistributionOptions


class _Ordered(ItemSelector):
    """Doubly linked list of slots in insertion order (updates do not move items)."""

    deterministic = True
    _newest_first = False

    def __init__(self) -> None:
        self._prev = array.array("q")
        self._next = array.array("q")
        self._head = -1  # oldest
        self._tail = -1  # newest
        self._n = 0

    def _room(self, top: int) -> None:
        """Grows the link arrays to hold slot ``top``."""
        grow = _minus_ones(self._prev, top)
        self._prev.extend(grow)
        self._next.extend(grow)

    def _attach(self, first: int, last: int, k: int) -> None:
        """Puts a run of ``k`` new slots, already linked to each other from ``first`` to
        ``last``, after the newest."""
        tail = self._tail
        self._prev[first] = tail
        self._next[last] = -1
        if tail >= 0:
            self._next[tail] = first
        else:
            self._head = first
        self._tail = last
        self._n += k

    def insert(self, slot: int, priority: float) -> None:
        if slot >= len(self._prev):
            self._room(slot)
        self._attach(slot, slot, 1)

    def bulk_insert(self, slots: np.ndarray, priorities: np.ndarray) -> None:
        slots = np.asarray(slots, dtype=np.int64).reshape(-1)
        k = len(slots)
        if not k:
            return
        top = int(slots.max())
        if top >= len(self._prev):
            self._room(top)
        p = np.frombuffer(self._prev, dtype=np.int64)
        q = np.frombuffer(self._next, dtype=np.int64)
        p[slots[1:]] = slots[:-1]
        q[slots[:-1]] = slots[1:]
        del p, q  # views pin the arrays' size
        self._attach(int(slots[0]), int(slots[-1]), k)

    def insert_many(self, slots: Sequence[int], priorities: Sequence[float]) -> None:
        if type(slots) is range and slots.step == 1:  # consecutive slots: C-level copies
            first, last = slots[0], slots[-1]
            if last >= len(self._prev):
                self._room(last)
            self._prev[first + 1 : last + 1] = _run(first, last)
            self._next[first:last] = _run(first + 1, last + 1)
            self._attach(first, last, len(slots))
            return
        if len(slots) >= _VECTORISE_FROM:
            # The order alone places a slot here: the priorities are not read.
            self.bulk_insert(np.array(slots, dtype=np.int64), _UNREAD)
            return
        top = max(slots)
        if top >= len(self._prev):
            self._room(top)
        prev = self._prev
        nxt = self._next
        for a, b in zip(slots, slots[1:]):
            nxt[a] = b
            prev[b] = a
        self._attach(slots[0], slots[-1], len(slots))

    def update(self, slot: int, priority: float) -> None:
        pass

    def update_many(self, slots: np.ndarray, priorities: np.ndarray) -> None:
        pass

    def delete(self, slot: int) -> None:
        p = self._prev[slot]
        n = self._next[slot]
        if p >= 0:
            self._next[p] = n
        else:
            self._head = n
        if n >= 0:
            self._prev[n] = p
        else:
            self._tail = p
        self._n -= 1

    def insert_replacing(
        self, slots: Sequence[int], priorities: Sequence[float], victims: Sequence[int]
    ) -> None:
        # The list ends the same whether each victim is unlinked right after an insert or
        # all of them first: a victim is never one of the slots inserted after it.
        k = len(victims)
        nxt = self._next
        if k and victims[0] == self._head and self._is_chain(victims):
            # The k oldest, oldest first (what a full table with a Fifo remover evicts): the
            # list's head is cut off at once instead of unlinking them one by one.
            head = nxt[victims[-1]]
            self._head = head
            if head >= 0:
                self._prev[head] = -1
            else:
                self._tail = -1
            self._n -= k
        else:
            for v in victims:
                self.delete(v)
        self.insert_many(slots, priorities)

    def sample(self, rng: np.random.Generator) -> tuple[int, float]:
        return (self._tail if self._newest_first else self._head), 1.0

    def _linked_run(self, s: int, k: int) -> bool:
        """Whether slots ``s`` to ``s + k - 1`` are each linked to the next (compared with
        C-level slices instead of one lookup per slot)."""
        nxt = self._next
        return s + k <= len(nxt) and nxt[s : s + k - 1] == _run(s + 1, s + k)

    def _is_chain(self, slots: Sequence[int]) -> bool:
        """Whether each of ``slots`` (not empty) is linked to the next, in order."""
        if len(slots) >= 8 and consecutive(slots) is not None:
            # Consecutive slots (a batch reuses its victims' slots in order).
            return self._linked_run(slots[0], len(slots))
        return list(map(self._next.__getitem__, slots[:-1])) == list(slots[1:])

    def oldest(self, k: int) -> list[int]:
        """The ``k`` oldest slots, oldest first (at most as many as there are)."""
        s = self._head
        nxt = self._next
        if 8 <= k <= self._n and self._linked_run(s, k):
            return list(range(s, s + k))  # consecutive slots, linked in order: no walk
        out: list[int] = []
        while s >= 0 and len(out) < k:
            out.append(s)
            s = nxt[s]
        return out

    def ordered_slots(self) -> list[int]:
        """Slots from oldest to newest."""
        out = []
        s = self._head
        nxt = self._next
        while s >= 0:
            out.append(s)
            s = nxt[s]
        return out

    def clear(self) -> None:
        self._head = self._tail = -1
        self._n = 0

    def num_items(self) -> int:
        return self._n


class Fifo(_Ordered):
    """Selects the oldest inserted item."""

    def options(self) -> KeyDistributionOptions:
        return KeyDistributionOptions(fifo=True, is_deterministic=True)

    def clone(self) -> Fifo:
        return Fifo()

    def __repr__(self) -> str:
        return "FifoSelector"


class Lifo(_Ordered):
    """Selects the newest inserted item."""

    _newest_first = True

    def options(self) -> KeyDistributionOptions:
        return KeyDistributionOptions(lifo=True, is_deterministic=True)

    def clone(self) -> Lifo:
        return Lifo()

    def __repr__(self) -> str:
        return "LifoSelector"


class HeapSelector(ItemSelector):
    """Selects the item with the lowest (``min_heap=True``) or highest priority.

    Ties go to the item that was inserted or last updated earliest. Built on ``heapq`` with lazy
    invalidation: stale entries are skipped and the heap is compacted when they pile up.
    """

    deterministic = True

    def __init__(self, min_heap: bool = True):
        self._min_heap = bool(min_heap)
        self._sign = 1.0 if self._min_heap else -1.0
        self._heap: list[tuple[float, int, int]] = []
        self._version = np.full(64, -1, dtype=np.int64)  # update number of each live slot
        self._counter = 0
        self._n = 0

    @property
    def min_heap(self) -> bool:
        return self._min_heap

    def validate_priority(self, priority: float) -> None:
        if priority != priority:
            raise ValueError("Priority must not be NaN.")

    def validate_priorities(self, priorities: np.ndarray) -> None:
        if np.isnan(priorities).any():
            raise ValueError("Priority must not be NaN.")

    def _push(self, slot: int, priority: float) -> None:
        c = self._counter
        self._counter += 1
        self._version[slot] = c
        heapq.heappush(self._heap, (self._sign * priority, c, slot))
        if len(self._heap) > 2 * self._n + 64:
            self._compact()

    def _compact(self) -> None:
        v = self._version
        self._heap = [e for e in self._heap if v[e[2]] == e[1]]
        heapq.heapify(self._heap)

    def insert(self, slot: int, priority: float) -> None:
        if slot >= len(self._version):
            self._version = _grow(self._version, slot + 1)
        self._n += 1
        self._push(slot, priority)

    def bulk_insert(self, slots: np.ndarray, priorities: np.ndarray) -> None:
        """As :meth:`insert` in turn: later slots of the batch lose ties to earlier ones."""
        slots = np.asarray(slots, dtype=np.int64).reshape(-1)
        k = len(slots)
        if not k:
            return
        top = int(slots.max())
        if top >= len(self._version):
            self._version = _grow(self._version, top + 1)
        c = self._counter
        versions = np.arange(c, c + k, dtype=np.int64)
        self._version[slots] = versions
        self._counter = c + k
        self._n += k
        keys = self._sign * np.asarray(priorities, dtype=np.float64).reshape(-1)
        self._heap.extend(zip(keys.tolist(), versions.tolist(), slots.tolist()))
        if len(self._heap) > 2 * self._n + 64:
            self._compact()  # drops stale entries and heapifies
        else:
            heapq.heapify(self._heap)

    def update(self, slot: int, priority: float) -> None:
        self._push(slot, priority)

    def delete(self, slot: int) -> None:
        self._version[slot] = -1
        self._n -= 1

    def _top(self) -> int:
        h = self._heap
        v = self._version
        while h:
            _, c, slot = h[0]
            if v[slot] == c:
                return slot
            heapq.heappop(h)
        raise IndexError("sample from an empty selector")

    def sample(self, rng: np.random.Generator) -> tuple[int, float]:
        return self._top(), 1.0

    def clear(self) -> None:
        self._heap.clear()
        self._version[:] = -1
        self._n = 0

    def options(self) -> KeyDistributionOptions:
        return KeyDistributionOptions(heap=HeapOptions(self._min_heap), is_deterministic=True)

    def clone(self) -> HeapSelector:
        return HeapSelector(self._min_heap)

    def num_items(self) -> int:
        return self._n

    def tie_order(self, slots: np.ndarray) -> np.ndarray:
        """Positions into ``slots`` in the order the heap last saw those items (inserted or
        updated): of equal priorities, the earlier one is selected first. Checkpoints record it
        and :meth:`bulk_insert` in this order rebuilds the same ties."""
        return np.argsort(self._version[slots], kind="stable")

    def __repr__(self) -> str:
        return f"HeapSelector(sign={1 if self._min_heap else -1})"


def MinHeap() -> HeapSelector:
    """Selects the item with the lowest priority."""
    return HeapSelector(True)


def MaxHeap() -> HeapSelector:
    """Selects the item with the highest priority."""
    return HeapSelector(False)

"""Item selectors: which item a table samples, or removes when it is full.

Each selector can serve as sampler and as remover. Selectors see table *slots* (small dense
integers the table assigns to items) and priorities; they are not thread-safe, the owning table
calls them under its lock.

* :class:`Uniform` -- every item equally likely; probability ``1/n``.
* :class:`Prioritized` -- probability ``w_i / sum(w)`` with ``w = priority ** priority_exponent``
  (and ``w = 0`` for priority 0); a :class:`~ostinato.core.sum_tree.SumTree` makes sampling and
  updates O(log n), vectorised over a batch.
* :class:`Fifo` / :class:`Lifo` -- oldest / newest inserted item, probability 1.
* :class:`HeapSelector` (``MinHeap()`` / ``MaxHeap()``) -- lowest / highest priority; ties go to
  the item least recently inserted or updated; probability 1.
"""

from __future__ import annotations

import array
import heapq
import math

import numpy as np

from ostinato.core.sum_tree import SumTree
from ostinato.core.table_info import HeapOptions, KeyDistributionOptions, PrioritizedOptions
from ostinato.errors import InvalidArgumentError

_MINUS_ONES = array.array("q", [-1]) * 1024

#: Largest accepted sampling weight (``priority ** priority_exponent``). Keeping weights below
#: this bound keeps the sum of up to ~1e8 items finite, so sampling stays proportional.
MAX_WEIGHT = 1e300


def _grow(arr: np.ndarray, need: int, fill: int = -1) -> np.ndarray:
    n = len(arr)
    if need <= n:
        return arr
    new = np.full(max(need, 2 * n, 64), fill, dtype=arr.dtype)
    new[:n] = arr
    return new


class ItemSelector:
    """Base class of all selectors (Reverb's ``pybind.ItemSelector``)."""

    #: True when ``sample`` always returns the same item until the selector changes.
    deterministic: bool = False

    def validate_priority(self, priority: float) -> None:
        """Raises ``ValueError`` if the priority is not acceptable to this selector."""

    def validate_priorities(self, priorities: np.ndarray) -> None:
        """Vectorised :meth:`validate_priority`."""

    def insert(self, slot: int, priority: float) -> None:
        raise NotImplementedError

    def update(self, slot: int, priority: float) -> None:
        raise NotImplementedError

    def update_many(self, slots: np.ndarray, priorities: np.ndarray) -> None:
        for s, p in zip(slots.tolist(), priorities.tolist()):
            self.update(s, p)

    def bulk_insert(self, slots: np.ndarray, priorities: np.ndarray) -> None:
        """Inserts new (distinct, absent) slots in the given order: the same state as calling
        :meth:`insert` for each in turn, built vectorised where the selector can (a table being
        restored from a checkpoint)."""
        for s, p in zip(np.asarray(slots).tolist(), np.asarray(priorities).tolist()):
            self.insert(s, p)

    def delete(self, slot: int) -> None:
        raise NotImplementedError

    def sample(self, rng: np.random.Generator) -> tuple[int, float]:
        raise NotImplementedError

    def sample_many(self, k: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """k independent samples (with replacement) as (slots, probabilities)."""
        slot, p = self.sample(rng)
        return np.full(k, slot, dtype=np.int64), np.full(k, p, dtype=np.float64)

    def clear(self) -> None:
        raise NotImplementedError

    def options(self) -> KeyDistributionOptions:
        raise NotImplementedError

    def clone(self) -> ItemSelector:
        """A new, empty selector with the same configuration."""
        raise NotImplementedError

    def num_items(self) -> int:
        """How many items the selector holds."""
        raise NotImplementedError

    def __bool__(self) -> bool:
        # A selector is configuration as far as users are concerned: ``sampler or Fifo()``
        # must keep the caller's selector whatever it holds (Reverb's selectors are truthy).
        return True


class Uniform(ItemSelector):
    """Samples every item with equal probability."""

    def __init__(self) -> None:
        self._dense = array.array("q")  # live slots, packed
        self._pos = array.array("q")  # slot -> index into _dense (-1 if absent)

    def insert(self, slot: int, priority: float) -> None:
        pos = self._pos
        if slot >= len(pos):
            pos.extend(_MINUS_ONES * ((slot + 1 - len(pos)) // len(_MINUS_ONES) + 1))
        pos[slot] = len(self._dense)
        self._dense.append(slot)

    def bulk_insert(self, slots: np.ndarray, priorities: np.ndarray) -> None:
        slots = np.asarray(slots, dtype=np.int64).reshape(-1)
        if not len(slots):
            return
        pos = self._pos
        top = int(slots.max())
        if top >= len(pos):
            pos.extend(_MINUS_ONES * ((top + 1 - len(pos)) // len(_MINUS_ONES) + 1))
        start = len(self._dense)
        np.frombuffer(pos, dtype=np.int64)[slots] = np.arange(start, start + len(slots))
        self._dense.frombytes(slots.tobytes())

    def update(self, slot: int, priority: float) -> None:
        pass

    def update_many(self, slots: np.ndarray, priorities: np.ndarray) -> None:
        pass

    def delete(self, slot: int) -> None:
        dense = self._dense
        pos = self._pos
        i = pos[slot]
        last = dense.pop()
        if last != slot:
            dense[i] = last
            pos[last] = i
        pos[slot] = -1

    def sample(self, rng: np.random.Generator) -> tuple[int, float]:
        n = len(self._dense)
        return self._dense[int(rng.integers(n))], 1.0 / n

    def sample_many(self, k: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        n = len(self._dense)
        idx = rng.integers(0, n, size=k)
        return np.frombuffer(self._dense, dtype=np.int64)[idx], np.full(k, 1.0 / n)

    def live_slots(self) -> np.ndarray:
        return np.array(self._dense, dtype=np.int64)

    def clear(self) -> None:
        self._dense = array.array("q")
        self._pos = array.array("q")

    def options(self) -> KeyDistributionOptions:
        return KeyDistributionOptions(uniform=True, is_deterministic=False)

    def clone(self) -> Uniform:
        return Uniform()

    def num_items(self) -> int:
        return len(self._dense)

    def __repr__(self) -> str:
        return "UniformSelector"


class Prioritized(ItemSelector):
    """Samples items with probability proportional to ``priority ** priority_exponent``.

    Args:
      priority_exponent: the exponent (often called alpha); a finite number >= 0. Priority 0
        gives weight 0 (never sampled while any weight is positive), even with exponent 0.
    """

    def __init__(self, priority_exponent: float):
        try:
            e = float(priority_exponent)
        except (TypeError, ValueError):
            raise ValueError(f"priority_exponent ({priority_exponent!r}) must be a number") from None
        if not math.isfinite(e) or e < 0:
            raise ValueError(f"priority_exponent ({priority_exponent!r}) must be a finite number >= 0")
        self._exponent = e
        self._tree = SumTree(1024)
        self._uniform = Uniform()  # live slots, for the all-zero-weight fallback

    @property
    def priority_exponent(self) -> float:
        return self._exponent

    def validate_priority(self, priority: float) -> None:
        if priority != priority:
            raise ValueError("Priority must not be NaN.")
        if priority < 0:
            raise ValueError(f"Priority must not be negative (got {priority}).")
        try:
            w = self._weight(priority)
        except OverflowError:
            w = math.inf
        if not w <= MAX_WEIGHT:
            raise ValueError(
                f"Priority {priority} is too large: priority ** priority_exponent "
                f"({self._exponent:g}) must be at most {MAX_WEIGHT:g}.")

    def validate_priorities(self, priorities: np.ndarray) -> None:
        if np.isnan(priorities).any():
            raise ValueError("Priority must not be NaN.")
        if (priorities < 0).any():
            bad = priorities[priorities < 0][0]
            raise ValueError(f"Priority must not be negative (got {bad}).")
        with np.errstate(over="ignore"):
            w = self._weights(priorities)
        if not (w <= MAX_WEIGHT).all():
            bad = priorities[~(w <= MAX_WEIGHT)][0]
            raise ValueError(
                f"Priority {bad} is too large: priority ** priority_exponent "
                f"({self._exponent:g}) must be at most {MAX_WEIGHT:g}.")

    def _weight(self, priority: float) -> float:
        return 0.0 if priority == 0 else priority**self._exponent

    def _weights(self, priorities: np.ndarray) -> np.ndarray:
        w = np.power(priorities.astype(np.float64), self._exponent)
        w[priorities == 0] = 0.0
        return w

    def insert(self, slot: int, priority: float) -> None:
        self._tree.set(slot, self._weight(priority))
        self._uniform.insert(slot, priority)

    def insert_many(self, slots: np.ndarray, priorities: np.ndarray) -> None:
        self._tree.set_many(slots, self._weights(priorities))
        for s in slots.tolist():
            self._uniform.insert(s, 0.0)

    def bulk_insert(self, slots: np.ndarray, priorities: np.ndarray) -> None:
        slots = np.asarray(slots, dtype=np.int64).reshape(-1)
        w = self._weights(np.asarray(priorities, dtype=np.float64).reshape(-1))
        self._tree.set_leaves_and_rebuild(slots, w)  # O(n) bottom-up, not n O(log n) inserts
        self._uniform.bulk_insert(slots, priorities)

    def update(self, slot: int, priority: float) -> None:
        self._tree.set(slot, self._weight(priority))

    def update_many(self, slots: np.ndarray, priorities: np.ndarray) -> None:
        self._tree.set_many(slots, self._weights(priorities))

    def delete(self, slot: int) -> None:
        self._tree.set(slot, 0.0)
        self._uniform.delete(slot)

    def sample(self, rng: np.random.Generator) -> tuple[int, float]:
        total = self._tree.total
        if total <= 0 or not math.isfinite(total):
            return self._uniform.sample(rng)
        for _ in range(64):
            slot = self._tree.find(rng.random() * total)
            w = self._tree.get(slot)
            if w > 0:
                return slot, w / total
        raise RuntimeError("prioritized sampling failed to find a positive weight")  # unreachable

    def sample_many(self, k: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        total = self._tree.total
        if total <= 0 or not math.isfinite(total):
            return self._uniform.sample_many(k, rng)
        slots = self._tree.find_many(rng.random(k) * total)
        w = self._tree.get_many(slots)
        bad = w <= 0  # floating point rounding at an interval edge: draw those again
        tries = 0
        while bad.any():
            tries += 1
            if tries > 64:
                raise RuntimeError("prioritized sampling failed to find positive weights")
            nb = int(bad.sum())
            slots[bad] = self._tree.find_many(rng.random(nb) * total)
            w = self._tree.get_many(slots)
            bad = w <= 0
        return slots, w / total

    def clear(self) -> None:
        self._tree.clear()
        self._uniform.clear()

    def options(self) -> KeyDistributionOptions:
        return KeyDistributionOptions(prioritized=PrioritizedOptions(self._exponent),
                                      is_deterministic=False)

    def clone(self) -> Prioritized:
        return Prioritized(self._exponent)

    def num_items(self) -> int:
        return self._uniform.num_items()

    def __repr__(self) -> str:
        return f"PrioritizedSelector(priority_exponent={self._exponent:g})"


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

    def insert(self, slot: int, priority: float) -> None:
        prev = self._prev
        nxt = self._next
        if slot >= len(prev):
            grow = _MINUS_ONES * ((slot + 1 - len(prev)) // len(_MINUS_ONES) + 1)
            prev.extend(grow)
            nxt.extend(grow)
        tail = self._tail
        prev[slot] = tail
        nxt[slot] = -1
        if tail >= 0:
            nxt[tail] = slot
        else:
            self._head = slot
        self._tail = slot
        self._n += 1

    def bulk_insert(self, slots: np.ndarray, priorities: np.ndarray) -> None:
        slots = np.asarray(slots, dtype=np.int64).reshape(-1)
        k = len(slots)
        if not k:
            return
        prev, nxt = self._prev, self._next
        top = int(slots.max())
        if top >= len(prev):
            grow = _MINUS_ONES * ((top + 1 - len(prev)) // len(_MINUS_ONES) + 1)
            prev.extend(grow)
            nxt.extend(grow)
        tail = self._tail
        p = np.frombuffer(prev, dtype=np.int64)
        q = np.frombuffer(nxt, dtype=np.int64)
        p[slots[0]] = tail
        p[slots[1:]] = slots[:-1]
        q[slots[:-1]] = slots[1:]
        q[slots[-1]] = -1
        del p, q  # views pin the arrays' size
        if tail >= 0:
            nxt[tail] = int(slots[0])
        else:
            self._head = int(slots[0])
        self._tail = int(slots[-1])
        self._n += k

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

    def sample(self, rng: np.random.Generator) -> tuple[int, float]:
        return (self._tail if self._newest_first else self._head), 1.0

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


def MinHeap() -> HeapSelector:  # Reverb's public name
    """Selects the item with the lowest priority."""
    return HeapSelector(True)


def MaxHeap() -> HeapSelector:  # Reverb's public name
    """Selects the item with the highest priority."""
    return HeapSelector(False)


def check_priorities(prioritized: tuple[ItemSelector, ...], priorities: float | np.ndarray,
                     table: str) -> None:
    """Raises ``InvalidArgumentError`` for a priority (or array of them) that a table whose
    ``prioritized`` selectors are these cannot take: NaN anywhere; negative or too large for a
    Prioritized selector. The message names the table."""
    scalar = not isinstance(priorities, np.ndarray)
    if priorities != priorities if scalar else np.isnan(priorities).any():
        raise InvalidArgumentError(f"Priority must not be NaN (table {table!r}).")
    for sel in prioritized:
        try:
            if scalar:
                sel.validate_priority(priorities)  # type: ignore[arg-type]
            else:
                sel.validate_priorities(priorities)  # type: ignore[arg-type]
        except ValueError as e:
            raise InvalidArgumentError(
                f"{e} (table {table!r} uses a Prioritized selector)") from None


def selector_from_options(options: KeyDistributionOptions) -> ItemSelector:
    """Builds a selector from its :class:`KeyDistributionOptions` (as ``Table.replace`` needs)."""
    which = options.WhichOneof("distribution")
    if which == "fifo":
        return Fifo()
    if which == "lifo":
        return Lifo()
    if which == "uniform":
        return Uniform()
    if which == "prioritized":
        assert options.prioritized is not None
        return Prioritized(options.prioritized.priority_exponent)
    if which == "heap":
        assert options.heap is not None
        return HeapSelector(options.heap.min_heap)
    raise NotImplementedError(f"distribution={which}")


__all__ = [
    "Fifo",
    "HeapSelector",
    "ItemSelector",
    "Lifo",
    "MaxHeap",
    "MinHeap",
    "Prioritized",
    "Uniform",
    "selector_from_options",
]

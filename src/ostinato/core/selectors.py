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

The base class lives in :mod:`ostinato.core.selector_base` and the deterministic selectors in
:mod:`ostinato.core.ordered_selectors`; this module re-exports them all.
"""

from __future__ import annotations

import array
import math
from collections.abc import Sequence

import numpy as np

from ostinato.core.ordered_selectors import Fifo, HeapSelector, Lifo, MaxHeap, MinHeap
from ostinato.core.selector_base import (
    _UNREAD,
    _VECTORISE_FROM,
    MAX_WEIGHT,
    ItemSelector,
    _minus_ones,
    _run,
)
from ostinato.core.sum_tree import SumTree
from ostinato.core.table_info import KeyDistributionOptions, PrioritizedOptions
from ostinato.errors import InvalidArgumentError


class Uniform(ItemSelector):
    """Samples every item with equal probability."""

    def __init__(self) -> None:
        self._dense = array.array("q")  # live slots, packed
        self._pos = array.array("q")  # slot -> index into _dense (-1 if absent)

    def insert(self, slot: int, priority: float) -> None:
        pos = self._pos
        if slot >= len(pos):
            pos.extend(_minus_ones(pos, slot))
        pos[slot] = len(self._dense)
        self._dense.append(slot)

    def bulk_insert(self, slots: np.ndarray, priorities: np.ndarray) -> None:
        slots = np.asarray(slots, dtype=np.int64).reshape(-1)
        if not len(slots):
            return
        pos = self._pos
        top = int(slots.max())
        if top >= len(pos):
            pos.extend(_minus_ones(pos, top))
        start = len(self._dense)
        np.frombuffer(pos, dtype=np.int64)[slots] = np.arange(start, start + len(slots))
        self._dense.frombytes(slots.tobytes())

    def insert_many(self, slots: Sequence[int], priorities: Sequence[float]) -> None:
        if type(slots) is range and slots.step == 1:  # consecutive slots: two C-level copies
            pos = self._pos
            if slots[-1] >= len(pos):
                pos.extend(_minus_ones(pos, slots[-1]))
            start = len(self._dense)
            pos[slots.start : slots.stop] = _run(start, start + len(slots))
            self._dense.extend(_run(slots.start, slots.stop))
            return
        if len(slots) >= _VECTORISE_FROM:
            # The order alone places a slot here: the priorities are not read.
            self.bulk_insert(np.array(slots, dtype=np.int64), _UNREAD)
            return
        pos = self._pos
        top = max(slots)
        if top >= len(pos):
            pos.extend(_minus_ones(pos, top))
        for i, s in enumerate(slots, len(self._dense)):
            pos[s] = i
        self._dense.extend(slots)

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

    def insert_replacing(
        self, slots: Sequence[int], priorities: Sequence[float], victims: Sequence[int]
    ) -> None:
        # An insert then a delete puts the new slot where the victim was (the delete moves
        # the last slot, the one just inserted, into the victim's place); the victims are
        # items from before the batch, which nothing else in the batch moves.
        a = len(slots) - len(victims)
        if a:
            self.insert_many(slots[:a], priorities[:a])
        new = slots[a:]
        pos = self._pos
        top = max(new)
        if top >= len(pos):
            pos.extend(_minus_ones(pos, top))
        dense = self._dense
        if len(new) >= _VECTORISE_FROM:
            # The loop below, at once: each victim's place is read before any is written (no
            # victim is a slot this batch already took), the new slots are distinct.
            pv = np.frombuffer(pos, dtype=np.int64)
            gone = np.asarray(victims, dtype=np.int64)
            took = np.asarray(new, dtype=np.int64)
            places = pv[gone]
            np.frombuffer(dense, dtype=np.int64)[places] = took
            pv[gone] = -1
            pv[took] = places
            del pv  # a view pins the array's size
            return
        for s, v in zip(new, victims):
            i = pos[v]
            dense[i] = s
            pos[v] = -1
            pos[s] = i

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
            raise ValueError(
                f"priority_exponent ({priority_exponent!r}) must be a number"
            ) from None
        if not math.isfinite(e) or e < 0:
            raise ValueError(
                f"priority_exponent ({priority_exponent!r}) must be a finite number >= 0"
            )
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
                f"({self._exponent:g}) must be at most {MAX_WEIGHT:g}."
            )

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
                f"({self._exponent:g}) must be at most {MAX_WEIGHT:g}."
            )

    def _weight(self, priority: float) -> float:
        return 0.0 if priority == 0 else priority**self._exponent

    def _weights(self, priorities: np.ndarray) -> np.ndarray:
        w = np.power(priorities.astype(np.float64), self._exponent)
        w[priorities == 0] = 0.0
        return w

    def insert(self, slot: int, priority: float) -> None:
        self._tree.set(slot, self._weight(priority))
        self._uniform.insert(slot, priority)

    def insert_many(self, slots: Sequence[int], priorities: Sequence[float]) -> None:
        self._tree.set_many(
            np.array(slots, dtype=np.int64), self._weights(np.array(priorities, dtype=np.float64))
        )
        self._uniform.insert_many(slots, priorities)

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

    def insert_replacing(
        self, slots: Sequence[int], priorities: Sequence[float], victims: Sequence[int]
    ) -> None:
        # The tree's leaves end as the last set left them (the victims at 0 unless a later
        # insert reused the slot); ancestors are recomputed exactly, whatever the order.
        w = self._weights(np.array(priorities, dtype=np.float64))
        self._tree.set_many(
            np.array([*victims, *slots], dtype=np.int64),
            np.concatenate((np.zeros(len(victims)), w)),
        )
        self._uniform.insert_replacing(slots, priorities, victims)

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
        return KeyDistributionOptions(
            prioritized=PrioritizedOptions(self._exponent), is_deterministic=False
        )

    def clone(self) -> Prioritized:
        return Prioritized(self._exponent)

    def num_items(self) -> int:
        return self._uniform.num_items()

    def __repr__(self) -> str:
        return f"PrioritizedSelector(priority_exponent={self._exponent:g})"


def check_priorities(
    prioritized: tuple[ItemSelector, ...], priorities: float | np.ndarray, table: str
) -> None:
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
                f"{e} (table {table!r} uses a Prioritized selector)"
            ) from None


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

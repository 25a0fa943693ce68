"""The base class of item selectors and the array helpers they share.

Selectors see table *slots* (small dense integers the table assigns to items) and priorities;
they are not thread-safe, the owning table calls them under its lock.
"""

from __future__ import annotations

import array
from collections.abc import Sequence

import numpy as np

from ostinato.core.table_info import KeyDistributionOptions

_MINUS_ONES = array.array("q", [-1]) * 1024


def _minus_ones(arr: array.array, top: int) -> array.array:
    """The ``-1`` fill that makes an index array (grown in steps of 1024) hold ``top``."""
    return _MINUS_ONES * ((top + 1 - len(arr)) // len(_MINUS_ONES) + 1)


def consecutive(seq: Sequence[int]) -> range | None:
    """``seq`` (not empty) as a ``range`` when it is the consecutive slots ``seq[0]``,
    ``seq[0] + 1``, ... -- a batch's slots in a fresh table, a full Fifo table's victims
    between wrap-arounds -- else None. Compared in C (its ends, then one list comparison)."""
    first = seq[0]
    k = len(seq)
    if seq[-1] != first + k - 1:
        return None
    run = range(first, first + k)
    return run if (seq if type(seq) is list else list(seq)) == list(run) else None


def _run(start: int, stop: int) -> array.array:
    """``array("q", range(start, stop))``: from 8 elements on made by numpy (built from a
    ``range`` an array converts each element in turn, about 640 CPU instructions each; numpy
    costs about 6,500 in all)."""
    if stop - start < 8:
        return array.array("q", range(start, stop))
    return array.array("q", np.arange(start, stop, dtype=np.int64).tobytes())


#: Batches of at least this many slots are inserted with numpy (fewer: a Python loop is
#: cheaper than the arrays' set-up).
_VECTORISE_FROM = 24
#: The priorities handed to ``bulk_insert`` of a selector that does not read them.
_UNREAD = np.empty(0)

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

    def insert_many(self, slots: Sequence[int], priorities: Sequence[float]) -> None:
        """Inserts new (distinct, absent) slots in the given order, as :meth:`insert` in turn
        would, with work proportional to the batch (a table taking a small batch of items;
        unlike :meth:`bulk_insert`, which may rebuild the selector)."""
        for s, p in zip(slots, priorities):
            self.insert(s, p)

    def bulk_insert(self, slots: np.ndarray, priorities: np.ndarray) -> None:
        """Inserts new (distinct, absent) slots in the given order: the same state as calling
        :meth:`insert` for each in turn, built vectorised where the selector can (a table being
        restored from a checkpoint)."""
        for s, p in zip(np.asarray(slots).tolist(), np.asarray(priorities).tolist()):
            self.insert(s, p)

    def delete(self, slot: int) -> None:
        raise NotImplementedError

    def insert_replacing(
        self, slots: Sequence[int], priorities: Sequence[float], victims: Sequence[int]
    ) -> None:
        """A full table taking a batch: as :meth:`insert` of each of ``slots`` in turn, where
        each of the last ``len(victims)`` inserts is followed by :meth:`delete` of the next
        victim (present items, distinct, none of them among the slots still to come)."""
        a = len(slots) - len(victims)
        for i, (s, p) in enumerate(zip(slots, priorities)):
            self.insert(s, p)
            if i >= a:
                self.delete(victims[i - a])

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

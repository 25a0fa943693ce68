"""A sum tree over table slots, updated and searched for whole batches at once.

Leaves live at ``capacity + slot`` of one float64 array; node ``i`` holds the sum of its
children ``2i`` and ``2i + 1``. Parents are recomputed from their children (never adjusted by
differences), so sums do not drift. Batch operations walk the tree level by level with numpy,
so sampling or updating k slots costs O(k log n) in a handful of vectorised steps.
"""

from __future__ import annotations

import array

import numpy as np


class SumTree:
    """Non-negative weights per slot with prefix-sum search."""

    def __init__(self, capacity: int = 1024):
        cap = 1
        while cap < max(1, capacity):
            cap *= 2
        self._cap = cap
        self._depth = cap.bit_length() - 1
        self._arr = array.array("d", bytes(16 * cap))  # scalar access is fastest on array.array
        self._tree = np.frombuffer(self._arr, dtype=np.float64)
        self._shifts = np.arange(1, self._depth + 1, dtype=np.int64)[:, None]

    @property
    def capacity(self) -> int:
        return self._cap

    @property
    def total(self) -> float:
        return self._arr[1]

    def _grow(self, min_capacity: int) -> None:
        cap = self._cap
        while cap < min_capacity:
            cap *= 2
        leaves = self._tree[self._cap : 2 * self._cap].copy()
        self._cap = cap
        self._depth = cap.bit_length() - 1
        self._arr = array.array("d", bytes(16 * cap))
        self._tree = np.frombuffer(self._arr, dtype=np.float64)
        self._shifts = np.arange(1, self._depth + 1, dtype=np.int64)[:, None]
        self._tree[cap : cap + len(leaves)] = leaves
        self._rebuild()

    def _rebuild(self) -> None:
        t = self._tree
        n = self._cap
        while n > 1:
            half = n // 2
            t[half:n] = t[n : 2 * n : 2] + t[n + 1 : 2 * n : 2]
            n = half

    def get(self, slot: int) -> float:
        return self._arr[self._cap + slot]

    def get_many(self, slots: np.ndarray) -> np.ndarray:
        return self._tree[self._cap + slots]

    def set(self, slot: int, value: float) -> None:
        """Sets one leaf and recomputes its ancestors (O(log n), scalar fast path)."""
        if slot >= self._cap:
            self._grow(slot + 1)
        t = self._arr
        i = self._cap + slot
        t[i] = value
        i >>= 1
        # Recomputed from children: exact, so scalar updates never add drift.
        while i:
            j = i << 1
            t[i] = t[j] + t[j + 1]
            i >>= 1

    def set_many(self, slots: np.ndarray, values: np.ndarray) -> None:
        """Sets many leaves (the last value wins for a repeated slot) and recomputes ancestors.

        Ancestors are recomputed exactly from their children, level by level for the whole
        batch (a node listed twice is simply computed twice), so there is no rounding drift.
        """
        if len(slots) == 0:
            return
        slots = np.asarray(slots, dtype=np.int64)
        top = int(slots.max())
        if top >= self._cap:
            self._grow(top + 1)
        values = np.asarray(values, dtype=np.float64)
        t = self._tree
        leaf = slots + self._cap
        if len(leaf) > 1 and len(np.unique(leaf)) != len(leaf):
            rev = leaf[::-1]
            leaf, first = np.unique(rev, return_index=True)
            values = values[::-1][first]
        t[leaf] = values
        anc = leaf >> self._shifts  # (depth, m): parents, grandparents, ..., root
        left = anc << 1
        right = left + 1
        for lvl in range(self._depth):
            t[anc[lvl]] = t[left[lvl]] + t[right[lvl]]

    def set_leaves_and_rebuild(self, slots: np.ndarray, values: np.ndarray) -> None:
        """Sets many leaves (the last value wins for a repeated slot), then recomputes every
        internal node bottom-up: one vectorised pass per level, O(capacity) in all.

        The result is bit for bit the tree that :meth:`set` one leaf at a time gives: there, too,
        every node ends up as the sum of its two children's final values. Cheaper than
        :meth:`set_many` when a large share of the leaves changes (a table being rebuilt).
        """
        slots = np.asarray(slots, dtype=np.int64).reshape(-1)
        values = np.asarray(values, dtype=np.float64).reshape(-1)
        if len(slots):
            top = int(slots.max())
            if top >= self._cap:
                self._grow(top + 1)
            leaf = slots + self._cap
            if len(leaf) > 1 and np.bincount(slots).max() > 1:
                leaf, first = np.unique(leaf[::-1], return_index=True)
                values = values[::-1][first]
            self._tree[leaf] = values
        self._rebuild()

    def clear(self) -> None:
        self._tree[:] = 0.0

    def nbytes(self) -> int:
        return self._tree.nbytes

    def find(self, target: float) -> int:
        """The slot whose prefix-sum interval contains ``target`` (scalar descent)."""
        t = self._arr
        i = 1
        cap = self._cap
        while i < cap:
            left = 2 * i
            lv = t[left]
            if target < lv:
                i = left
            else:
                target -= lv
                i = left + 1
        return i - cap

    def find_many(self, targets: np.ndarray) -> np.ndarray:
        """Vectorised :meth:`find` for a batch of targets."""
        t = self._tree
        idx = np.ones(len(targets), dtype=np.int64)
        targets = targets.copy()
        for _ in range(self._depth):
            left = idx * 2
            lv = t[left]
            right = targets >= lv
            targets -= np.where(right, lv, 0.0)
            idx = left + right
        return idx - self._cap

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

    #: :meth:`find_many` reaches the nodes this many levels below the root in one step: a
    #: prefix sum over that level's (at most 1,024) nodes and a binary search, instead of one
    #: vectorised step per level (each several numpy calls); :meth:`set_many` recomputes
    #: these top levels whole, with one slice per level.
    jump_levels = 10

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
        if len(leaf) > 1 and _repeats(leaf):
            rev = leaf[::-1]
            leaf, first = np.unique(rev, return_index=True)
            values = values[::-1][first]
        t[leaf] = values
        top = min(self._depth, self.jump_levels)
        anc = leaf >> self._shifts[: self._depth - top]  # parents, ... up to level ``top``
        left = anc << 1
        right = left + 1
        for lvl in range(self._depth - top):
            t[anc[lvl]] = t[left[lvl]] + t[right[lvl]]
        n = 1 << top  # the levels above: every node, one slice per level
        while n > 1:
            half = n // 2
            t[half:n] = t[n : 2 * n : 2] + t[n + 1 : 2 * n : 2]
            n = half

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
        """Vectorised :meth:`find` for a batch of targets.

        The top :attr:`jump_levels` levels are crossed at once: node ``lo + i`` of level
        ``jump`` holds the targets in ``[prefix[i], prefix[i + 1])``, found by binary search
        in the level's prefix sums (the intervals the descent would find, as in :meth:`find`:
        a zero-weight node has an empty one); the rest is descended level by level.
        Rounding may put a target at an interval's edge into its neighbour, or at the end into
        the last node, as the descent's own subtractions may: callers redraw zero-weight hits.
        """
        t = self._tree
        order = None
        if len(targets) > 16:  # in order, the descent reads the tree's memory in order
            order = np.argsort(targets)
            targets = targets[order]
        jump = min(self._depth, self.jump_levels)
        if jump:
            lo = 1 << jump
            prefix = np.zeros(lo + 1)
            np.cumsum(t[lo : 2 * lo], out=prefix[1:])
            pos = np.searchsorted(prefix[1:], targets, side="right")
            np.minimum(pos, lo - 1, out=pos)
            targets = targets - prefix[pos]
            idx = pos + lo
        else:
            idx = np.ones(len(targets), dtype=np.int64)
            targets = targets.copy()
        for _ in range(self._depth - jump):
            left = idx * 2
            lv = t[left]
            right = targets >= lv
            targets -= np.where(right, lv, 0.0)
            idx = left + right
        idx -= self._cap
        if order is None:
            return idx
        out = np.empty_like(idx)
        out[order] = idx  # each target's slot in the caller's order
        return out


def _repeats(values: np.ndarray) -> bool:
    """Whether some value occurs twice (a sort: cheaper than ``np.unique`` for a batch)."""
    s = np.sort(values)
    return bool((s[1:] == s[:-1]).any())

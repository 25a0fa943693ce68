"""A wide sum/min tree held on a torch device, read and written a whole batch at a time.

Binary trees need ``log2(capacity)`` dependent steps per descent (19 for 500k slots); on a
GPU each step is a kernel launch and on a CPU an eager op, so depth is what costs. This tree
has fanout ``K <= 128`` and depth ``L = ceil(log_128(capacity))`` (``K = 80, L = 3`` for
500k), and every step serves the whole batch:

* Each level stores, per node, the *prefix sums* of its ``K`` children with a leading zero
  (rows of ``K + 1``), so a descent step is: gather each query's row, ``searchsorted`` its
  mass, subtract the prefix before the chosen child. A child whose value is zero has the
  same prefix as its left neighbour and can never be chosen while the mass is positive.
* An update writes leaves and recomputes each touched block's prefix row from its children
  (never by adding deltas, so rounding does not accumulate), level by level.
* Contiguous writes (inserts) only write leaves and mark the range dirty on the host; the
  parents are rebuilt for the whole range on the next read. A single-row insert therefore
  costs one small copy, and a burst of inserts one rebuild.

Empty and zero-priority leaves hold sum 0 and min ``+inf``: the min tree is the minimum over
positive leaves, which is what importance weights are normalised by.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from ostinato.device._checks import positive_int

MAX_FANOUT = 128


def tree_shape(capacity: int, max_fanout: int = MAX_FANOUT) -> tuple[int, int]:
    """Returns ``(fanout, depth)`` with ``fanout ** depth >= capacity`` and depth minimal."""
    capacity = positive_int("capacity", capacity)
    max_fanout = max(2, positive_int("max_fanout", max_fanout))
    depth = 1
    while max_fanout**depth < capacity:
        depth += 1
    fanout = max(2, math.ceil(capacity ** (1.0 / depth) - 1e-9))
    while fanout**depth < capacity:
        fanout += 1
    return fanout, depth


class SumMinTree:
    """Sum and min trees over ``capacity`` non-negative leaves.

    Args:
        capacity: Number of leaves.
        device: Where the trees live (already resolved).
        dtype: Floating dtype; float64 by default so that sums over millions of leaves keep
            small priorities distinguishable.
        max_fanout: Upper bound on the fanout (tuning knob; the default suits CPU and GPU).

    Example:
        >>> tree = SumMinTree(5, torch.device("cpu"))
        >>> tree.set(torch.tensor([0, 3]), torch.tensor([1.0, 3.0], dtype=torch.float64))
        >>> tree.total().item(), tree.find(torch.tensor([0.5, 3.5], dtype=torch.float64)).tolist()
        (4.0, [0, 3])
    """

    def __init__(
        self,
        capacity: int,
        device: torch.device,
        dtype: torch.dtype = torch.float64,
        max_fanout: int = MAX_FANOUT,
    ) -> None:
        self.capacity = positive_int("capacity", capacity)
        if not dtype.is_floating_point:
            raise TypeError(f"dtype ({dtype}) must be a floating dtype")
        self.device, self.dtype = device, dtype
        self.fanout, self.depth = k, depth = tree_shape(self.capacity, max_fanout)
        n_leaves = k**depth
        # One spare leaf past the end absorbs writes that must be dropped (stale indices,
        # superseded duplicates) without a data-dependent branch.
        self.trash = n_leaves
        self._leaves = torch.zeros(n_leaves + 1, dtype=dtype, device=device)
        self._min_leaves = torch.full((n_leaves + 1,), math.inf, dtype=dtype, device=device)
        self.leaf_values = self._leaves[:n_leaves]
        # prefix[h]: one row per node at height h + 1, holding [0, cumsum(children)].
        self.prefix = [
            torch.zeros((k ** (depth - 1 - h), k + 1), dtype=dtype, device=device)
            for h in range(depth)
        ]
        # children[h]: (nodes at height h + 1, k) view of the values of height h.
        self.children = [self.leaf_values.view(-1, k)]
        for h in range(1, depth):
            below = self.prefix[h - 1]
            self.children.append(
                below.as_strided(
                    (below.shape[0] // k, k), (k * (k + 1), k + 1), below.storage_offset() + k
                )
            )
        # mins[h]: values at height h (mins[0] are the leaves).
        self.mins = [self._min_leaves[:n_leaves]] + [
            torch.full((k ** (depth - h),), math.inf, dtype=dtype, device=device)
            for h in range(1, depth)
        ]
        self._last_pos = torch.zeros(n_leaves + 1, dtype=torch.long, device=device)
        self._tiny = torch.finfo(dtype).tiny
        self._dirty: list[tuple[int, int]] = []

    # ------------------------------------------------------------------ reads
    def total(self) -> torch.Tensor:
        """Sum of all leaves (a 0-d device tensor)."""
        self.flush()
        return self.prefix[-1][0, self.fanout]

    def min(self) -> torch.Tensor:
        """Minimum over positive leaves, ``+inf`` if there is none (a 0-d device tensor)."""
        self.flush()
        return self.mins[-1][: self.fanout].min()

    def leaves(self, index: torch.Tensor) -> torch.Tensor:
        """Values of the leaves at ``index``."""
        return self.leaf_values.index_select(0, index)

    def find(self, mass: torch.Tensor) -> torch.Tensor:
        """For each query mass ``m`` in ``(0, total]``, the first leaf whose inclusive prefix
        sum reaches ``m``. Zero leaves are never returned while the total is positive; with
        a zero total the result is an arbitrary in-range leaf.

        Args:
            mass: 1-D tensor of the tree's dtype.

        Returns:
            Long tensor of leaf indices.
        """
        self.flush()
        k = self.fanout
        top = self.prefix[-1][0]
        # The chosen child is the number of interior boundaries below the mass: always in
        # [0, k), so no clamping, and a boundary equal to the mass (the prefix up to a zero
        # child) is not counted. Capping the mass at the row total keeps rounding between
        # levels from pushing a query past the last positive child.
        mass = torch.minimum(mass.unsqueeze(1), top[k])
        node = (top[1:k] < mass).sum(1, keepdim=True)
        if self.depth == 1:
            return node.squeeze_(1)
        mass = mass - torch.take(top, node)
        for h in range(self.depth - 2, -1, -1):
            rows = self.prefix[h].index_select(0, node.squeeze(1))
            mass = torch.minimum(mass, rows[:, k:])
            i = (rows[:, 1:k] < mass).sum(1, keepdim=True)
            if h:
                mass = mass - rows.gather(1, i)
            node = i.add_(node, alpha=k)
        return node.squeeze_(1)

    # ------------------------------------------------------------------ writes
    def set(
        self, index: torch.Tensor, value: torch.Tensor, keep: torch.Tensor | None = None
    ) -> None:
        """Sets leaves ``index`` to ``value`` for a whole batch and recomputes their parents.

        Duplicated indices resolve to the last occurrence, deterministically on every
        device. Entries whose ``keep`` is false are dropped.

        Args:
            index: Long tensor of leaf indices in ``[0, capacity)``.
            value: Non-negative values, same length.
            keep: Optional bool mask, same length.
        """
        n = index.shape[0]
        if n == 0:
            return
        self.flush()
        pos = torch.arange(n, device=index.device)
        last = self._last_pos.scatter_reduce_(0, index, pos, "amax", include_self=False)
        winner = last.index_select(0, index) == pos
        if keep is not None:
            winner &= keep
        target = torch.where(winner, index, self.trash)
        value = value.to(self.dtype)
        self._leaves.index_put_((target,), value)
        self._min_leaves.index_put_((target,), torch.where(value > 0, value, math.inf))
        k = self.fanout
        node = index
        for h in range(self.depth):
            node = torch.div(node, k, rounding_mode="floor")
            sums = self.children[h].index_select(0, node).cumsum_(1)
            self.prefix[h][:, 1:].index_copy_(0, node, sums)
            if h + 1 < self.depth:
                mins = self.mins[h].view(-1, k).index_select(0, node).amin(1)
                self.mins[h + 1].index_copy_(0, node, mins)

    def set_range(self, start: int, value: torch.Tensor) -> None:
        """Sets the leaves ``[start, start + len(value))``; parents are rebuilt lazily.

        Args:
            start: First leaf (a host int).
            value: Non-negative values, 1-D (an expanded scalar is fine).
        """
        stop = start + value.shape[0]
        if stop == start:
            return
        self.leaf_values[start:stop].copy_(value)
        dirty = self._dirty
        if dirty and dirty[-1][1] == start:
            dirty[-1] = (dirty[-1][0], stop)
        else:
            dirty.append((start, stop))
            if len(dirty) > 4:
                self._dirty = [(min(a for a, _ in dirty), max(b for _, b in dirty))]

    def flush(self) -> None:
        """Rebuilds the parents of leaves written by :meth:`set_range` since the last read."""
        if not self._dirty:
            return
        k = self.fanout
        for start, stop in self._dirty:
            values = self.leaf_values[start:stop]
            self.mins[0][start:stop].copy_(torch.where(values > 0, values, math.inf))
            lo, hi = start, stop - 1
            for h in range(self.depth):
                lo, hi = lo // k, hi // k
                rows = self.children[h][lo : hi + 1]
                self.prefix[h][lo : hi + 1, 1:].copy_(rows.cumsum(1))
                if h + 1 < self.depth:
                    below = self.mins[h].view(-1, k)[lo : hi + 1]
                    torch.amin(below, 1, out=self.mins[h + 1][lo : hi + 1])
        self._dirty = []

    def clear(self) -> None:
        """Sets every leaf to zero."""
        self._dirty = []
        self._leaves.zero_()
        self._min_leaves.fill_(math.inf)
        for p in self.prefix:
            p.zero_()
        for m in self.mins[1:]:
            m.fill_(math.inf)

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict[str, Any]:
        """Returns the leaves; parents are rebuilt on load."""
        return {"capacity": self.capacity, "leaves": self.leaf_values[: self.capacity]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restores :meth:`state_dict` output and rebuilds the parents.

        Raises:
            ValueError: If the capacity differs.
        """
        if int(state["capacity"]) != self.capacity:
            raise ValueError(
                f"state capacity ({state['capacity']}) differs from capacity ({self.capacity})"
            )
        leaves = state["leaves"].to(device=self.device, dtype=self.dtype)
        self.clear()
        self.set_range(0, leaves)
        self.flush()

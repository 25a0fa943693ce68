"""A wide sum/min tree held on a torch device, read and written a whole batch at a time.

Binary trees need ``log2(capacity)`` dependent steps per descent (19 for 500k slots); on a
GPU each step is a kernel launch and on a CPU each is an eager op, so depth is what costs.
This tree has fanout ``K`` (at most 128) and depth ``L = ceil(log_128 capacity)`` (3 for
500k), and handles the whole batch in every step:

* descent: per level, gather the ``K`` children of each query's node, prefix-sum them and
  ``searchsorted`` the query mass: ~8 ops a level, none on the host;
* update: write the leaves, then recompute each touched parent as the sum (and min) of its
  children, level by level. Parents are recomputed, never adjusted by deltas, so rounding
  does not accumulate.

Empty and zero-priority leaves hold sum 0 and min ``+inf``: the min tree is the minimum over
positive leaves, which is what importance weights normalise by.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from ostinato.device._checks import positive_int

MAX_FANOUT = 128


def tree_shape(capacity: int, max_fanout: int = MAX_FANOUT) -> tuple[int, int]:
    """Returns ``(fanout, depth)`` with ``fanout ** depth >= capacity``, depth minimal."""
    capacity = positive_int("capacity", capacity)
    depth = max(1, math.ceil(math.log(capacity) / math.log(max_fanout) - 1e-12))
    fanout = max(2, math.ceil(capacity ** (1.0 / depth) - 1e-9))
    while fanout**depth < capacity:
        fanout += 1
    return fanout, depth


class SumMinTree:
    """Sum and min trees over ``capacity`` non-negative leaves.

    Args:
        capacity: Number of leaves.
        device: Where the trees live (already resolved).
        dtype: Floating dtype of the trees; float64 by default so that sums over millions
            of leaves keep small priorities distinguishable.

    Example:
        >>> tree = SumMinTree(5, torch.device("cpu"))
        >>> tree.set(torch.tensor([0, 3]), torch.tensor([1.0, 3.0], dtype=torch.float64))
        >>> tree.total().item(), tree.find(torch.tensor([0.5, 3.5], dtype=torch.float64)).tolist()
        (4.0, [0, 3])
    """

    def __init__(self, capacity: int, device: torch.device, dtype: torch.dtype = torch.float64):
        self.capacity = positive_int("capacity", capacity)
        if not dtype.is_floating_point:
            raise TypeError(f"dtype ({dtype}) must be a floating dtype")
        self.device, self.dtype = device, dtype
        self.fanout, self.depth = tree_shape(self.capacity)
        k, n_leaves = self.fanout, self.fanout**self.depth
        # One spare leaf past the end absorbs writes that must be dropped (stale indices,
        # superseded duplicates) without a data-dependent branch.
        self.trash = n_leaves
        self._sum_leaves = torch.zeros(n_leaves + 1, dtype=dtype, device=device)
        self._min_leaves = torch.full((n_leaves + 1,), math.inf, dtype=dtype, device=device)
        # sums[h] has k ** (depth - h) entries; sums[0] are the leaves, sums[-1] the root's
        # children. Same for mins.
        self.sums = [self._sum_leaves[:n_leaves]]
        self.mins = [self._min_leaves[:n_leaves]]
        for h in range(1, self.depth):
            size = k ** (self.depth - h)
            self.sums.append(torch.zeros(size, dtype=dtype, device=device))
            self.mins.append(torch.full((size,), math.inf, dtype=dtype, device=device))
        self._last_pos = torch.zeros(n_leaves + 1, dtype=torch.long, device=device)
        self._tiny = torch.finfo(dtype).tiny

    # ------------------------------------------------------------------ reads
    def total(self) -> torch.Tensor:
        """Sum of all leaves (a 0-d device tensor)."""
        return self.sums[-1].sum()

    def min(self) -> torch.Tensor:
        """Minimum over positive leaves, ``+inf`` if there is none (a 0-d device tensor)."""
        return self.mins[-1].min()

    def leaves(self, index: torch.Tensor) -> torch.Tensor:
        """Values of the leaves at ``index``."""
        return self.sums[0].index_select(0, index)

    def find(self, mass: torch.Tensor) -> torch.Tensor:
        """For each query mass ``m`` in ``(0, total]``, the first leaf whose prefix sum
        reaches ``m``; zero leaves are never returned while the total is positive.

        Args:
            mass: 1-D tensor of the tree's dtype.

        Returns:
            Long tensor of leaf indices.
        """
        k = self.fanout
        top = torch.cumsum(self.sums[-1], 0)
        # Keep every query strictly inside (0, subtotal] so it lands on a positive child
        # even when the cumsum and the stored parent differ in the last bit.
        mass = torch.minimum(mass, top[-1]).clamp_(min=self._tiny)
        node = torch.searchsorted(top, mass)
        if self.depth == 1:
            return node
        mass = mass - (top - self.sums[-1]).index_select(0, node)
        for h in range(self.depth - 2, -1, -1):
            children = self.sums[h].view(-1, k).index_select(0, node)
            csum = torch.cumsum(children, 1)
            mass = torch.minimum(mass, csum[:, -1]).clamp_(min=self._tiny).unsqueeze_(1)
            j = torch.searchsorted(csum, mass)
            if h:
                mass = (mass - (csum - children).gather(1, j)).squeeze_(1)
            node = j.squeeze_(1).add_(node, alpha=k)
        return node

    # ------------------------------------------------------------------ writes
    def set(self, index: torch.Tensor, value: torch.Tensor, keep: torch.Tensor | None = None):
        """Sets leaves ``index`` to ``value`` for a whole batch and recomputes their parents.

        Duplicated indices resolve to the last occurrence, deterministically on every
        device. Entries with ``keep`` false are dropped.

        Args:
            index: Long tensor of leaf indices in ``[0, capacity)``.
            value: Non-negative values, same length.
            keep: Optional bool mask, same length.
        """
        n = index.shape[0]
        if n == 0:
            return
        pos = torch.arange(n, device=index.device)
        last = self._last_pos.scatter_reduce_(0, index, pos, "amax", include_self=False)
        winner = last.index_select(0, index) == pos
        if keep is not None:
            winner &= keep
        target = torch.where(winner, index, self.trash)
        value = value.to(self.dtype)
        self._sum_leaves.index_put_((target,), value)
        self._min_leaves.index_put_((target,), torch.where(value > 0, value, math.inf))
        self._recompute(index)

    def set_range(self, start: int, value: torch.Tensor) -> None:
        """Sets the contiguous leaves ``[start, start + len(value))``; cheaper than :meth:`set`.

        Args:
            start: First leaf (host int).
            value: Non-negative values, 1-D (an expanded scalar is fine).
        """
        stop = start + value.shape[0]
        self.sums[0][start:stop].copy_(value)
        self.mins[0][start:stop].copy_(torch.where(value > 0, value, math.inf))
        k = self.fanout
        lo, hi = start, stop - 1
        for h in range(1, self.depth):
            lo, hi = lo // k, hi // k
            torch.sum(self.sums[h - 1].view(-1, k)[lo : hi + 1], 1, out=self.sums[h][lo : hi + 1])
            torch.amin(self.mins[h - 1].view(-1, k)[lo : hi + 1], 1, out=self.mins[h][lo : hi + 1])

    def _recompute(self, index: torch.Tensor) -> None:
        k = self.fanout
        node = index
        for h in range(1, self.depth):
            node = torch.div(node, k, rounding_mode="floor")
            rows = self.sums[h - 1].view(-1, k).index_select(0, node)
            self.sums[h].index_copy_(0, node, rows.sum(1))
            rows = self.mins[h - 1].view(-1, k).index_select(0, node)
            self.mins[h].index_copy_(0, node, rows.amin(1))

    def clear(self) -> None:
        """Sets every leaf to zero."""
        for s, m in zip(self.sums, self.mins):
            s.zero_()
            m.fill_(math.inf)
        self._sum_leaves[-1] = 0
        self._min_leaves[-1] = math.inf

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict[str, Any]:
        """Returns the leaves; parents are recomputed on load."""
        return {"capacity": self.capacity, "leaves": self.sums[0]}

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
        self.set_range(0, leaves[: self.sums[0].shape[0]])

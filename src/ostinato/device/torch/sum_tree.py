"""A shallow sum/min tree held on the buffer's device, read and written a batch at a time.

A binary tree needs ``log2(capacity)`` dependent steps per descent (19 for 500k slots), and
each step is a kernel launch on a GPU or an interpreted op on a CPU, so depth is what costs.
This tree is shallow and wide:

* leaves are grouped in blocks of ``fanout`` (64); the block totals form the next level,
  and so on, until a level has at most ``TOP_MAX`` (8192) values: the *top*. For 500k
  slots that is two levels (leaves, then 7813 block totals); up to 8192 slots, one.
* the top is searched through its full prefix sum (one cumsum, redone only after a write,
  and one ``searchsorted`` for the whole batch);
* a descent step gathers the ``fanout`` children of each query's node, takes their prefix
  sums and counts the boundaries below the query's mass; a child whose value is zero has
  the same boundary as its left neighbour, so it can never be chosen while the mass is
  positive (torch's CPU cumsum adds sequentially, which makes that exact; on accelerators
  the kernels enforce it);
* a batch update writes the leaves and recomputes each touched block's total from its
  children (never by adding deltas, so rounding does not accumulate), level by level;
* contiguous writes (inserts) only write leaves and record the range on the host; the
  blocks above are rebuilt for the whole range on the next read, so a single-row insert
  costs one small copy.

Block minima over the positive leaves (same shape as the sums, from the level above the
leaves up) give the minimum over set leaves; empty leaves hold 0.

The arithmetic is written once against :mod:`~ostinato.device.torch.kernels`: torch ops on
accelerators, numpy views of the same memory on the CPU.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from ostinato.device.torch.device import full as alloc
from ostinato.device.torch.kernels import kernels_for
from ostinato.validate import positive_int


class SumMinTree:
    """Sum and min trees over ``capacity`` non-negative leaves.

    Args:
        capacity: Number of leaves.
        device: Where the trees live (already resolved).
        dtype: Floating dtype; float64 by default so that sums over millions of leaves keep
            small priorities distinguishable.
        fanout: Children per block below the top.
        kernels: ``None`` (numpy on CPU, torch elsewhere), ``"numpy"``, ``"torch"``, or a
            kernels object from :func:`~ostinato.device.torch.kernels.kernels_for`.

    Example:
        >>> tree = SumMinTree(5, torch.device("cpu"), kernels="torch")
        >>> tree.set(torch.tensor([0, 3]), torch.tensor([1.0, 3.0], dtype=torch.float64))
        >>> float(tree.total()), tree.find(torch.tensor([0.5, 3.5], dtype=torch.float64)).tolist()
        (4.0, [0, 3])
    """

    #: Largest level searched through a full prefix sum.
    TOP_MAX = 8192

    def __init__(
        self,
        capacity: int,
        device: torch.device,
        dtype: torch.dtype = torch.float64,
        fanout: int = 64,
        kernels: Any = None,
    ) -> None:
        self.capacity = positive_int("capacity", capacity)
        self.fanout = k = positive_int("fanout", fanout)
        if k < 2:
            raise ValueError(f"fanout ({fanout}) must be at least 2")
        if not dtype.is_floating_point:
            raise TypeError(f"dtype ({dtype}) must be a floating dtype")
        self.device, self.dtype = device, dtype
        if kernels is None or isinstance(kernels, str):
            kernels = kernels_for(device, None, kernels)
        self.ops = ops = kernels
        sizes = [self.capacity]
        while sizes[-1] > self.TOP_MAX:
            sizes[-1] = -(-sizes[-1] // k) * k  # pad to whole blocks
            sizes.append(sizes[-1] // k)
        self.sizes = sizes
        self.depth = len(sizes) - 1  # levels below the top

        def full(shape: Any, value: float, dt: torch.dtype = dtype) -> Any:
            return ops.view(alloc(tuple(shape), value, dt, device))

        # Leaves get one spare slot past the end that absorbs dropped writes (stale
        # indices, superseded duplicates) without a data-dependent branch.
        self.trash = sizes[0]
        self._leaves = full((sizes[0] + 1,), 0.0)
        self.values = [self._leaves[: sizes[0]]] + [full((n,), 0.0) for n in sizes[1:]]
        # mins[h] (h >= 1): minimum over the positive leaves below each node at height h.
        self.mins = [None] + [full((n,), math.inf) for n in sizes[1:]]
        self._ctop = full((sizes[-1] + 1,), 0.0)  # [0, cumsum of the top]
        self._top_dirty = False
        self._scratch = full((sizes[0] + 1,), 0, torch.long) if ops.name == "torch" else None
        self._rows = full((0, k), 0.0)
        self._dirty: list[tuple[int, int]] = []

    # ------------------------------------------------------------------ reads
    def _top(self) -> Any:
        self.flush()
        if self._top_dirty:
            self.ops.cumsum(self.values[-1], out=self._ctop[1:])
            self._top_dirty = False
        return self._ctop

    def total(self) -> Any:
        """Sum of all leaves (a 0-d array of the tree's kernels)."""
        return self._top()[-1]

    def min(self) -> Any:
        """Minimum over positive leaves, ``+inf`` if none (a 0-d array of the kernels)."""
        self.flush()
        if self.depth:
            return self.mins[-1].min()
        leaves = self.values[0]
        return self.ops.where(leaves > 0, leaves, math.inf).min()

    def leaves(self, index: Any) -> Any:
        """Values of the leaves at ``index``."""
        return self.ops.take(self.values[0], index)

    def find(self, mass: Any) -> Any:
        """For each query mass ``m`` in ``(0, total]``, the first leaf whose inclusive prefix
        sum reaches ``m``. Zero leaves are never returned while the total is positive; with
        a zero total the result is an arbitrary in-range leaf.

        Args:
            mass: 1-D array (of the tree's kernels) of the tree's dtype.

        Returns:
            Long array of leaf indices.
        """
        ops, k = self.ops, self.fanout
        ctop = self._top()
        mass = ops.minimum(mass, ctop[-1])
        node = ops.searchsorted(ctop[1:], mass)
        if self.depth == 0:
            return node
        mass = mass - ops.take(ctop, node)
        rows = self._rows_for(mass.shape[0])
        for h in range(self.depth - 1, -1, -1):
            ops.cumsum_rows(ops.take(self.values[h].reshape(-1, k), node), out=rows)
            # Capping at the row total keeps rounding between levels from carrying a query
            # past the last positive child, and so the count of boundaries strictly below
            # the mass is a child in [0, k).
            mass = ops.minimum(mass, rows[:, k - 1])
            child = ops.searchsorted_rows(rows, mass)
            if h:
                before = ops.pick(rows, (child - 1).clip(0))
                mass = mass - ops.where(child > 0, before, 0)
            node = node * k + child
        return node

    # ------------------------------------------------------------------ writes
    def set(self, index: Any, value: Any, keep: Any = None) -> None:
        """Sets leaves ``index`` to ``value`` for a whole batch and recomputes their blocks.

        Of repeated indices the last (kept) one wins, on every device.

        Args:
            index: Long array of leaf indices in ``[0, capacity)``.
            value: Non-negative values of the tree's dtype, same length.
            keep: Optional bool array; entries where it is false are dropped.
        """
        if index.shape[0] == 0:
            return
        self.flush()
        self.ops.scatter_last(self._leaves, index, value, keep, self._scratch, self.trash)
        self._rebuild(index)

    def _rows_for(self, n: int) -> Any:
        if self._rows.shape[0] < n:
            self._rows = self.ops.view(alloc((n, self.fanout), 0, self.dtype, self.device))
        return self._rows[:n]

    def _rebuild(self, index: Any) -> None:
        ops, k = self.ops, self.fanout
        node = index
        for h in range(self.depth):
            node = node // k
            children = ops.take(self.values[h].reshape(-1, k), node)
            self.values[h + 1][node] = ops.sum_rows(children)
            if h == 0:
                self.mins[1][node] = ops.min_positive_rows(children)
            else:
                self.mins[h + 1][node] = ops.min_rows(ops.take(self.mins[h].reshape(-1, k), node))
        self._top_dirty = True

    def set_range(self, start: int, value: Any) -> None:
        """Sets leaves ``[start, start + len(value))``; the blocks above are rebuilt lazily.

        Args:
            start: First leaf (a host int).
            value: Non-negative values, 1-D.
        """
        stop = start + value.shape[0]
        if stop == start:
            return
        self.values[0][start:stop] = value
        dirty = self._dirty
        if dirty and dirty[-1][1] == start:
            dirty[-1] = (dirty[-1][0], stop)
        else:
            dirty.append((start, stop))
            if len(dirty) > 4:
                self._dirty = [(min(a for a, _ in dirty), max(b for _, b in dirty))]

    def flush(self) -> None:
        """Rebuilds the blocks above leaves written by :meth:`set_range` since the last read."""
        if not self._dirty:
            return
        ops, k = self.ops, self.fanout
        for start, stop in self._dirty:
            lo, hi = start, stop
            for h in range(self.depth):
                lo, hi = lo // k, (hi - 1) // k + 1
                children = self.values[h].reshape(-1, k)[lo:hi]
                self.values[h + 1][lo:hi] = ops.sum_rows(children)
                if h == 0:
                    self.mins[1][lo:hi] = ops.min_positive_rows(children)
                else:
                    self.mins[h + 1][lo:hi] = ops.min_rows(self.mins[h].reshape(-1, k)[lo:hi])
        self._dirty = []
        self._top_dirty = True

    def clear(self) -> None:
        """Sets every leaf to zero."""
        self._dirty = []
        for a in [self._leaves, *self.values[1:], self._ctop]:
            a[...] = 0
        for a in self.mins[1:]:
            a[...] = math.inf
        self._top_dirty = False

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict[str, Any]:
        """Returns the leaves (a tensor); everything above is rebuilt on load."""
        self.flush()
        return {
            "capacity": self.capacity,
            "leaves": self.ops.tensor(self.values[0][: self.capacity]),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restores :meth:`state_dict` output and rebuilds the blocks.

        Raises:
            ValueError: If the capacity differs.
        """
        if int(state["capacity"]) != self.capacity:
            raise ValueError(
                f"state capacity ({state['capacity']}) differs from capacity ({self.capacity})"
            )
        leaves = torch.as_tensor(state["leaves"]).to(device=self.device, dtype=self.dtype)
        self.clear()
        self.set_range(0, self.ops.view(leaves.clone()))
        self.flush()

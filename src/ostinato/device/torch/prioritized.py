"""Proportional prioritized sampler over a :class:`~ostinato.device.torch.sum_tree.SumMinTree`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from ostinato.device._checks import restore_random_state, state_alpha, unit_float
from ostinato.device.ring import RingCursor, Segment
from ostinato.device.torch.device import resolve_device
from ostinato.device.torch.fused import MAX_BLOCK, FusedPrioritizedSampler, triton_usable
from ostinato.device.torch.kernels import kernels_for
from ostinato.device.torch.sum_tree import SumMinTree


class PrioritizedSampler:
    """Stratified proportional sampling with importance weights, on the buffer's device.

    Each row's leaf holds ``priority ** alpha``; a zero priority is stored as a value just
    above the dtype's smallest normal number (``tiny / eps``), so such a row is drawn only
    when every row has priority zero (then uniformly, with weight 1). New rows get
    ``max_priority ** alpha``, where ``max_priority`` starts at 1 and is the largest priority
    ever given (MindSpore's rule).

    Sampling splits the total mass into ``count`` equal strata, draws one mass uniformly
    inside each and finds its leaf, so rows come back ordered by their position in the
    cumulative sum (as in MindSpore). Importance weights are ``(p_i / p_min) ** -beta``,
    with ``p_min`` the smallest stored leaf: ``(N * P(i)) ** -beta`` divided by the largest
    possible weight.

    Args:
        capacity: Number of slots of the storage it serves.
        alpha: Priority exponent in [0, 1].
        device: Device of the storage.
        seed: Seed for the sampler's generator; ``None`` seeds from the OS.
        tree_dtype: Floating dtype of the trees.
        validate: Check priorities (one host sync per call on an accelerator). When false,
            negative, NaN and infinite priorities are ignored on update and treated as 0 on
            insert, and no call synchronises.
        kernels: ``None`` (numpy on CPU, torch elsewhere), ``"numpy"`` or ``"torch"``; see
            :mod:`~ostinato.device.torch.kernels`.
    """

    def __init__(
        self,
        capacity: int,
        alpha: float,
        device: Any = None,
        seed: int | None = None,
        *,
        tree_dtype: torch.dtype = torch.float64,
        validate: bool = True,
        kernels: str | None = None,
    ) -> None:
        self.alpha = unit_float("alpha", alpha)
        self.device = resolve_device(device)
        self.ops = ops = kernels_for(self.device, seed, kernels)
        self.tree = SumMinTree(capacity, self.device, tree_dtype, kernels=ops)
        self.capacity = self.tree.capacity
        self.dtype = tree_dtype
        self.validate = bool(validate)
        info = torch.finfo(tree_dtype)
        # Zero priorities are stored as this; far enough above the smallest normal number
        # that masses derived from it (total / count) stay normal.
        self._floor = info.tiny / info.eps
        self._max_priority = ops.view(torch.ones((), dtype=tree_dtype, device=self.device))
        self._max_leaf = ops.view(torch.ones((), dtype=tree_dtype, device=self.device))
        self._max_leaf_stale = False
        self._strata: Any = None

    # ------------------------------------------------------------------ helpers
    def _priorities(self, priorities: Any, what: str) -> Any:
        p = self.ops.asarray(priorities).reshape(-1)
        if not self.ops.is_float(p):
            p = self.ops.asarray(p, self.dtype)
        if self.validate and p.shape[0]:
            lo, hi = self.ops.bounds(p)
            if not (lo >= 0 and hi < float("inf")):  # NaN fails the first test
                flat = self.ops.tensor(p).cpu()
                bad = int((~((flat >= 0) & torch.isfinite(flat))).nonzero()[0, 0])
                raise ValueError(
                    f"{what} must be finite and >= 0; got {float(flat[bad])} at position {bad}"
                )
        return p

    def _raise_max(self, priorities: Any) -> None:
        if priorities.shape[0]:
            self.ops.maximum_out(self._max_priority, priorities.max(), out=self._max_priority)
            self._max_leaf_stale = True  # recomputed by the next insert that needs it

    # ------------------------------------------------------------------ writes
    def new_leaves(self, priority: Any, rows: int) -> Any:
        """Validates the priorities of an insert and returns their leaves.

        Args:
            priority: ``None`` (new rows get the running maximum), a scalar, or one value
                per row.
            rows: Rows in the insert.

        Returns:
            ``None`` for the running maximum, else ``rows`` leaf values (and the running
            maximum is raised).

        Raises:
            ValueError: For a bad priority or a length that is neither 1 nor ``rows``.
        """
        if priority is None:
            return None
        ops = self.ops
        p = self._priorities(priority, "priority")
        if p.shape[0] not in (1, rows):
            raise ValueError(f"priority has {p.shape[0]} values for an insert of {rows} rows")
        if not self.validate:
            p = ops.where(ops.isfinite(p) & (p >= 0), p, 0)
        self._raise_max(p)
        leaf = ops.pow_floor(p, self.alpha, self._floor, self.dtype)
        return ops.expand(leaf[0], rows) if leaf.shape[0] == 1 else leaf

    def on_write(self, segments: Sequence[Segment], leaves: Any = None) -> None:
        """Gives the rows just written their leaves.

        Args:
            segments: What :meth:`TensorStorage.write` returned.
            leaves: :meth:`new_leaves` output (``None``: the running maximum).
        """
        tree = self.tree
        if leaves is None and self._max_leaf_stale:
            self.ops.pow_out(self._max_priority, self.alpha, out=self._max_leaf)
            self._max_leaf_stale = False
        for seg in segments:
            if leaves is None:
                tree.set_range(seg.slot, self.ops.expand(self._max_leaf, seg.length))
            else:
                tree.set_range(seg.slot, leaves[seg.src : seg.src + seg.length])

    def update(self, ring: RingCursor, indices: Any, priorities: Any) -> None:
        """Sets the priorities of sampled rows, skipping rows overwritten since.

        Args:
            ring: The storage's cursor (host ints only; nothing is synchronised).
            indices: Row ids as returned by :meth:`sample`.
            priorities: One non-negative finite priority per index.

        Raises:
            ValueError: On a length mismatch, or (when validating) a bad priority.
        """
        ops = self.ops
        ids = ops.asarray(indices, torch.long).reshape(-1)
        p = self._priorities(priorities, "priorities")
        if ids.shape[0] != p.shape[0]:
            raise ValueError(
                f"indices ({ids.shape[0]}) and priorities ({p.shape[0]}) differ in length"
            )
        if ids.shape[0] == 0:
            return
        total = ring.total
        live = (ids >= total - ring.size) & (ids < total)
        if not self.validate:
            live &= ops.isfinite(p) & (p >= 0)
        self._raise_max(ops.where(live, p, 0))
        leaf = ops.pow_floor(p, self.alpha, self._floor, self.dtype)
        self.tree.set(ids % self.capacity, leaf, keep=live)

    # ------------------------------------------------------------------ reads
    def sample(
        self, ring: RingCursor, count: int, beta: float
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Draws ``count`` rows in proportion to their leaves.

        Returns:
            ``(ids, weights, slots)`` as tensors: int64 row ids (for :meth:`update`),
            float32 importance weights, and the physical slots to gather.

        Raises:
            IndexError: If the ring is empty.
        """
        if ring.size == 0:
            raise IndexError("cannot sample from an empty buffer")
        ops, tree = self.ops, self.tree
        strata = self._strata
        if strata is None or strata.shape[0] != count:
            strata = self._strata = ops.arange(count, self.dtype) + 1
        # One uniform draw per stratum: (i + 1 - u) lies in (i, i + 1], so every mass is in
        # (0, total] and lands on a positive leaf.
        mass = (strata - ops.rand(count, self.dtype)) * (tree.total() / count)
        slots = tree.find(mass)
        weights = ops.float32((tree.min() / tree.leaves(slots)) ** beta)
        newest = ring.total - 1
        ids = newest - (newest - slots) % self.capacity
        return ops.tensor(ids), ops.tensor(weights), ops.tensor(slots)

    def reset(self) -> None:
        """Clears every leaf and the running maximum."""
        self.tree.clear()
        self._max_priority[...] = 1.0
        self._max_leaf[...] = 1.0
        self._max_leaf_stale = False

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict[str, Any]:
        """Returns the tree leaves, running maximum and generator state."""
        return {
            "alpha": self.alpha,
            "tree": self.tree.state_dict(),
            "max_priority": float(self._max_priority),
            "generator": self.ops.get_state(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restores :meth:`state_dict` output.

        Raises:
            ValueError: If alpha or the capacity differ.
        """
        state_alpha(state, self.alpha)
        self.tree.load_state_dict(state["tree"])
        self._max_priority[...] = float(state["max_priority"])
        self._max_leaf_stale = True
        restore_random_state(self.ops.set_state, state)


def make_prioritized_sampler(
    capacity: int,
    alpha: float,
    device: Any = None,
    seed: int | None = None,
    *,
    tree_dtype: torch.dtype = torch.float64,
    validate: bool = True,
    kernels: str | None = None,
) -> PrioritizedSampler | FusedPrioritizedSampler:
    """The prioritized sampler for ``device``: the fused Triton one on CUDA when Triton is
    installed and the capacity fits (or ``kernels="triton"``), else the sum tree.

    Args:
        kernels: ``None`` (choose), ``"numpy"``, ``"torch"`` or ``"triton"``.

    Raises:
        ValueError: For an unknown ``kernels``, or ``"triton"`` where it cannot run.
    """
    dev = resolve_device(device)
    if kernels is None and dev.type == "cuda" and capacity <= MAX_BLOCK * MAX_BLOCK:
        if triton_usable(dev) is None:
            kernels = "triton"
    if kernels == "triton":
        return FusedPrioritizedSampler(
            capacity, alpha, dev, seed, tree_dtype=tree_dtype, validate=validate
        )
    if kernels not in (None, "numpy", "torch"):
        raise ValueError(f"kernels ({kernels!r}) must be 'numpy', 'torch' or 'triton'")
    return PrioritizedSampler(
        capacity, alpha, dev, seed, tree_dtype=tree_dtype, validate=validate, kernels=kernels
    )

"""The prioritized sampler of the GPU: flat leaves and four fused Triton kernels.

On a GPU a tree walked level by level costs a kernel launch per level and per operation,
which is more than reading every priority once: an H100/H200 reads the 8 MB of float64
leaves of a million rows in about 3 us. So this sampler keeps no tree. A draw is

1. :func:`~ostinato.device.torch.triton_kernels.block_stats`: the sum and minimum of every
   block of ``B`` leaves (``B`` about ``sqrt(capacity)``, a power of two);
2. :func:`~ostinato.device.torch.triton_kernels.query`: one program per draw scans the block
   sums, then the leaves of its block, and writes the slot, the row id and the weight;

plus one ``torch.rand`` for the uniforms (the sampler's own generator, so a step is CUDA
graph safe and :meth:`state_dict` holds the random state) and the storage's gathers. An
update is one launch and an insert one launch besides the storage's copies. Nothing
synchronises with the host (with ``validate=False``), and nothing reads a host-side count
at run time: the insertion counter lives on the device and is advanced by the insert
kernel, so a whole ``sample`` + ``update`` step can be captured in a CUDA graph and
replayed while inserts go on outside it.

Same distribution, weights and update rules as :class:`~ostinato.device.torch.PrioritizedSampler`
over its sum tree (the statistical tests run on both), except that ``priority ** alpha`` is
evaluated in float32 precision (relative error about 1e-6; exact for ``alpha`` 0 and 1)
before it is stored in the tree dtype.
"""

from __future__ import annotations

import math
import numbers
import os
from collections.abc import Sequence
from typing import Any

import torch

from ostinato.device._checks import restore_random_state, state_alpha, unit_float
from ostinato.device.ring import RingCursor, Segment
from ostinato.device.torch.device import make_generator, resolve_device

#: Largest leaf block a program scans; capacities past ``MAX_BLOCK ** 2`` use the tree.
MAX_BLOCK = 16384
_UPDATE_BLOCK = 128
_WRITE_BLOCK = 1024


def triton_usable(device: torch.device) -> str | None:
    """Why the fused kernels cannot run on ``device`` (``None`` when they can)."""
    if device.type != "cuda" and os.environ.get("TRITON_INTERPRET") != "1":
        return f"kernels='triton' needs a CUDA device (or TRITON_INTERPRET=1), got {device}"
    try:
        import triton  # noqa: F401
    except ImportError:
        return "kernels='triton' needs the triton package (pip install triton)"
    return None


def block_size(capacity: int) -> int:
    """Leaves per block: the power of two at or above ``sqrt(capacity)``, at least 256."""
    return max(256, 1 << math.isqrt(max(capacity, 1) - 1).bit_length())


class FusedPrioritizedSampler:
    """Stratified proportional sampling with importance weights in fused Triton kernels.

    The interface is :class:`~ostinato.device.torch.PrioritizedSampler`'s, so either serves
    a :class:`~ostinato.device.torch.TensorStorage`; states are interchangeable.

    Args:
        capacity: Number of slots of the storage it serves (at most ``MAX_BLOCK ** 2``).
        alpha: Priority exponent in [0, 1].
        device: Device of the storage (CUDA; the CPU only under ``TRITON_INTERPRET=1``).
        seed: Seed for the sampler's generator; ``None`` seeds from the OS.
        tree_dtype: Floating dtype of the leaves (float64 or float32).
        validate: Check priorities (one host sync per call). When false, negative, NaN and
            infinite priorities are ignored on update and treated as 0 on insert, and no
            call synchronises.

    Raises:
        ValueError: Without Triton or a usable device, or for a capacity past the limit.
    """

    kernels = "triton"

    def __init__(
        self,
        capacity: int,
        alpha: float,
        device: Any = None,
        seed: int | None = None,
        *,
        tree_dtype: torch.dtype = torch.float64,
        validate: bool = True,
    ) -> None:
        self.alpha = unit_float("alpha", alpha)
        self.device = dev = resolve_device(device)
        why = triton_usable(dev)
        if why:
            raise ValueError(why)
        if tree_dtype not in (torch.float32, torch.float64):
            raise TypeError(f"tree_dtype ({tree_dtype}) must be torch.float32 or torch.float64")
        if capacity > MAX_BLOCK * MAX_BLOCK:
            raise ValueError(
                f"capacity ({capacity}) exceeds the fused kernels' limit ({MAX_BLOCK**2})"
            )
        from ostinato.device.torch import triton_kernels as tk

        self._k = tk
        self.capacity = int(capacity)
        self.dtype = tree_dtype
        self.validate = bool(validate)
        self.block = b = block_size(self.capacity)
        self.nblocks = nb = -(-self.capacity // b)
        self._nb_p2 = 1 << max(0, nb - 1).bit_length()
        # Draws per program: one on a GPU (parallel); many in the interpreter (per program).
        self._qb = 1 if dev.type == "cuda" else 64
        info = torch.finfo(tree_dtype)
        self._floor = info.tiny / info.eps
        self.leaves = torch.zeros(nb * b, dtype=tree_dtype, device=dev)
        self._bsum = torch.zeros(nb, dtype=tree_dtype, device=dev)
        self._bmin = torch.zeros(nb, dtype=tree_dtype, device=dev)
        self._bits = torch.int64 if tree_dtype == torch.float64 else torch.int32
        self._max = torch.ones(1, dtype=tree_dtype, device=dev)  # running maximum priority
        self._max_bits = self._max.view(self._bits)
        # [insertions ever, insertions at the last reset]: the ring's total and its oldest
        # id, kept on the device; ``_host`` is what the device holds, as far as we know.
        self._counters = torch.zeros(2, dtype=torch.int64, device=dev)
        self._host = (0, 0)
        self.generator = make_generator(dev, seed)
        self._empty = torch.zeros(1, dtype=tree_dtype, device=dev)

    # ------------------------------------------------------------------ helpers
    @property
    def max_priority(self) -> torch.Tensor:
        """The running maximum priority (a 0-d tensor on the device)."""
        return self._max[0]

    def _sync_counters(self, ring: RingCursor) -> None:
        # Normally the device counters follow the inserts on their own; a ring restored or
        # used elsewhere is copied in (two fills, no synchronisation).
        want = (ring.total, ring.total - ring.size)
        if want != self._host:
            self._counters[0].fill_(want[0])
            self._counters[1].fill_(want[1])
            self._host = want

    def _tensor(self, values: Any, dtype: torch.dtype | None = None) -> torch.Tensor:
        if isinstance(values, torch.Tensor) and values.device == self.device:
            t = values
        elif isinstance(values, torch.Tensor):
            t = values.to(self.device, non_blocking=values.is_pinned())
        elif isinstance(values, numbers.Real) and not isinstance(values, bool):
            # A host number: a fill kernel with the value as its argument (no copy, no sync).
            fdt = dtype or (self.dtype if isinstance(values, float) else torch.int64)
            t = torch.full((1,), values, dtype=fdt, device=self.device)
        else:
            t = torch.as_tensor(values).to(self.device)
        if dtype is not None and t.dtype != dtype:
            t = t.to(dtype)
        return t.reshape(-1)

    def _priorities(self, values: Any, what: str) -> torch.Tensor:
        """``values`` as a 1-D float tensor on the device, checked when validating (a host
        number on the host; a tensor with one synchronisation, its copy to the host)."""
        host = isinstance(values, numbers.Real) and not isinstance(values, bool)
        p = self._tensor(float(values) if host else values)
        if not p.dtype.is_floating_point:
            p = p.to(self.dtype)
        if self.validate and p.shape[0]:
            flat = torch.tensor([float(values)]) if host else p.detach().to("cpu", torch.float64)
            bad = ~((flat >= 0) & torch.isfinite(flat))
            if bool(bad.any()):
                i = int(bad.nonzero()[0, 0])
                raise ValueError(
                    f"{what} must be finite and >= 0; got {float(flat[i])} at position {i}"
                )
        return p

    # ------------------------------------------------------------------ writes
    def new_leaves(self, priority: Any, rows: int) -> Any:
        """Validates the priorities of an insert; returns what :meth:`on_write` takes.

        Args:
            priority: ``None`` (the running maximum), a scalar, or one value per row.
            rows: Rows in the insert.

        Raises:
            ValueError: For a bad priority or a length that is neither 1 nor ``rows``.
        """
        if priority is None:
            return None
        p = self._priorities(priority, "priority")
        if p.shape[0] not in (1, rows):
            raise ValueError(f"priority has {p.shape[0]} values for an insert of {rows} rows")
        return p

    def on_write(self, segments: Sequence[Segment], leaves: Any = None) -> None:
        """Gives the rows just written their leaves (one launch) and counts them.

        Args:
            segments: What :meth:`TensorStorage.write` returned.
            leaves: :meth:`new_leaves` output.
        """
        if not segments:
            return
        inc = segments[-1].src + segments[-1].length
        s0 = segments[0]
        s1 = segments[1] if len(segments) > 1 else Segment(0, 0, 0)
        # One priority per row, or one for every row (read with stride 0), or the maximum.
        prio = self._empty if leaves is None else leaves
        self._k.write_leaves[(1,)](
            self.leaves,
            prio,
            self._max_bits,
            self._counters,
            s0.slot,
            s0.src,
            s0.length,
            s1.slot,
            s1.src,
            s1.length,
            int(prio.shape[0] > 1),
            inc,
            self.alpha,
            FLOOR=self._floor,
            MODE=0 if leaves is None else 1,
            BLOCK=_WRITE_BLOCK,
        )
        self._host = (self._host[0] + inc, self._host[1])

    def update(self, ring: RingCursor, indices: Any, priorities: Any) -> None:
        """Sets the priorities of sampled rows, skipping rows overwritten since (one launch).

        Raises:
            ValueError: On a length mismatch, or (when validating) a bad priority.
        """
        ids = self._tensor(indices, torch.int64)
        p = self._priorities(priorities, "priorities")
        if ids.shape[0] != p.shape[0]:
            raise ValueError(
                f"indices ({ids.shape[0]}) and priorities ({p.shape[0]}) differ in length"
            )
        n = ids.shape[0]
        if n == 0:
            return
        self._sync_counters(ring)
        self._k.update_leaves[(-(-n // _UPDATE_BLOCK),)](
            self.leaves,
            ids,
            p,
            self._max_bits,
            self._counters,
            n,
            self.capacity,
            self.alpha,
            FLOOR=self._floor,
            BLOCK=_UPDATE_BLOCK,
        )

    # ------------------------------------------------------------------ reads
    def sample(
        self, ring: RingCursor, count: int, beta: float
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Draws ``count`` rows in proportion to their leaves.

        Returns:
            ``(ids, weights, slots)``: int64 row ids, float32 weights, int64 slots.

        Raises:
            IndexError: If the ring is empty.
        """
        if ring.size == 0:
            raise IndexError("cannot sample from an empty buffer")
        self._sync_counters(ring)
        dev = self.device
        u = torch.rand(count, generator=self.generator, dtype=self.dtype, device=dev)
        slots = torch.empty(count, dtype=torch.int64, device=dev)
        ids = torch.empty(count, dtype=torch.int64, device=dev)
        weights = torch.empty(count, dtype=torch.float32, device=dev)
        self._k.block_stats[(self.nblocks,)](self.leaves, self._bsum, self._bmin, B=self.block)
        qb = self._qb
        self._k.query[(-(-count // qb),)](
            self.leaves,
            self._bsum,
            self._bmin,
            u,
            slots,
            ids,
            weights,
            self._counters,
            count,
            self.nblocks,
            self.capacity,
            float(beta),
            NB=self._nb_p2,
            B=self.block,
            QB=qb,
            num_warps=4 if self.block <= 1024 else 8,
        )
        return ids, weights, slots

    def reset(self) -> None:
        """Clears every leaf and the running maximum; the insertion count stays."""
        self.leaves.zero_()
        self._max.fill_(1.0)
        self._counters[1].copy_(self._counters[0])
        self._host = (self._host[0], self._host[0])

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict[str, Any]:
        """Returns the leaves, running maximum and generator state (the tree sampler's
        layout, so the two load each other's states)."""
        return {
            "alpha": self.alpha,
            "tree": {"capacity": self.capacity, "leaves": self.leaves[: self.capacity].clone()},
            "max_priority": float(self._max[0]),
            "generator": self.generator.get_state(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restores :meth:`state_dict` output (of either sampler).

        Raises:
            ValueError: If alpha or the capacity differ.
        """
        state_alpha(state, self.alpha)
        tree = state["tree"]
        if int(tree["capacity"]) != self.capacity:
            raise ValueError(
                f"state capacity ({tree['capacity']}) differs from capacity ({self.capacity})"
            )
        leaves = torch.as_tensor(tree["leaves"]).to(device=self.device, dtype=self.dtype)
        self.leaves.zero_()
        self.leaves[: self.capacity].copy_(leaves)
        self._max.fill_(float(state["max_priority"]))
        restore_random_state(self.generator.set_state, state)
        self._host = (-1, -1)  # the next call copies the ring's counters in

"""The handful of array primitives the sum tree and samplers are written in, two ways.

The tree and the prioritized sampler do many small index computations (a few hundred
elements each). On a GPU those must be torch ops on the device. On a CPU, torch's per-op
dispatch (2-5 us) and its intra-op thread pool (which can stall for milliseconds when the
machine is busy) dominate such tiny ops, while numpy runs them single-threaded in about
1 us. So the same algorithm runs on :class:`TorchKernels` for accelerators and on
:class:`NumpyKernels` -- numpy views sharing the memory of the CPU tensors -- for the CPU.
Both are exercised by the CPU test-suite.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from ostinato.device.torch.device import make_generator


class TorchKernels:
    """Primitives as torch ops on ``device`` (the accelerator path).

    Args:
        device: Where arrays live.
        seed: Generator seed, ``None`` for the OS.
    """

    name = "torch"

    def __init__(self, device: torch.device, seed: int | None) -> None:
        self.device = device
        self.generator = make_generator(device, seed)

    # arrays <-> tensors
    def view(self, tensor: torch.Tensor) -> torch.Tensor:
        return tensor

    def tensor(self, array: torch.Tensor) -> torch.Tensor:
        return array

    def asarray(self, value: Any, dtype: torch.dtype | None = None) -> torch.Tensor:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            # A host number becomes a fill kernel's argument: as_tensor would copy it from
            # pageable memory and wait for the copy.
            if dtype is None:
                dtype = torch.get_default_dtype() if isinstance(value, float) else torch.long
            return torch.full((), value, dtype=dtype, device=self.device)
        return torch.as_tensor(value, dtype=dtype, device=self.device)

    def arange(self, n: int, dtype: torch.dtype = torch.long) -> torch.Tensor:
        return torch.arange(n, dtype=dtype, device=self.device)

    # random numbers
    def rand(self, n: int, dtype: torch.dtype) -> torch.Tensor:
        return torch.rand(n, generator=self.generator, dtype=dtype, device=self.device)

    def get_state(self) -> Any:
        return self.generator.get_state()

    def set_state(self, state: Any) -> None:
        self.generator.set_state(state)

    # element-wise and reductions
    minimum = staticmethod(torch.minimum)
    maximum = staticmethod(torch.maximum)
    where = staticmethod(torch.where)

    @staticmethod
    def is_float(a: torch.Tensor) -> bool:
        return a.dtype.is_floating_point

    @staticmethod
    def expand(a: torch.Tensor, n: int) -> torch.Tensor:
        return a.expand(n)

    @staticmethod
    def pow_floor(p: torch.Tensor, alpha: float, floor: float, dtype: torch.dtype) -> torch.Tensor:
        """``max(p ** alpha, floor)`` in ``dtype``."""
        return p.to(dtype).pow(alpha).clamp_(min=floor)

    @staticmethod
    def pow_out(a: torch.Tensor, exponent: float, out: torch.Tensor) -> None:
        torch.pow(a, exponent, out=out)

    @staticmethod
    def maximum_out(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor) -> None:
        torch.maximum(a, b.to(out.dtype), out=out)

    @staticmethod
    def float32(a: torch.Tensor) -> torch.Tensor:
        return a.float()

    @staticmethod
    def bounds(a: torch.Tensor) -> tuple[float, float]:
        """``(min, max)`` as host floats, in one synchronisation; NaN propagates."""
        lo, hi = torch.stack(torch.aminmax(a.to(torch.float64))).tolist()
        return lo, hi

    @staticmethod
    def isfinite(a: torch.Tensor) -> torch.Tensor:
        return torch.isfinite(a)

    @staticmethod
    def searchsorted(sorted_1d: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
        return torch.searchsorted(sorted_1d, values)

    @staticmethod
    def searchsorted_rows(rows: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
        """For each row (sorted ascending, with ``values[i] <= rows[i, -1]``), how many of
        its entries are ``< values[i]``."""
        return torch.searchsorted(rows, values.unsqueeze(1)).squeeze(1)

    @staticmethod
    def _exact_steps(values: torch.Tensor, sums: torch.Tensor, dim: int) -> torch.Tensor:
        # On accelerators cumsum is a parallel scan: rounding may make the boundary after
        # a zero value differ from the one before it, and a zero child selectable. The
        # running max over the boundaries of positive values is exact, non-decreasing,
        # and repeats the previous boundary at every zero.
        sums = torch.where(values > 0, sums, -torch.inf)
        return torch.cummax(sums, dim).values.clamp_(min=0)

    def cumsum(self, a: torch.Tensor, out: torch.Tensor) -> None:
        out.copy_(self._exact_steps(a, torch.cumsum(a, 0), 0))

    def cumsum_rows(self, rows: torch.Tensor, out: torch.Tensor) -> None:
        out.copy_(self._exact_steps(rows, torch.cumsum(rows, 1), 1))

    @staticmethod
    def min_rows(rows: torch.Tensor) -> torch.Tensor:
        return rows.amin(1)

    @staticmethod
    def sum_rows(rows: torch.Tensor) -> torch.Tensor:
        return rows.sum(1)

    @staticmethod
    def min_positive_rows(rows: torch.Tensor) -> torch.Tensor:
        """Row minima over the positive entries (``inf`` for a row without any)."""
        return torch.where(rows > 0, rows, torch.inf).amin(1)

    # gathers and scatters
    @staticmethod
    def take(a: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
        return a.index_select(0, index)

    @staticmethod
    def pick(rows: torch.Tensor, cols: torch.Tensor) -> torch.Tensor:
        """``rows[i, cols[i]]`` for every row ``i``."""
        return rows.gather(1, cols.unsqueeze(1)).squeeze(1)

    def scatter_last(
        self,
        target: torch.Tensor,
        index: torch.Tensor,
        value: torch.Tensor,
        keep: torch.Tensor | None,
        scratch: torch.Tensor,
        trash: int,
    ) -> None:
        """``target[index] = value``, skipping entries whose ``keep`` is false; of repeated
        kept indices the last wins, deterministically on every device (``index_put_``
        alone leaves that unspecified). ``scratch`` is a long tensor longer than any index,
        ``trash`` a slot of ``target`` that absorbs dropped writes."""
        pos = torch.arange(index.shape[0], device=index.device)
        ranked = pos if keep is None else torch.where(keep, pos, -1)
        scratch.scatter_reduce_(0, index, ranked, "amax", include_self=False)
        winner = scratch.index_select(0, index) == pos
        target.index_put_((torch.where(winner, index, trash),), value)


class NumpyKernels:
    """Primitives as numpy calls on views of CPU tensors (the CPU path).

    Args:
        seed: Generator seed, ``None`` for the OS.
    """

    name = "numpy"

    def __init__(self, device: torch.device, seed: int | None) -> None:
        if device.type != "cpu":
            raise ValueError(f"NumpyKernels need a cpu device, got {device}")
        self.device = device
        self.generator = np.random.Generator(np.random.PCG64(seed))

    def view(self, tensor: torch.Tensor) -> np.ndarray:
        return tensor.numpy()

    def tensor(self, array: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(np.ascontiguousarray(array))

    def asarray(self, value: Any, dtype: torch.dtype | None = None) -> np.ndarray:
        if isinstance(value, torch.Tensor):
            if value.is_cpu and (dtype is None or value.dtype == dtype) and not value.requires_grad:
                return value.numpy()
            value = value.detach().cpu()
            if dtype is not None:
                value = value.to(dtype)
            return value.numpy()
        np_dtype = None if dtype is None else torch.empty(0, dtype=dtype).numpy().dtype
        return np.asarray(value, dtype=np_dtype)

    def arange(self, n: int, dtype: torch.dtype = torch.long) -> np.ndarray:
        return np.arange(n, dtype=torch.empty(0, dtype=dtype).numpy().dtype)

    def rand(self, n: int, dtype: torch.dtype) -> np.ndarray:
        return self.generator.random(n, dtype=np.float64 if dtype == torch.float64 else np.float32)

    def get_state(self) -> Any:
        return self.generator.bit_generator.state

    def set_state(self, state: Any) -> None:
        self.generator.bit_generator.state = state

    @staticmethod
    def is_float(a: np.ndarray) -> bool:
        return a.dtype.kind == "f"

    @staticmethod
    def expand(a: np.ndarray, n: int) -> np.ndarray:
        return np.broadcast_to(a, (n,))

    @staticmethod
    def pow_floor(p: np.ndarray, alpha: float, floor: float, dtype: torch.dtype) -> np.ndarray:
        """``max(p ** alpha, floor)`` in ``dtype``."""
        out = np.power(p, alpha, dtype=np.float64 if dtype == torch.float64 else np.float32)
        return np.maximum(out, floor, out=out)

    @staticmethod
    def pow_out(a: np.ndarray, exponent: float, out: np.ndarray) -> None:
        np.power(a, exponent, out=out)

    @staticmethod
    def maximum_out(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> None:
        value = float(b)  # scalars: plain Python is cheaper than a numpy ufunc call
        if not value <= float(a):  # also lets NaN through, like np.maximum
            out[()] = value
        elif out is not a:
            out[()] = a

    @staticmethod
    def float32(a: np.ndarray) -> np.ndarray:
        return a.astype(np.float32)

    @staticmethod
    def bounds(a: np.ndarray) -> tuple[float, float]:
        """``(min, max)`` as host floats; NaN propagates."""
        return float(a.min()), float(a.max())

    minimum = staticmethod(np.minimum)
    maximum = staticmethod(np.maximum)
    where = staticmethod(np.where)
    isfinite = staticmethod(np.isfinite)

    @staticmethod
    def searchsorted(sorted_1d: np.ndarray, values: np.ndarray) -> np.ndarray:
        return np.searchsorted(sorted_1d, values)

    @staticmethod
    def searchsorted_rows(rows: np.ndarray, values: np.ndarray) -> np.ndarray:
        """For each row (sorted ascending, with ``values[i] <= rows[i, -1]``), how many of
        its entries are ``< values[i]``: the first entry that reaches the value."""
        # numpy has no batched searchsorted; torch's costs ~16 us for 192 rows and hands
        # larger batches to its thread pool. A compare and an argmax over rows just
        # computed (so in cache) is cheaper, and exact.
        return np.argmax(rows >= values[:, None], axis=1)

    @staticmethod
    def cumsum(a: np.ndarray, out: np.ndarray) -> None:
        # torch's CPU cumsum adds sequentially, so the boundary after a zero value is
        # exactly the one before it (what keeps zero leaves unselectable).
        # numpy's accumulate is scalar (~3 ns an element); torch's kernel is vectorised and,
        # below 32k elements, runs on the calling thread.
        torch.cumsum(torch.from_numpy(a), 0, out=torch.from_numpy(out))

    @staticmethod
    def cumsum_rows(rows: np.ndarray, out: np.ndarray) -> None:
        # As in cumsum: torch's kernel is several times faster on these small arrays.
        torch.cumsum(torch.from_numpy(rows), 1, out=torch.from_numpy(out))

    @staticmethod
    def min_rows(rows: np.ndarray) -> np.ndarray:
        return torch.from_numpy(rows).amin(1).numpy()

    @staticmethod
    def sum_rows(rows: np.ndarray) -> np.ndarray:
        return rows.sum(1)

    @staticmethod
    def min_positive_rows(rows: np.ndarray) -> np.ndarray:
        """Row minima over the positive entries (``inf`` for a row without any)."""
        # Non-negative floats order like their bit patterns; subtracting 1 as unsigned
        # sends 0 to the largest value, so one integer min skips the zeros (2x faster
        # than masking with inf). A row of zeros wraps back to 0, then becomes inf.
        bits = np.dtype(f"u{rows.dtype.itemsize}")
        one = bits.type(1)
        low = ((rows.view(bits) - one).min(1) + one).view(rows.dtype)
        low[low == 0] = np.inf
        return low

    @staticmethod
    def take(a: np.ndarray, index: np.ndarray) -> np.ndarray:
        return a[index]

    @staticmethod
    def pick(rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
        """``rows[i, cols[i]]`` for every row ``i``."""
        return np.take_along_axis(rows, cols[:, None], 1)[:, 0]

    def scatter_last(
        self,
        target: np.ndarray,
        index: np.ndarray,
        value: np.ndarray,
        keep: np.ndarray | None,
        scratch: Any,
        trash: int,
    ) -> None:
        """See :meth:`TorchKernels.scatter_last`. Numpy assigns repeated indices in order,
        so redirecting dropped entries to ``trash`` is all it takes."""
        target[index if keep is None else np.where(keep, index, trash)] = value


def kernels_for(device: torch.device, seed: int | None, kind: str | None = None) -> Any:
    """Returns :class:`NumpyKernels` for a CPU device, :class:`TorchKernels` otherwise.

    Args:
        device: The (resolved) device.
        seed: Generator seed.
        kind: Force ``"numpy"`` or ``"torch"`` (tests run the torch path on the CPU).

    Raises:
        ValueError: For an unknown ``kind``, or ``"numpy"`` on a non-CPU device.
    """
    if kind is None:
        kind = "numpy" if device.type == "cpu" else "torch"
    if kind == "numpy":
        return NumpyKernels(device, seed)
    if kind == "torch":
        return TorchKernels(device, seed)
    raise ValueError(f"kernels ({kind!r}) must be 'numpy' or 'torch'")

"""Row moves of a CUDA storage in one kernel launch for all its columns.

A storage of three columns (observation, action, reward) would otherwise pay three copies
per insert and three gathers per sample, each a launch of several microseconds from Python.
:class:`RowKernels` moves the rows of up to four columns as bytes in one Triton launch
(:func:`~ostinato.device.torch.triton_kernels.gather_rows` and
:func:`~ostinato.device.torch.triton_kernels.copy_rows`). It is used on CUDA when Triton is
installed; an insert whose values are not all contiguous tensors on the storage's device
(host arrays, Python numbers) takes the per-column copies instead.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch

from ostinato.device.ring import Segment

_MAX_COLUMNS = 4
_GATHER_BLOCK = 1024
_COPY_BLOCK = 4096


class RowKernels:
    """Gathers and writes rows of ``columns`` (each ``(capacity, *shape)``, contiguous).

    Args:
        columns: The storage's column tensors.
        device: Their device.
    """

    def __init__(self, columns: Sequence[torch.Tensor], device: torch.device) -> None:
        from ostinato.device.torch import triton_kernels as tk
        from ostinato.device.torch.launch import Launcher

        self.device = device
        self.columns = list(columns)
        self._bytes = [c.view(-1).view(torch.uint8) for c in self.columns]
        self._row = [math.prod(c.shape[1:]) * c.element_size() for c in self.columns]
        self._dummy = torch.zeros(1, dtype=torch.uint8, device=device)
        self._gather = Launcher(tk.gather_rows)
        self._copy = Launcher(tk.copy_rows)

    @classmethod
    def for_columns(cls, columns: Sequence[torch.Tensor], device: torch.device) -> RowKernels | None:
        """The kernels for a CUDA storage when Triton is installed, else ``None``."""
        if device.type != "cuda" or not 0 < len(columns) <= _MAX_COLUMNS:
            return None
        try:
            import triton  # noqa: F401
        except ImportError:
            return None
        return cls(columns, device)

    def _pad(self, triples: list[Any]) -> list[Any]:
        while len(triples) < 3 * _MAX_COLUMNS:
            triples += [self._dummy, self._dummy, 0]
        return triples

    def gather(self, slots: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """New tensors with the rows at ``slots`` (a long tensor on the device)."""
        n = slots.shape[0]
        outs = [torch.empty((n, *c.shape[1:]), dtype=c.dtype, device=self.device)
                for c in self.columns]
        if n == 0:
            return tuple(outs)
        args: list[Any] = []
        for src, out, row in zip(self._bytes, outs, self._row):
            args += [src, out.view(-1).view(torch.uint8), row]
        self._gather((n, len(outs)), slots, n, *self._pad(args), NCOL=len(outs),
                     BLOCK=_GATHER_BLOCK)
        return tuple(outs)

    def write(self, segments: Sequence[Segment], tensors: Sequence[torch.Tensor]) -> bool:
        """Writes an insert's rows; returns ``False`` (writing nothing) unless every value
        is a contiguous tensor on the device."""
        if not segments:
            return True
        args: list[Any] = []
        dev = self.device
        for t, dst, row in zip(tensors, self._bytes, self._row):
            if t.device != dev or not t.is_contiguous():
                return False
            args += [t.reshape(-1).view(torch.uint8), dst, row]
        s0 = segments[0]
        s1 = segments[1] if len(segments) > 1 else Segment(0, 0, 0)
        longest = max(max(self._row) * max(s0.length, s1.length), 1)
        self._copy((-(-longest // _COPY_BLOCK), len(tensors)),
                   s0.slot, s0.src, s0.length, s1.slot, s1.src, s1.length,
                   *self._pad(args), NCOL=len(tensors), BLOCK=_COPY_BLOCK)
        return True

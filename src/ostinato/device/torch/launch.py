"""Launching a Triton kernel for a few microseconds instead of twenty.

``kernel[grid](...)`` binds and specialises every argument in Python on each call, which
measured about 20-25 us per launch on an H200 host (Triton 3.6): more than the kernels of a
prioritized step take on the GPU. :class:`Launcher` makes the first call of each
configuration that way, keeps the compiled kernel it returns, and then calls that kernel's
launcher directly (the same call Triton makes after binding).

A configuration is what Triton specialises on for these kernels: the constexpr values, the
launch options, each tensor's dtype and 16-byte alignment, and each integer's width. The
kernels mark their integer arguments ``do_not_specialize`` (so a value of 1 or a multiple
of 16 compiles no variant), and floats are always passed as float32. The direct path is
skipped under Triton's interpreter, when a launch hook is installed (profilers), and when
``OSTINATO_TRITON_FAST=0``; if a direct call raises ``TypeError`` (another Triton's
launcher signature), the launcher falls back to ``kernel[grid]`` for good.
"""

from __future__ import annotations

import os
from typing import Any

import torch

_OPTIONS = ("num_warps", "num_stages")


def _fast_enabled() -> bool:
    return os.environ.get("TRITON_INTERPRET") != "1" and os.environ.get(
        "OSTINATO_TRITON_FAST", "1"
    ) != "0"


def _hooks_installed() -> bool:
    try:
        from triton import knobs
    except ImportError:  # older Triton: no knobs module, no hook to honour here
        return False
    runtime = knobs.runtime
    return runtime.launch_enter_hook is not None or runtime.launch_exit_hook is not None


class Launcher:
    """Calls ``fn`` (a ``triton.jit`` function) as ``launcher(grid, *args, **constexprs)``.

    Args:
        fn: The kernel. Its parameters are the positional ``args`` followed by the
            constexprs, in that order.
    """

    def __init__(self, fn: Any) -> None:
        self.fn = fn
        self.names = list(fn.arg_names)
        self.fast = _fast_enabled()
        self._kernels: dict[Any, Any] = {}

    @staticmethod
    def _key_of(args: tuple[Any, ...], consts: dict[str, Any]) -> tuple[Any, ...]:
        key: list[Any] = []
        for a in args:
            if isinstance(a, torch.Tensor):
                key.append((a.dtype, a.data_ptr() % 16 == 0))
            elif isinstance(a, int):
                key.append(-(2**31) <= a < 2**31)
            else:
                key.append(type(a))
        key.append(tuple(consts.items()))
        return tuple(key)

    def __call__(self, grid: int | tuple[int, int], *args: Any, **consts: Any) -> None:
        g0, g1 = (grid, 1) if isinstance(grid, int) else grid
        if not self.fast:
            self.fn[(g0, g1)](*args, **consts)
            return
        key = self._key_of(args, consts)
        kernel = self._kernels.get(key)
        if kernel is None or _hooks_installed():
            kernel = self.fn[(g0, g1)](*args, **consts)
            self._kernels[key] = kernel
            return
        values = [consts[name] for name in self.names[len(args):]]
        stream = torch.cuda.current_stream().cuda_stream
        try:
            kernel.run(g0, g1, 1, stream, kernel.function, kernel.packed_metadata, None, None,
                       None, *args, *values)
        except TypeError:
            self.fast = False
            self.fn[(g0, g1)](*args, **consts)

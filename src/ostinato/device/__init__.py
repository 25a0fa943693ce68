"""Device-resident replay buffers (MindSpore RL style) for PyTorch and JAX.

When the learner lives on a GPU, copying each sampled batch from host memory costs more
than sampling it. These buffers keep the data, the ring cursor's effects and (for the
prioritized buffer) the sum and min trees on the device:

* :class:`UniformReplayBuffer` and :class:`PriorityReplayBuffer` have MindSpore RL's API
  (``backend="torch"`` or ``"jax"``), without its bugs;
* :func:`create_buffer` builds them from MindSpore's ``replay_buffer`` config dicts;
* :mod:`ostinato.device.torch` has the composable torch pieces (storage, samplers, tree);
* :mod:`ostinato.device.jax` is a pure functional form (``init/add/sample/
  update_priorities`` over an immutable state), jit-compatible with donated state.

Importing this package imports neither torch nor jax; a framework is imported when a
buffer of that backend is built or its submodule is accessed.

Example:
    >>> from ostinato.device import UniformReplayBuffer
    >>> buf = UniformReplayBuffer(32, 10_000, [(4,), ()], ["float32", "int64"])  # torch
"""

from __future__ import annotations

import importlib
from typing import Any

from ostinato.device.factory import create_buffer
from ostinato.device.priority import PriorityReplayBuffer
from ostinato.device.spec import ColumnSpec, make_specs
from ostinato.device.uniform import UniformReplayBuffer

__all__ = [
    "ColumnSpec",
    "PriorityReplayBuffer",
    "UniformReplayBuffer",
    "create_buffer",
    "jax",
    "make_specs",
    "torch",
]


def __getattr__(name: str) -> Any:
    # `ostinato.device.jax` / `.torch` import their framework, so load them on first use.
    if name in ("jax", "torch"):
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | {"jax", "torch"})

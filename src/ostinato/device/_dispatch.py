"""Maps ``backend=`` names to buffer classes, importing a framework only when it is asked for."""

from __future__ import annotations

import importlib
from typing import Any

BACKENDS = ("torch", "jax")

_CLASSES = {
    ("uniform", "torch"): ("ostinato.device.torch.buffers", "TorchUniformReplayBuffer"),
    ("priority", "torch"): ("ostinato.device.torch.buffers", "TorchPriorityReplayBuffer"),
    ("uniform", "jax"): ("ostinato.device.jax.buffers", "JaxUniformReplayBuffer"),
    ("priority", "jax"): ("ostinato.device.jax.buffers", "JaxPriorityReplayBuffer"),
}

_FRAMEWORK_MODULES = {"torch": ("torch",), "jax": ("jax", "jaxlib")}


def backend_class(kind: str, backend: Any) -> type:
    """Returns the buffer class of ``kind`` (``"uniform"``/``"priority"``) for ``backend``.

    Raises:
        ValueError: If ``backend`` is not one of :data:`BACKENDS`.
        ImportError: If the backend's framework is not installed (with an install hint).
    """
    if backend not in BACKENDS:
        raise ValueError(f"backend ({backend!r}) must be one of {BACKENDS}")
    module_name, class_name = _CLASSES[(kind, backend)]
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        if (exc.name or "").split(".")[0] in _FRAMEWORK_MODULES[backend]:
            raise ImportError(
                f"backend={backend!r} needs {backend}, which is not installed; "
                f"install it with: pip install 'ostinato[{backend}]'"
            ) from exc
        raise
    return getattr(module, class_name)

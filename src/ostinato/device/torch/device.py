"""Device and dtype resolution for the torch backend (no silent CPU fallback)."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

_DTYPES = {
    "bool": torch.bool,
    "uint8": torch.uint8,
    "int8": torch.int8,
    "int16": torch.int16,
    "int32": torch.int32,
    "int64": torch.int64,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "float32": torch.float32,
    "float64": torch.float64,
}


def torch_dtype(name: str) -> torch.dtype:
    """Returns the ``torch.dtype`` for a canonical dtype name from :mod:`ostinato.device.spec`."""
    return _DTYPES[name]


def resolve_device(device: Any = None) -> torch.device:
    """Turns a device argument into a ``torch.device`` that really exists.

    Args:
        device: ``None`` (torch's default device, normally ``cpu``), a string such as
            ``"cuda:0"``, an int (a CUDA ordinal) or a ``torch.device``.

    Returns:
        The device, with an explicit index for CUDA.

    Raises:
        ValueError: If the device is malformed or not present on this machine. A buffer
            asked for ``cuda`` never quietly runs on the CPU.
    """
    if device is None:
        dev = torch.get_default_device()
    else:
        try:
            dev = torch.device(device)
        except (RuntimeError, TypeError) as exc:
            raise ValueError(f"device ({device!r}) is not a valid torch device") from exc
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(
                f"device ({device!r}) is not available: torch.cuda.is_available() is False"
            )
        index = torch.cuda.current_device() if dev.index is None else dev.index
        count = torch.cuda.device_count()
        if not 0 <= index < count:
            raise ValueError(f"device ({device!r}) is not available: {count} CUDA device(s)")
        return torch.device("cuda", index)
    if dev.type != "cpu":
        try:
            torch.empty(0, device=dev)
        except (RuntimeError, AssertionError) as exc:
            raise ValueError(f"device ({device!r}) is not available: {exc}") from exc
    return dev


def make_generator(device: torch.device, seed: int | None) -> torch.Generator:
    """Returns a generator on ``device``, seeded with ``seed`` or from the OS when ``None``."""
    gen = torch.Generator(device=device)
    if seed is None:
        gen.seed()
    else:
        gen.manual_seed(seed)
    return gen


def full(
    shape: tuple[int, ...], value: float, dtype: torch.dtype, device: torch.device
) -> torch.Tensor:
    """``torch.full``, except that CPU memory comes from numpy.

    numpy asks the kernel for transparent huge pages on large arrays (``madvise``), which
    cuts the TLB misses of gathering random rows from a large buffer by about a fifth;
    torch's CPU allocator does not.
    """
    if device.type == "cpu" and dtype != torch.bfloat16:
        np_dtype = torch.empty(0, dtype=dtype).numpy().dtype
        array = np.zeros(shape, np_dtype) if value == 0 else np.full(shape, value, np_dtype)
        return torch.from_numpy(array)
    return torch.full(shape, value, dtype=dtype, device=device)

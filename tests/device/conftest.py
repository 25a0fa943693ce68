"""Fixtures for the device-buffer tests: CPU always; CUDA tests are marked and skipped."""

from __future__ import annotations

import os

import pytest


def _cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def pytest_collection_modifyitems(config, items):
    if _cuda_available():
        return
    skip = pytest.mark.skip(reason="no CUDA GPU present")
    for item in items:
        if item.get_closest_marker("cuda") is not None:
            item.add_marker(skip)


# Without a GPU, the fused Triton kernels run through Triton's interpreter on CPU tensors.
# Triton reads the variable when a kernel is defined, so it is set before any test imports
# ostinato.device.torch.triton_kernels.
if not _cuda_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

"""Fixtures for the device-buffer tests: CPU always; CUDA tests are marked and skipped."""

from __future__ import annotations

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



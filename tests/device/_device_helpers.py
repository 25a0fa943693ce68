"""Goodness-of-fit helpers for the sampling tests (no scipy needed)."""

from __future__ import annotations

import importlib.util
import math

import numpy as np
import pytest

#: The fused Triton kernels run on CPU tensors through Triton's interpreter (conftest sets
#: TRITON_INTERPRET=1 when no GPU is present); skipped where triton is not installed.
NEEDS_TRITON = pytest.mark.skipif(
    importlib.util.find_spec("triton") is None, reason="triton is not installed"
)


def chi2_sf(stat: float, df: int) -> float:
    """Upper tail of the chi-square distribution (Wilson-Hilferty approximation)."""
    z = ((stat / df) ** (1 / 3) - (1 - 2 / (9 * df))) / math.sqrt(2 / (9 * df))
    return 0.5 * math.erfc(z / math.sqrt(2))


def chi2_pvalue(counts: np.ndarray, probs: np.ndarray) -> float:
    """p-value of observed ``counts`` against expected probabilities ``probs``."""
    counts = np.asarray(counts, dtype=np.float64)
    probs = np.asarray(probs, dtype=np.float64)
    probs = probs / probs.sum()
    expected = counts.sum() * probs
    mask = expected > 0
    assert counts[~mask].sum() == 0, "drew rows whose expected frequency is zero"
    stat = float(((counts[mask] - expected[mask]) ** 2 / expected[mask]).sum())
    return chi2_sf(stat, int(mask.sum()) - 1)


#: Tests pass at p > ALPHA and require a wrong model to give p < ALPHA. Seeds are fixed, so
#: each verdict is deterministic; 1e-4 keeps a correct sampler far from flaky territory.
ALPHA = 1e-4


def as_numpy(x) -> np.ndarray:
    """A host copy of a torch tensor, jax array or numpy array."""
    if hasattr(x, "detach"):
        return x.detach().cpu().numpy()
    return np.asarray(x)


class _IdDtype:
    """Row-id column dtype: int64, or int32 for jax without x64 mode (which refuses int64)."""

    current = np.int64

    def use(self, backend):
        self.current = np.int32 if backend == "jax" else np.int64

    @property
    def types(self):
        return ["float32", np.dtype(self.current).name]


ID_DTYPE = _IdDtype()

"""Checking requested dtypes and shapes against a table's signature and against sampled data.

The messages are Reverb's (``reverb/cc/sampler.cc``), so code that matched them keeps working.
Every failure raises :class:`~ostinato.errors.InvalidArgumentError` (a ``ValueError``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ostinato import errors
from ostinato.core.specs import TensorSpec, dtype_name, shape_str


def compatible(a: tuple[int | None, ...], b: tuple[int | None, ...]) -> bool:
    """True if two shapes (``None`` for unknown dimensions) can describe the same tensor."""
    return len(a) == len(b) and all(x is None or y is None or x == y for x, y in zip(a, b))


def check_against_signature(
    table: str, requested: Sequence[TensorSpec], signature: Sequence[Any] | None
) -> None:
    """Checks flat requested specs against a table's flat signature (when it has one).

    Raises:
      InvalidArgumentError: the number of tensors differs, or a dtype or shape does not fit.
    """
    if signature is None:
        return
    if len(requested) != len(signature):
        raise errors.InvalidArgumentError(
            f"Inconsistent number of tensors requested from table '{table}'.  Requested "
            f"{len(requested)} tensors, but table signature shows {len(signature)} tensors."
        )
    for i, (want, have) in enumerate(zip(requested, signature)):
        have = TensorSpec.from_spec(have)
        if want.dtype != have.dtype or not compatible(want.shape, have.shape):
            raise errors.InvalidArgumentError(
                f"Requested incompatible tensor at flattened index {i} from table '{table}'.  "
                f"Requested (dtype, shape): ({dtype_name(want.dtype)}, {shape_str(want.shape)}).  "
                f"Signature (dtype, shape): ({dtype_name(have.dtype)}, {shape_str(have.shape)})"
            )


def _mismatch(
    table: str, i: int, spec: TensorSpec, dtype: np.dtype, shape: tuple[int, ...]
) -> errors.InvalidArgumentError:
    return errors.InvalidArgumentError(
        f"Received incompatible tensor at flattened index {i} from table '{table}'.  "
        f"Specification has (dtype, shape): ({dtype_name(spec.dtype)}, {shape_str(spec.shape)}).  "
        f"Tensor has (dtype, shape): ({dtype_name(dtype)}, {shape_str(shape)})."
    )


def check_stacked_columns(
    table: str, specs: Sequence[TensorSpec], columns: Sequence[np.ndarray]
) -> None:
    """Checks stacked columns (batch dimension first) against per-row specs."""
    if len(columns) != len(specs):
        raise errors.InvalidArgumentError(
            f"Received {len(columns)} tensors from table '{table}' but {len(specs)} were requested."
        )
    for i, (spec, col) in enumerate(zip(specs, columns)):
        if col.dtype != spec.dtype or not compatible(spec.shape, col.shape[1:]):
            raise _mismatch(table, i, spec, col.dtype, col.shape[1:])


def check_row(table: str, specs: Sequence[TensorSpec], row: Sequence[np.ndarray]) -> None:
    """Checks the columns of one item (or timestep) against specs."""
    if len(row) != len(specs):
        raise errors.InvalidArgumentError(
            f"Received {len(row)} tensors from table '{table}' but {len(specs)} were requested."
        )
    for i, (spec, col) in enumerate(zip(specs, row)):
        if col.dtype != spec.dtype or not compatible(spec.shape, col.shape):
            raise _mismatch(table, i, spec, col.dtype, col.shape)

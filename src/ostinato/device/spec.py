"""Column specifications: the per-element shapes and dtypes a device buffer stores.

Framework-neutral: dtypes are kept as canonical names (``"float32"``), so this module
accepts torch, jax, numpy and MindSpore dtype objects, or strings, without importing any
framework.
"""

from __future__ import annotations

import dataclasses
import numbers
from collections.abc import Sequence
from typing import Any

import numpy as np

#: Element dtypes every backend can store.
SUPPORTED_DTYPES = (
    "bool",
    "uint8",
    "int8",
    "int16",
    "int32",
    "int64",
    "float16",
    "bfloat16",
    "float32",
    "float64",
)


@dataclasses.dataclass(frozen=True)
class ColumnSpec:
    """The shape and dtype of one column (one element of a transition).

    Attributes:
        index: Position of the column in a transition.
        shape: Shape of one element, without the capacity or batch dimension.
        dtype: Canonical dtype name, one of :data:`SUPPORTED_DTYPES`.
        name: Optional human-readable name, used in error messages.
    """

    index: int
    shape: tuple[int, ...]
    dtype: str
    name: str | None = None

    @property
    def label(self) -> str:
        """How error messages name this column, e.g. ``column 0 ('obs')``."""
        if self.name is None:
            return f"column {self.index}"
        return f"column {self.index} ({self.name!r})"

    @property
    def numel(self) -> int:
        """Number of scalars in one element."""
        return int(np.prod(self.shape, dtype=np.int64))


def dtype_name(dtype: Any) -> str:
    """Returns the canonical name of a dtype given in any framework's spelling.

    Args:
        dtype: A string (``"float32"``, MindSpore's ``"Float32"``), a numpy dtype or scalar
            type, a jax dtype, a ``torch.dtype`` or a MindSpore dtype object.

    Returns:
        One of :data:`SUPPORTED_DTYPES`.

    Raises:
        TypeError: If the dtype is not understood or not supported.
    """
    if isinstance(dtype, str):
        text = dtype
    elif type(dtype).__module__.split(".")[0] in ("torch", "mindspore"):
        # torch.float32 prints as "torch.float32"; mindspore.float32 as "Float32".
        text = str(dtype).rsplit(".", 1)[-1]
    else:
        try:
            text = np.dtype(dtype).name
        except TypeError as exc:
            raise TypeError(f"dtype ({dtype!r}) is not a dtype") from exc
    text = text.strip().lower()
    if text not in SUPPORTED_DTYPES:
        try:
            text = np.dtype(text).name
        except TypeError:
            pass
    if text not in SUPPORTED_DTYPES:
        raise TypeError(f"dtype ({dtype!r}) is not supported; use one of {SUPPORTED_DTYPES}")
    return text


def _shape(index: int, shape: Any) -> tuple[int, ...]:
    if isinstance(shape, numbers.Integral) and not isinstance(shape, bool):
        shape = (shape,)
    if not isinstance(shape, (tuple, list)) or not all(
        isinstance(d, numbers.Integral) and not isinstance(d, bool) and d >= 0 for d in shape
    ):
        raise ValueError(f"shapes[{index}] ({shape!r}) must be a tuple of non-negative integers")
    return tuple(int(d) for d in shape)


def make_specs(
    shapes: Sequence[Any], types: Sequence[Any], names: Sequence[str] | None = None
) -> tuple[ColumnSpec, ...]:
    """Validates MindSpore-style ``shapes`` and ``types`` lists and pairs them up.

    Args:
        shapes: One shape per column (a tuple of ints, or an int for a vector), without the
            capacity dimension.
        types: One dtype per column, in any spelling :func:`dtype_name` accepts.
        names: Optional column names for error messages; must be unique.

    Returns:
        One :class:`ColumnSpec` per column.

    Raises:
        ValueError: If the lists are empty, of different lengths, or a shape is malformed.
        TypeError: If ``shapes``/``types`` are not lists or tuples, or a dtype is unsupported.

    Example:
        >>> make_specs([(4,), ()], ["float32", "int64"])[1].label
        'column 1'
    """
    for arg, value in (("shapes", shapes), ("types", types)):
        if not isinstance(value, (list, tuple)):
            raise TypeError(f"{arg} ({value!r}) must be a list or tuple")
    if len(shapes) == 0:
        raise ValueError("shapes ([]) must name at least one column")
    if len(shapes) != len(types):
        raise ValueError(
            f"shapes and types must have the same length, got {len(shapes)} and {len(types)}"
        )
    if names is None:
        names_list: list[str | None] = [None] * len(shapes)
    else:
        names_list = list(names)
        if len(names_list) != len(shapes) or len(set(names_list)) != len(names_list):
            raise ValueError(f"names ({names!r}) must be {len(shapes)} distinct strings")
    specs = []
    for i, (shape, dtype) in enumerate(zip(shapes, types)):
        try:
            name = dtype_name(dtype)
        except TypeError as exc:
            raise TypeError(f"types[{i}]: {exc}") from None
        specs.append(ColumnSpec(i, _shape(i, shape), name, names_list[i]))
    return tuple(specs)


def split_batch(spec: ColumnSpec, shape: tuple[int, ...]) -> int | None:
    """Returns the batch size implied by an incoming value's shape for this column.

    Args:
        spec: The column.
        shape: The shape of the value passed to ``insert``.

    Returns:
        ``None`` for a single element (``shape == spec.shape``), ``n`` for a batch
        (``shape == (n,) + spec.shape``).

    Raises:
        ValueError: If the shape is neither; the message names the column.
    """
    if shape == spec.shape:
        return None
    if len(shape) == len(spec.shape) + 1 and shape[1:] == spec.shape:
        return shape[0]
    raise ValueError(
        f"{spec.label}: shape {shape} does not match element shape {spec.shape} "
        f"or a batch of it (n, *{spec.shape})"
    )


def check_row_count(specs: Sequence[ColumnSpec], counts: Sequence[int | None]) -> int:
    """Checks that every column of an insert carries the same number of rows.

    Args:
        specs: The columns.
        counts: :func:`split_batch` results, one per column.

    Returns:
        The number of rows (1 for a single transition).

    Raises:
        ValueError: If some columns are batched and others are not, or batch sizes differ.
    """
    first = counts[0]
    for spec, count in zip(specs, counts):
        if count != first:

            def what(c: int | None) -> str:
                return "a single element" if c is None else f"a batch of {c}"

            raise ValueError(
                f"{spec.label} holds {what(count)} but {specs[0].label} holds {what(first)}"
            )
    return 1 if first is None else first

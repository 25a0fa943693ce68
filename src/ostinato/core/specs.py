"""Column specs and dtypes: ``TensorSpec`` (a framework-free ``tf.TensorSpec``), the dtype and
shape helpers every layer uses, and the plain-data form of dtypes that messages and checkpoints
carry."""

from __future__ import annotations

from typing import Any

import numpy as np

from ostinato.errors import DecodeError

# TensorFlow's dtype names, used in error messages so that they read like Reverb's.
_TF_DTYPE_NAMES = {
    "float16": "half",
    "float32": "float",
    "float64": "double",
    "bool": "bool",
    "object": "string",
}


def dtype_name(dtype: np.dtype) -> str:
    """Returns TensorFlow's name of a numpy dtype (``float32`` -> ``float``)."""
    name = np.dtype(dtype).name
    return _TF_DTYPE_NAMES.get(name, name)


def shape_str(shape: tuple[int | None, ...]) -> str:
    """Formats a shape as Reverb does: ``[?,2]``."""
    return "[" + ",".join("?" if d is None else str(d) for d in shape) + "]"


class TensorSpec:
    """Shape and dtype of one column; a framework-free stand-in for ``tf.TensorSpec``.

    Args:
      shape: sequence of dimensions; ``None`` marks a dimension of any size.
      dtype: anything ``numpy.dtype`` accepts, or a TensorFlow dtype.
      name: optional name.

    Example:
      >>> TensorSpec([None, 3], "float32", "obs")
      TensorSpec(shape=(None, 3), dtype=float32, name='obs')
    """

    __slots__ = ("shape", "dtype", "name")

    def __init__(self, shape: Any, dtype: Any, name: str | None = None):
        self.shape = normalize_shape(shape)
        self.dtype = to_numpy_dtype(dtype)
        self.name = name

    @classmethod
    def from_spec(cls, spec: Any, name: str | None = None) -> TensorSpec:
        """Builds a TensorSpec from this class or any ``tf.TensorSpec``-like object."""
        if isinstance(spec, TensorSpec) and (name is None or spec.name == name):
            return spec
        return cls(
            spec.shape, spec.dtype, name if name is not None else getattr(spec, "name", None)
        )

    def is_compatible_with(self, shape: tuple[int, ...]) -> bool:
        """True if a concrete (or partially known) shape fits this spec."""
        if len(shape) != len(self.shape):
            return False
        return all(a is None or b is None or a == b for a, b in zip(self.shape, shape))

    def __eq__(self, other: object) -> bool:
        if not is_spec_like(other):
            return NotImplemented
        try:
            o = TensorSpec.from_spec(other)
        except Exception:  # noqa: BLE001 - not a spec: not equal
            return NotImplemented
        return self.shape == o.shape and self.dtype == o.dtype and self.name == o.name

    def __hash__(self) -> int:
        return hash((self.shape, self.dtype, self.name))

    def __repr__(self) -> str:
        return f"TensorSpec(shape={self.shape}, dtype={self.dtype}, name={self.name!r})"


def is_spec_like(obj: Any) -> bool:
    """True for our TensorSpec and for duck-typed ``tf.TensorSpec`` objects (no TF import)."""
    if isinstance(obj, TensorSpec):
        return True
    return (
        hasattr(obj, "shape")
        and hasattr(obj, "dtype")
        and not isinstance(obj, np.ndarray)
        and (type(obj).__name__.endswith("TensorSpec") or hasattr(obj, "is_compatible_with"))
    )


def normalize_shape(shape: Any) -> tuple[int | None, ...]:
    """Turns a list, tuple or ``tf.TensorShape`` into a tuple of ints and ``None``."""
    if shape is None:
        raise ValueError("shape must not be None; use [] for a scalar")
    if hasattr(shape, "as_list"):
        try:
            shape = shape.as_list()
        except ValueError as e:  # unknown rank
            raise ValueError(f"shape ({shape}) must have a known rank") from e
    out: list[int | None] = []
    for d in shape:
        if d is None:
            out.append(None)
            continue
        d = getattr(d, "value", d)
        if d is None:
            out.append(None)
        else:
            out.append(int(d))
    return tuple(out)


def to_numpy_dtype(dtype: Any) -> np.dtype:
    """Converts numpy dtypes, type names and TensorFlow dtypes (duck-typed) to numpy."""
    if hasattr(dtype, "as_numpy_dtype"):
        dtype = dtype.as_numpy_dtype
    if dtype is str or dtype is bytes:
        return np.dtype(object)
    dtype = np.dtype(dtype)
    if dtype.kind in "SU":  # every string is TensorFlow's string: an object array of bytes
        return np.dtype(object)
    return dtype


#: numpy kinds a column may hold: bool, integers, floats, complex and strings.
ALLOWED_KINDS = frozenset("biufcOSU")


def dtype_to_str(dtype: np.dtype) -> str:
    """The dtype as a short string for messages and checkpoints (``"<f4"``; ``"O"`` for strings)."""
    return "O" if dtype.kind == "O" else dtype.str


def dtype_from_str(s: Any) -> np.dtype:
    """The dtype :func:`dtype_to_str` wrote; anything else raises :class:`DecodeError`."""
    if not isinstance(s, str) or len(s) > 8:
        raise DecodeError(f"bad dtype {s!r}")
    try:
        d = np.dtype(s)
    except TypeError:
        raise DecodeError(f"bad dtype {s!r}") from None
    if (
        d.kind not in ALLOWED_KINDS
        or d.hasobject
        and d.kind != "O"
        or d.fields is not None
        or d.kind in "SU"
        and d.itemsize == 0
    ):
        raise DecodeError(f"unsupported dtype {s!r}")
    return d

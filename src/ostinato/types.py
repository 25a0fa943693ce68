"""Plain value types shared by every layer: specs, sample info, table info."""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple

import numpy as np

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
        return cls(spec.shape, spec.dtype, name if name is not None else getattr(spec, "name", None))

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
        except Exception:
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
    return hasattr(obj, "shape") and hasattr(obj, "dtype") and not isinstance(obj, np.ndarray) and (
        type(obj).__name__.endswith("TensorSpec") or hasattr(obj, "is_compatible_with")
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
    out = []
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


class SampleInfo(NamedTuple):
    """What the table reported about a sampled item.

    ``probability`` is the probability the sampler gave the item; ``table_size`` the number of
    items at sampling time; ``times_sampled`` counts this sample too. In a batched sample each
    field is a numpy array.
    """

    key: Any
    probability: Any
    table_size: Any
    priority: Any
    times_sampled: Any

    @staticmethod
    def tf_dtypes():  # pragma: no cover - needs TensorFlow
        import tensorflow as tf

        return SampleInfo(tf.uint64, tf.double, tf.int64, tf.double, tf.int32)

    @staticmethod
    def tf_shapes():  # pragma: no cover - needs TensorFlow
        import tensorflow as tf

        return SampleInfo(*([tf.TensorShape([])] * 5))

    @staticmethod
    def zeros() -> SampleInfo:
        return SampleInfo(0, 0.0, 0, 0.0, 0)

    @staticmethod
    def numpy_dtypes() -> SampleInfo:
        """numpy dtypes of the fields in batched form."""
        return SampleInfo(np.dtype(np.uint64), np.dtype(np.float64), np.dtype(np.int64),
                          np.dtype(np.float64), np.dtype(np.int32))


class ReplaySample(NamedTuple):
    """A sampled item (or batch of items): ``info`` and ``data``."""

    info: SampleInfo
    data: Any


@dataclasses.dataclass(frozen=True)
class _Flag:
    """A set oneof member that carries no value (``fifo: true``)."""

    value: bool = True


@dataclasses.dataclass(frozen=True)
class PrioritizedOptions:
    priority_exponent: float


@dataclasses.dataclass(frozen=True)
class HeapOptions:
    min_heap: bool


@dataclasses.dataclass(frozen=True)
class KeyDistributionOptions:
    """Which selector a table uses, in the shape of Reverb's ``KeyDistributionOptions`` proto.

    Exactly one of ``fifo``, ``uniform``, ``prioritized``, ``heap``, ``lifo`` is set;
    ``WhichOneof('distribution')`` names it, as with the protobuf message.
    """

    fifo: bool = False
    uniform: bool = False
    lifo: bool = False
    prioritized: PrioritizedOptions | None = None
    heap: HeapOptions | None = None
    is_deterministic: bool = False

    def WhichOneof(self, name: str) -> str | None:  # noqa: N802 - protobuf's spelling
        if name != "distribution":
            raise ValueError(f"KeyDistributionOptions has no oneof named {name!r}")
        for field in ("fifo", "uniform", "lifo", "prioritized", "heap"):
            if getattr(self, field):
                return field
        return None

    def HasField(self, name: str) -> bool:  # noqa: N802 - protobuf's spelling
        return bool(getattr(self, name))


@dataclasses.dataclass(frozen=True)
class RateLimiterCallStats:
    completed: int = 0


@dataclasses.dataclass(frozen=True)
class RateLimiterInfo:
    """Configuration and lifetime counters of a table's rate limiter."""

    samples_per_insert: float
    min_diff: float
    max_diff: float
    min_size_to_sample: int
    insert_stats: RateLimiterCallStats = RateLimiterCallStats()
    sample_stats: RateLimiterCallStats = RateLimiterCallStats()
    delete_count: int = 0


@dataclasses.dataclass(frozen=True)
class TableWorkerTime:
    """Kept for Reverb compatibility; Ostinato tables have no worker thread, so all zero."""

    running_ms: int = 0
    sampling_ms: int = 0
    inserting_ms: int = 0
    sleeping_ms: int = 0
    waiting_for_sampling_ms: int = 0
    waiting_for_inserts_ms: int = 0


@dataclasses.dataclass(frozen=True)
class TableInfo:
    """A snapshot of a table's configuration and statistics (Reverb's ``TableInfo``)."""

    name: str
    sampler_options: KeyDistributionOptions
    remover_options: KeyDistributionOptions
    max_size: int
    max_times_sampled: int
    rate_limiter_info: RateLimiterInfo
    signature: Any
    current_size: int
    num_episodes: int
    num_deleted_episodes: int
    num_unique_samples: int
    table_worker_time: TableWorkerTime = TableWorkerTime()


__all__ = [
    "KeyDistributionOptions",
    "RateLimiterInfo",
    "ReplaySample",
    "SampleInfo",
    "TableInfo",
    "TensorSpec",
]

"""What a table reports about itself: ``TableInfo`` and the plain look-alikes of Reverb's
protobuf messages inside it (``KeyDistributionOptions``, ``RateLimiterInfo``, ...).

In Reverb the parts of a ``TableInfo`` are protobuf messages, and programs assign to their
fields (Acme: ``info.table_worker_time.sleeping_ms = 5``). The parts here are therefore
mutable dataclasses that behave like messages where that is visible: a field can be assigned a
value of its type (converted as protobuf converts it: ``1`` into a ``double`` field is ``1.0``),
an unknown field or a value of the wrong type raises (``AttributeError`` / ``TypeError`` naming
the message, the field and the value), setting one member of ``KeyDistributionOptions``'
``distribution`` oneof clears the others, and ``CopyFrom`` copies a message in place. They
compare by value, print as dataclasses, pickle and deep-copy. Like protobuf messages they are
not hashable. ``TableInfo`` itself stays immutable (Reverb's is a named tuple); each
``Table.info`` call builds new parts, so assigning to one snapshot changes no other.
"""

from __future__ import annotations

import copy
import dataclasses
import numbers
import typing
from typing import Any, ClassVar


class _Message:
    """Base of the message look-alikes: typed field assignment, ``CopyFrom``, no hashing."""

    _kinds: ClassVar[dict[str, Any]]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls._kinds = {}  # filled on first assignment, once the dataclass exists

    @classmethod
    def _field_kinds(cls) -> dict[str, Any]:
        if not cls._kinds:
            hints = typing.get_type_hints(cls)
            for f in dataclasses.fields(cls):  # type: ignore[arg-type]
                kind = hints[f.name]
                args = [a for a in typing.get_args(kind) if a is not type(None)]
                cls._kinds[f.name] = (args[0], True) if args else (kind, False)
        return cls._kinds

    def __setattr__(self, name: str, value: Any) -> None:
        kinds = self._field_kinds()
        if name not in kinds:
            raise AttributeError(
                f"{type(self).__name__} has no field {name!r} (fields: {', '.join(kinds)})"
            )
        object.__setattr__(self, name, _convert(type(self).__name__, name, kinds[name], value))

    def CopyFrom(self, other: Any) -> None:  # protobuf's spelling
        """Makes this message a copy of ``other`` (a message of the same type), in place."""
        if type(other) is not type(self):
            raise TypeError(
                f"{type(self).__name__}.CopyFrom() needs a {type(self).__name__}, "
                f"got {type(other).__name__}"
            )
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            object.__setattr__(self, f.name, copy.deepcopy(getattr(other, f.name)))

    __hash__ = None  # type: ignore[assignment]  # mutable, like a protobuf message


def _convert(message: str, name: str, kind: tuple[Any, bool], value: Any) -> Any:
    typ, optional = kind
    if value is None and optional:
        return None
    if typ is bool:
        if isinstance(value, (bool, numbers.Integral)):
            return bool(value)
        expected = "a bool"
    elif typ is int:
        if isinstance(value, numbers.Integral):
            return int(value)
        expected = "an integer"
    elif typ is float:
        if isinstance(value, numbers.Real):
            return float(value)
        expected = "a number"
    elif isinstance(typ, type) and issubclass(typ, _Message):
        if isinstance(value, typ):
            return value
        expected = f"a {typ.__name__}" + (" or None" if optional else "")
    else:
        return value
    raise TypeError(f"{message}.{name} must be {expected}, got {value!r} ({type(value).__name__})")


@dataclasses.dataclass(eq=True)
class PrioritizedOptions(_Message):
    """The ``prioritized`` member of :class:`KeyDistributionOptions`."""

    priority_exponent: float = 0.0


@dataclasses.dataclass(eq=True)
class HeapOptions(_Message):
    """The ``heap`` member of :class:`KeyDistributionOptions`."""

    min_heap: bool = False


_DISTRIBUTION = ("fifo", "uniform", "lifo", "prioritized", "heap")


@dataclasses.dataclass(eq=True)
class KeyDistributionOptions(_Message):
    """Which selector a table uses, in the shape of Reverb's ``KeyDistributionOptions`` proto.

    Exactly one of ``fifo``, ``uniform``, ``prioritized``, ``heap``, ``lifo`` is set;
    ``WhichOneof('distribution')`` names it, as with the protobuf message. Setting one of them
    (to ``True`` or to options) clears the others, as setting a oneof member does.
    """

    fifo: bool = False
    uniform: bool = False
    lifo: bool = False
    prioritized: PrioritizedOptions | None = None
    heap: HeapOptions | None = None
    is_deterministic: bool = False

    def __setattr__(self, name: str, value: Any) -> None:
        super().__setattr__(name, value)
        if name in _DISTRIBUTION and getattr(self, name):
            for other in _DISTRIBUTION:
                if other != name:
                    object.__setattr__(
                        self, other, None if other in ("prioritized", "heap") else False
                    )

    def WhichOneof(self, name: str) -> str | None:  # protobuf's spelling
        if name != "distribution":
            raise ValueError(f"KeyDistributionOptions has no oneof named {name!r}")
        for field in _DISTRIBUTION:
            if getattr(self, field, None):
                return field
        return None

    def HasField(self, name: str) -> bool:  # protobuf's spelling
        return bool(getattr(self, name))


@dataclasses.dataclass(eq=True)
class RateLimiterCallStats(_Message):
    """Lifetime counter of one kind of rate-limited call."""

    completed: int = 0


@dataclasses.dataclass(eq=True)
class RateLimiterInfo(_Message):
    """Configuration and lifetime counters of a table's rate limiter."""

    samples_per_insert: float = 0.0
    min_diff: float = 0.0
    max_diff: float = 0.0
    min_size_to_sample: int = 0
    insert_stats: RateLimiterCallStats = dataclasses.field(default_factory=RateLimiterCallStats)
    sample_stats: RateLimiterCallStats = dataclasses.field(default_factory=RateLimiterCallStats)
    delete_count: int = 0


@dataclasses.dataclass(eq=True)
class TableWorkerTime(_Message):
    """Kept for Reverb compatibility; Ostinato tables have no worker thread, so all zero
    (unless a program sets them)."""

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
    table_worker_time: TableWorkerTime = dataclasses.field(default_factory=TableWorkerTime)

"""Structured-writer configs: patterns, conditions and priorities (Reverb's ``patterns.proto``).

A config says which item to build from the newest steps of a writer, into which table, with
which priority, and on which steps. Reverb keeps configs as protobuf messages; here they are
plain Python objects with the same field names and the same read semantics (an unset ``int``
field reads as ``0``, ``HasField`` and ``WhichOneof`` tell what is set), so code that reads
Reverb's configs runs unchanged, and no protobuf is needed.

Build configs with the helpers (as in Reverb)::

    step = {"obs": None, "action": None, "reward": None}
    pattern = pattern_from_transform(step, lambda s: {
        "obs": s["obs"][-2], "action": s["action"][-2], "next_obs": s["obs"][-1]})
    config = create_config(pattern, "replay", conditions=[Condition.step_index() >= 1])

Indexing a reference step counts back from the newest step: ``s["obs"][-1]`` is the newest
value (no time dimension), ``s["obs"][-3:]`` the newest three, ``s["obs"][-3:-1]`` the two
before the newest, ``s["obs"][-5::2]`` every second of the newest five. A stop of ``0`` means
"up to the newest step" (as in Reverb; Python would read ``[-3:0]`` as empty).

The conditions (:class:`Condition`, :class:`ConditionProto`, :class:`ModuloEq`) are in
:mod:`ostinato.writers.conditions`, and importable from here too.

Configs are checked by :func:`~ostinato.writers.pattern_validation.compile_configs` (called when
a writer or a ``PatternDataset`` is made), which raises
``ValueError("Invalid configuration at position i: `field` ...")``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any, NewType

import numpy as np
import optree

from ostinato.validate import is_int
from ostinato.writers.conditions import Condition as Condition
from ostinato.writers.conditions import ConditionProto, _int_or_none
from ostinato.writers.conditions import ModuloEq as ModuloEq
from ostinato.writers.conditions import _ConditionBuilder as _ConditionBuilder
from ostinato.writers.conditions import _make_condition as _make_condition  # older pickles

# -- the config messages ---------------------------------------------------------------------------


class PatternNode:
    """One column of an item: a step, or a slice of steps, of one column of the step.

    Args:
      flat_source_index: index of the column in the flattened step.
      start: first step of a slice, counted back from the newest (``< 0``); ``None`` for a
        single step.
      stop: end of a slice (``<= 0``; ``0`` or ``None`` = up to the newest step), or, without
        ``start``, the single step (``< 0``) whose value is the column (no time dimension).
      step: stride of a slice (``> 0``).
    """

    __slots__ = ("flat_source_index", "_start", "_stop", "_step")

    def __init__(
        self,
        flat_source_index: int = 0,
        start: int | None = None,
        stop: int | None = None,
        step: int | None = None,
    ):
        self.flat_source_index = _int_or_none(flat_source_index, "flat_source_index") or 0
        self._start = _int_or_none(start, "start")
        self._stop = _int_or_none(stop, "stop")
        self._step = _int_or_none(step, "step")

    # Unset fields read as 0, as in the protobuf message.
    start = property(
        lambda self: self._start or 0,
        lambda self, v: setattr(self, "_start", _int_or_none(v, "start")),
    )
    stop = property(
        lambda self: self._stop or 0,
        lambda self, v: setattr(self, "_stop", _int_or_none(v, "stop")),
    )
    step = property(
        lambda self: self._step or 0,
        lambda self, v: setattr(self, "_step", _int_or_none(v, "step")),
    )

    def HasField(self, name: str) -> bool:  # protobuf's name
        if name not in ("start", "stop", "step"):
            raise ValueError(f'PatternNode has no optional field "{name}"')
        return getattr(self, "_" + name) is not None

    def _key(self) -> tuple[Any, ...]:
        return (self.flat_source_index, self._start, self._stop, self._step)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, PatternNode) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        parts = [f"flat_source_index={self.flat_source_index}"]
        parts += [
            f"{n}={getattr(self, '_' + n)}"
            for n in ("start", "stop", "step")
            if getattr(self, "_" + n) is not None
        ]
        return f"PatternNode({', '.join(parts)})"


@dataclasses.dataclass
class ConstantPriorityFn:
    value: float = 0.0


@dataclasses.dataclass
class TDError:
    max_priority_weight: float = 0.0
    flat_source_index: int = 0


@dataclasses.dataclass
class Priority:
    """How an item's priority is computed: ``constant_fn`` or ``td_error`` (one of them)."""

    constant_fn: ConstantPriorityFn | None = None
    td_error: TDError | None = None

    ConstantPriorityFn = ConstantPriorityFn
    TDError = TDError

    def WhichOneof(self, group: str) -> str | None:  # protobuf's name
        if group != "priority_fn":
            raise ValueError(f'Priority has no oneof "{group}"')
        return (
            "constant_fn"
            if self.constant_fn is not None
            else ("td_error" if self.td_error is not None else None)
        )

    def HasField(self, name: str) -> bool:  # protobuf's name
        return getattr(self, name, None) is not None


@dataclasses.dataclass
class Config:
    """One structured-writer config (Reverb's ``StructuredWriterConfig``).

    Attributes:
      flat: the item's columns, in the order of the flattened pattern.
      pattern_structure: the pattern's structure (an ``optree`` treespec), or ``None`` for a
        flat list of columns.
      table: the table that gets the items.
      priority: how the items' priority is computed.
      conditions: all must hold for an item to be created at a step.
    """

    flat: list[PatternNode] = dataclasses.field(default_factory=list)
    pattern_structure: Any = None
    table: str = ""
    priority: Priority | None = None
    conditions: list[ConditionProto] = dataclasses.field(default_factory=list)

    def HasField(self, name: str) -> bool:  # protobuf's name
        if name not in ("pattern_structure", "priority"):
            raise ValueError(f'StructuredWriterConfig has no optional field "{name}"')
        return getattr(self, name) is not None


StructuredWriterConfig = Config
Pattern = Any  # a nest whose leaves are PatternNode
ReferenceStep = NewType("ReferenceStep", Any)  # type: ignore[valid-newtype]
PatternTransform = Callable[[ReferenceStep], Pattern]


# -- building patterns --------------------------------------------------------------------------


class _RefNode:
    """Stands for one column of the step; indexing it makes a :class:`PatternNode`."""

    __slots__ = ("_idx",)

    def __init__(self, idx: int):
        self._idx = idx

    def __getitem__(self, key: Any) -> PatternNode:
        if isinstance(key, (int, np.integer)) and not isinstance(key, bool):
            return PatternNode(self._idx, stop=int(key))
        if not isinstance(key, slice):
            raise ValueError(f"Key must be int or slice but got {key!r} (type {type(key)}).")
        if key.start is None:
            # Reverb stored x[:-2] as x[-2] (one step, no time dimension): refuse it instead.
            raise ValueError(
                f"Pattern slices need a negative start, counted back from the newest step "
                f"(e.g. x[-3:] or x[-3:-1]); got x[{_slice_text(key)}]."
            )
        return PatternNode(self._idx, start=key.start, stop=key.stop, step=key.step)

    def __repr__(self) -> str:
        return f"<reference to step column {self._idx}>"


def _slice_text(s: slice) -> str:
    text = ("" if s.start is None else str(s.start)) + ":" + ("" if s.stop is None else str(s.stop))
    return text + (f":{s.step}" if s.step is not None else "")


def _flatten_step(step_structure: Any) -> tuple[list[Any], Any]:
    return optree.tree_flatten(step_structure, none_is_leaf=True)


def create_reference_step(step_structure: Any) -> ReferenceStep:
    """The step's structure with each leaf replaced by an object that indexing turns into a
    :class:`PatternNode` (``ref["obs"][-2:]``)."""
    leaves, spec = _flatten_step(step_structure)
    return ReferenceStep(optree.tree_unflatten(spec, [_RefNode(i) for i in range(len(leaves))]))


def pattern_from_transform(step_structure: Any, transform: PatternTransform) -> Pattern:
    """Calls ``transform`` on a reference step of ``step_structure``; returns the pattern."""
    return transform(create_reference_step(step_structure))


def _is_node(x: Any) -> bool:
    return isinstance(x, PatternNode)


def constant_priority_fn(value: float) -> Priority:
    """A priority function that gives every item ``value``."""
    return Priority(constant_fn=ConstantPriorityFn(value=float(value)))


def td_error(
    max_priority_weight: float, step_structure: Any, get_field_from_step_fn: Callable[[Any], Any]
) -> Priority:
    """A priority computed from a per-step TD error column of the item.

    With ``x = |td_error|`` over the item's steps, the priority is
    ``w * max(x) + (1 - w) * mean(x)`` for ``w = max_priority_weight``. The column must be in
    the item (if several item columns read it, the last one is used).
    """
    leaves, spec = _flatten_step(step_structure)
    index = get_field_from_step_fn(optree.tree_unflatten(spec, list(range(len(leaves)))))
    if not is_int(index):
        raise ValueError(f"get_field_from_step_fn must select one leaf of the step, got {index!r}")
    return Priority(
        td_error=TDError(
            max_priority_weight=float(max_priority_weight), flat_source_index=int(index)
        )
    )


def create_config(
    pattern: Pattern,
    table: str,
    conditions: Sequence[ConditionProto] = (),
    priority: Priority | None = None,
) -> Config:
    """A config that builds ``pattern`` into ``table`` when all ``conditions`` hold.

    ``priority`` defaults to ``constant_priority_fn(1.0)``.
    """
    flat, structure = optree.tree_flatten(pattern, is_leaf=_is_node, none_is_leaf=True)
    for path, leaf in zip(optree.tree_paths(pattern, is_leaf=_is_node, none_is_leaf=True), flat):
        if not isinstance(leaf, PatternNode):
            raise TypeError(
                f"Every leaf of a pattern must be a column of the reference step indexed by an "
                f"int or a slice (e.g. step['obs'][-1]); got {leaf!r} at {tuple(path)}."
            )
    return Config(
        flat=list(flat),
        pattern_structure=structure,
        table=table,
        priority=constant_priority_fn(1.0) if priority is None else priority,
        conditions=list(conditions),
    )


def unpack_pattern(config: Config) -> Pattern:
    """The config's pattern (its nodes in their structure)."""
    if config.pattern_structure is None:
        return list(config.flat)
    return optree.tree_unflatten(config.pattern_structure, list(config.flat))

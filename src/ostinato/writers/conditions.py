"""Conditions of structured-writer configs (Reverb's ``patterns_pb2.Condition``).

:class:`ConditionProto` is the condition message (with :class:`ModuloEq`), a plain Python object
read as Reverb's protobuf message is; :class:`Condition` builds them by comparing with ints
(``Condition.step_index() >= 2``, ``Condition.step_index() % 4 == 0``). Both are re-exported by
:mod:`ostinato.writers.patterns`, where the configs that hold conditions are.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import optree

from ostinato.validate import is_int

# -- the condition message -------------------------------------------------------------------------


def _int_or_none(value: Any, name: str) -> int | None:
    if value is None:
        return None
    if not is_int(value):
        raise TypeError(f"{name} ({value!r}) must be an int or None")
    return int(value)


@dataclasses.dataclass
class ModuloEq:
    """``left % mod == eq``."""

    mod: int = 0
    eq: int = 0


_LEFT = (
    "step_index",
    "steps_since_applied",
    "buffer_length",
    "is_end_episode",
    "flat_source_index",
)
_CMP = ("eq", "ge", "mod_eq")


class ConditionProto:
    """A condition on the newest step (Reverb's ``patterns_pb2.Condition``).

    Exactly one "left" value (``step_index``, ``steps_since_applied``, ``buffer_length``,
    ``is_end_episode`` or ``flat_source_index``, the column whose value is read) and one
    comparison (``eq``, ``ge`` or ``mod_eq``); ``inverse`` negates the result. Build them with
    :class:`Condition` rather than by hand.
    """

    __slots__ = ("_left", "_left_value", "_cmp", "_cmp_value", "inverse")

    def __init__(self, **fields: Any):
        self._left: str | None = None
        self._left_value: Any = None
        self._cmp: str | None = None
        self._cmp_value: Any = None
        self.inverse = bool(fields.pop("inverse", False))
        for name, value in fields.items():
            if name not in _LEFT and name not in _CMP:
                raise ValueError(f'Condition has no field "{name}"')
            if value is not None:
                setattr(self, name, value)

    def __getattr__(self, name: str) -> Any:
        # Only reached for the oneof fields (the slots are found first).
        if name in _LEFT:
            return (
                self._left_value
                if self._left == name
                else (0 if name == "flat_source_index" else False)
            )
        if name in _CMP:
            if self._cmp == name:
                return self._cmp_value
            return ModuloEq() if name == "mod_eq" else 0
        raise AttributeError(name)

    def __setattr__(self, name: str, value: Any) -> None:
        v: Any
        if name in _LEFT:
            v = _int_or_none(value, name) if name == "flat_source_index" else bool(value)
            object.__setattr__(self, "_left", name)
            object.__setattr__(self, "_left_value", v)
        elif name in _CMP:
            if name == "mod_eq":
                if not isinstance(value, ModuloEq):
                    raise TypeError(f"mod_eq ({value!r}) must be a ModuloEq")
                v = dataclasses.replace(value)
            else:
                v = _int_or_none(value, name)
            object.__setattr__(self, "_cmp", name)
            object.__setattr__(self, "_cmp_value", v)
        else:
            object.__setattr__(self, name, value)

    def WhichOneof(self, group: str) -> str | None:  # protobuf's name
        if group == "left":
            return self._left
        if group == "cmp":
            return self._cmp
        raise ValueError(f'Condition has no oneof "{group}"')

    def HasField(self, name: str) -> bool:  # protobuf's name
        return name in (
            self._left,
            self._cmp,
            "left" if self._left else None,
            "cmp" if self._cmp else None,
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ConditionProto):
            return NotImplemented
        return (self._left, self._left_value, self._cmp, self._cmp_value, self.inverse) == (
            other._left,
            other._left_value,
            other._cmp,
            other._cmp_value,
            other.inverse,
        )

    __hash__ = None  # type: ignore[assignment]  # mutable, like the message

    def __deepcopy__(self, memo: dict[int, Any]) -> ConditionProto:
        new = ConditionProto(inverse=self.inverse)
        if self._left is not None:
            setattr(new, self._left, self._left_value)
        if self._cmp is not None:
            setattr(new, self._cmp, self._cmp_value)
        return new

    def __reduce__(self) -> tuple[Any, ...]:
        fields = {"inverse": self.inverse}
        if self._left is not None:
            fields[self._left] = self._left_value
        if self._cmp is not None:
            fields[self._cmp] = self._cmp_value
        return (_make_condition, (fields,))

    def __repr__(self) -> str:
        parts = []
        if self._left is not None:
            parts.append(f"{self._left}={self._left_value!r}")
        if self._cmp is not None:
            parts.append(f"{self._cmp}={self._cmp_value!r}")
        if self.inverse:
            parts.append("inverse=True")
        return f"Condition({', '.join(parts)})"


def _make_condition(fields: dict[str, Any]) -> ConditionProto:
    return ConditionProto(**fields)


# -- building conditions ---------------------------------------------------------------------------


def _check_int(cmp: Any) -> int:
    if not is_int(cmp):
        raise TypeError(f"Conditions compare with ints, got {cmp!r}")
    return int(cmp)


class _ConditionBuilder:
    """``Condition.step_index()`` and friends: comparing one makes a :class:`ConditionProto`."""

    __slots__ = ("_left", "_left_value", "_mod")

    def __init__(self, left: str, left_value: Any, mod: int | None = None):
        self._left = left
        self._left_value = left_value
        self._mod = mod

    def _make(self, cmp: str, value: Any, inverse: bool = False) -> ConditionProto:
        c = ConditionProto(inverse=inverse)
        setattr(c, self._left, self._left_value)
        setattr(c, cmp, value)
        return c

    def _no_mod(self, op: str) -> None:
        if self._mod is not None:
            # Reverb silently dropped the modulo here (x % 3 >= 1 became x >= 1).
            raise TypeError(f"Only == and != may follow %; got % {self._mod} {op}")

    def __mod__(self, mod: int) -> _ConditionBuilder:
        if self._mod is not None:
            raise TypeError("A condition takes one modulo")
        return _ConditionBuilder(self._left, self._left_value, _check_int(mod))

    def __eq__(self, cmp: int) -> ConditionProto:  # type: ignore[override]
        if self._mod is not None:
            return self._make("mod_eq", ModuloEq(self._mod, _check_int(cmp)))
        return self._make("eq", _check_int(cmp))

    def __ne__(self, cmp: int) -> ConditionProto:  # type: ignore[override]
        c = self == cmp
        c.inverse = True
        return c

    def __ge__(self, cmp: int) -> ConditionProto:
        self._no_mod(">=")
        return self._make("ge", _check_int(cmp))

    def __gt__(self, cmp: int) -> ConditionProto:
        self._no_mod(">")
        return self._make("ge", _check_int(cmp) + 1)

    def __lt__(self, cmp: int) -> ConditionProto:
        self._no_mod("<")
        return self._make("ge", _check_int(cmp), inverse=True)

    def __le__(self, cmp: int) -> ConditionProto:
        self._no_mod("<=")
        return self._make("ge", _check_int(cmp) + 1, inverse=True)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        mod = f" % {self._mod}" if self._mod is not None else ""
        return f"<incomplete condition on {self._left}{mod}; compare it with an int>"


class Condition:
    """Building blocks of conditions: compare them with ints (``Condition.step_index() >= 2``,
    ``Condition.step_index() % 4 == 0``)."""

    @staticmethod
    def step_index() -> _ConditionBuilder:
        """Index (from 0) of the newest step within its episode."""
        return _ConditionBuilder("step_index", True)

    @staticmethod
    def steps_since_applied() -> _ConditionBuilder:
        """Steps appended since this config last created an item (counting the newest)."""
        return _ConditionBuilder("steps_since_applied", True)

    @staticmethod
    def is_end_episode() -> ConditionProto:
        """True only while ``end_episode`` is being called."""
        return ConditionProto(is_end_episode=True, eq=1)

    @staticmethod
    def data(step_structure: Any) -> Any:
        """The step's structure with builders that read a scalar int or bool of the newest step."""
        leaves, spec = optree.tree_flatten(step_structure, none_is_leaf=True)
        return optree.tree_unflatten(
            spec, [_ConditionBuilder("flat_source_index", i) for i in range(len(leaves))]
        )

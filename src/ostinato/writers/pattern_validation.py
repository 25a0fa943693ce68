"""Checking structured-writer configs, and the table signatures they imply.

:func:`compile_configs` validates configs as Reverb's writer did (same messages, with the
field's path added: ``Invalid configuration at position 1: `flat[0].start` must be < 0 but got
0.``) and refuses a few configs Reverb accepted but ran wrongly; :func:`infer_signature` is
Reverb's function of that name.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import optree

from ostinato.core.specs import TensorSpec, is_spec_like, to_numpy_dtype
from ostinato.writers.conditions import _ConditionBuilder
from ostinato.writers.patterns import Config, PatternNode, _is_node, unpack_pattern

# -- validation ------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class CompiledConfig:
    """A validated config in the form the pattern engine runs."""

    position: int
    table: str
    #: (column, index or slice into the column's history) per item column.
    nodes: tuple[tuple[int, Any], ...]
    #: (left, data column or -1, cmp, a, b, inverse) per condition.
    conditions: tuple[tuple[str, int, str, int, int, bool], ...]
    #: Steps of history the item reaches back to.
    max_age: int
    constant_priority: float
    #: (weight, item column) of a TD-error priority, or None.
    td: tuple[float, int] | None


def _node_age(node: PatternNode) -> int:
    return abs(node.start if node.HasField("start") else node.stop)


def _invalid(position: int, message: str) -> ValueError:
    return ValueError(f"Invalid configuration at position {position}: {message}")


def _compile_node(node: Any, i: int, j: int) -> tuple[int, Any]:
    field = f"flat[{j}]"
    if not hasattr(node, "HasField") or not hasattr(node, "flat_source_index"):
        raise TypeError(
            f"Invalid configuration at position {i}: `{field}` ({node!r}) must be a "
            "PatternNode (index a reference step: step['obs'][-1])"
        )
    has_start, has_stop, has_step = (node.HasField(n) for n in ("start", "stop", "step"))
    if node.flat_source_index < 0:
        raise _invalid(
            i, f"`{field}.flat_source_index` must be >= 0 but got {node.flat_source_index}."
        )
    if not has_start and not has_stop:
        raise _invalid(i, f"`{field}`: At least one of `start` and `stop` must be specified.")
    if has_start and node.start >= 0:
        raise _invalid(i, f"`{field}.start` must be < 0 but got {node.start}.")
    if has_stop and node.stop > 0:
        raise _invalid(i, f"`{field}.stop` must be <= 0 but got {node.stop}.")
    if has_start and has_stop and node.start >= node.stop:
        raise _invalid(
            i,
            f"`{field}.stop` ({node.stop}) must be > `{field}.start` "
            f"({node.start}) when both are specified.",
        )
    if has_stop and not has_start and node.stop == 0:
        raise _invalid(i, f"`{field}.stop` must be < 0 when `start` isn't set but got 0.")
    if has_step and not has_start:
        raise _invalid(i, f"`{field}.step` must only be set when `start` is set.")
    if has_step and node.step <= 0:
        raise _invalid(i, f"`{field}.step` must be > 0 but got {node.step}.")
    if not has_start:
        return node.flat_source_index, node.stop
    return node.flat_source_index, slice(
        node.start, node.stop or None, node.step if has_step else None
    )


def _compile_condition(cond: Any, i: int, k: int) -> tuple[str, int, str, int, int, bool]:
    field = f"conditions[{k}]"
    if isinstance(cond, _ConditionBuilder):
        raise TypeError(
            f"Invalid configuration at position {i}: `{field}` is an incomplete "
            f"condition on `{cond._left}` (compare it with an int, e.g. "
            "Condition.step_index() >= 2)"
        )
    if not hasattr(cond, "WhichOneof"):
        raise TypeError(
            f"Invalid configuration at position {i}: `{field}` ({cond!r}) must be a "
            "Condition (e.g. Condition.step_index() >= 2)"
        )
    left, cmp = cond.WhichOneof("left"), cond.WhichOneof("cmp")
    if left is None:
        raise _invalid(i, f"`{field}`: Conditions must specify a value for `left`.")
    column = -1
    if left == "flat_source_index":
        column = cond.flat_source_index
        if column < 0:
            raise _invalid(i, f"`{field}.flat_source_index` must be >= 0 but got {column}.")
    if cmp is None:
        raise _invalid(i, f"`{field}`: Conditions must specify a value for `cmp`.")
    a, b = (cond.mod_eq.mod, cond.mod_eq.eq) if cmp == "mod_eq" else (getattr(cond, cmp), 0)
    if cmp == "mod_eq" and a <= 0:
        raise _invalid(i, f"`{field}.mod_eq.mod` must be > 0 but got {a}.")
    if cmp == "mod_eq" and b < 0:
        raise _invalid(i, f"`{field}.mod_eq.eq` must be >= 0 but got {b}.")
    if left == "is_end_episode" and (cmp != "eq" or a != 1 or cond.inverse):
        raise _invalid(i, f"`{field}`: Condition must use `eq=1` when using `is_end_episode`.")
    return left, column, cmp, int(a), int(b), bool(cond.inverse)


def _compile_priority(priority: Any, i: int, columns: list[int]) -> tuple[float, Any]:
    which = priority.WhichOneof("priority_fn") if priority is not None else None
    if which is None:
        raise _invalid(i, "`priority` must be set (create_config sets constant_priority_fn(1.0)).")
    if which == "constant_fn":
        value = float(priority.constant_fn.value)
        if math.isnan(value):
            raise _invalid(i, "`priority.constant_fn.value` must not be NaN.")
        return value, None
    td = priority.td_error
    weight = float(td.max_priority_weight)
    if not 0.0 <= weight <= 1.0:  # also refuses NaN
        raise _invalid(
            i,
            f"`priority.td_error.max_priority_weight` must be in [0, 1] but got "
            f"{td.max_priority_weight}.",
        )
    if td.flat_source_index not in columns:
        # Reverb gave such items priority 0 without a word.
        raise _invalid(
            i,
            f"`priority.td_error.flat_source_index` ({td.flat_source_index}) must "
            f"be a column of the item; `flat` reads columns {sorted(set(columns))}.",
        )
    last = len(columns) - 1 - columns[::-1].index(td.flat_source_index)
    return 0.0, (weight, last)


def compile_configs(configs: Sequence[Any]) -> list[CompiledConfig]:
    """Validates ``configs``; raises ``ValueError`` naming the position and the field."""
    if isinstance(configs, (Config, str)) or not isinstance(configs, Sequence):
        raise TypeError(f"configs must be a sequence of Config, got {type(configs).__name__}")
    if not configs:
        raise ValueError("At least one config must be provided.")
    out = []
    for i, config in enumerate(configs):
        flat = list(getattr(config, "flat", None) or ())
        if not flat:
            raise _invalid(i, "`flat` must not be empty.")
        table = getattr(config, "table", None)
        if not isinstance(table, str):
            raise TypeError(
                f"Invalid configuration at position {i}: `table` ({table!r}) must be a string"
            )
        if not table:
            raise _invalid(i, "`table` must not be empty.")
        nodes = tuple(_compile_node(n, i, j) for j, n in enumerate(flat))
        conditions = tuple(_compile_condition(c, i, k) for k, c in enumerate(config.conditions))
        constant, td = _compile_priority(config.priority, i, [c for c, _ in nodes])
        out.append(
            CompiledConfig(i, table, nodes, conditions, max(map(_node_age, flat)), constant, td)
        )
    return out


# -- signatures ------------------------------------------------------------------------------------


def _named_paths(tree: Any, is_leaf: Callable[[Any], bool]) -> list[tuple[Any, ...]]:
    """dm-tree's paths: dict keys, sequence indices, and field names of namedtuples."""
    out = []
    for path in optree.tree_paths(tree, is_leaf=is_leaf, none_is_leaf=True):
        node, named = tree, []
        for entry in path:
            named.append(node._fields[entry] if hasattr(node, "_fields") else entry)
            node = node[entry]
        out.append(tuple(named))
    return out


def _is_spec_leaf(x: Any) -> bool:
    return is_spec_like(x) or isinstance(x, (np.ndarray, np.generic))


def infer_signature(configs: Sequence[Config], step_spec: Any) -> Any:
    """The signature of a table whose items all come from ``configs``.

    Args:
      configs: every config that writes to the table (same table, same pattern structure).
      step_spec: the step's structure with a spec (``TensorSpec``, ``tf.TensorSpec``, or an
        array) at each leaf.

    Returns:
      The pattern's structure with a :class:`~ostinato.TensorSpec` at each leaf, named by its
      path (``"x/y"``). Columns whose length differs between configs get a ``None`` leading
      dimension.

    Raises:
      ValueError: no configs, different tables or structures, a column read out of range, or
        configs whose columns cannot be stacked (different dtypes or inner shapes).
    """
    if not configs:
        raise ValueError("At least one config must be provided.")
    if any(c.pattern_structure != configs[0].pattern_structure for c in configs):
        raise ValueError("All configs must have exactly the same pattern_structure.")
    tables = sorted({c.table for c in configs})
    if len(tables) > 1:
        raise ValueError(
            f"All configs must target the same table but provided configs "
            f"included {', '.join(tables)}."
        )
    flat_spec = optree.tree_leaves(step_spec, is_leaf=_is_spec_leaf, none_is_leaf=True)
    patterns = [unpack_pattern(c) for c in configs]
    paths = _named_paths(patterns[0], _is_node)
    columns = list(
        zip(*(optree.tree_leaves(p, is_leaf=_is_node, none_is_leaf=True) for p in patterns))
    )
    specs = []
    for path, nodes in zip(paths, columns):
        dtypes, shapes = [], []
        for node in nodes:
            if not 0 <= node.flat_source_index < len(flat_spec):
                raise ValueError(
                    f"A config reads column {node.flat_source_index} of the step at {path}, but "
                    f"step_spec has {len(flat_spec)} columns."
                )
            leaf = flat_spec[node.flat_source_index]
            if not hasattr(leaf, "shape") or not hasattr(leaf, "dtype"):
                raise TypeError(
                    f"step_spec column {node.flat_source_index} ({leaf!r}) has no shape and dtype"
                )
            spec = TensorSpec(leaf.shape, leaf.dtype)
            dtypes.append(to_numpy_dtype(spec.dtype))
            shape = spec.shape
            if node.HasField("start"):
                # Reverb computed (stop - start) // step here, one short for strides that do
                # not divide the span (x[-5::2] reads 3 steps).
                length = len(range(node.start, node.stop, node.step or 1))
                shape = (length, *shape)
            shapes.append(shape)
        if any(d != dtypes[0] for d in dtypes):
            raise ValueError(
                f"Configs produce trajectories with multiple dtypes at {path}. "
                f"Got {[d.name for d in dtypes]}."
            )
        if any(len(s) != len(shapes[0]) or s[1:] != shapes[0][1:] for s in shapes):
            raise ValueError(
                f"Configs produce trajectories with incompatible shapes at {path}. "
                f"Got {[list(s) for s in shapes]}."
            )
        merged = shapes[0] if all(s == shapes[0] for s in shapes) else (None, *shapes[0][1:])
        specs.append(TensorSpec(merged, dtypes[0], "/".join(str(p) for p in path)))
    if configs[0].pattern_structure is None:
        return specs
    return optree.tree_unflatten(configs[0].pattern_structure, specs)

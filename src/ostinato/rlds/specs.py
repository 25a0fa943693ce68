"""Comparing a table's signature with the trajectories about to be written (no TensorFlow)."""

from __future__ import annotations

from typing import Any

import optree


def flat_paths(tree: Any) -> list[tuple[str, Any]]:
    """``(path, leaf)`` pairs, the path written ``observation/a`` (field names for tuples)."""
    fields = getattr(tree, "_fields", None)
    if fields is not None:
        return [
            (f"{name}/{p}" if p else name, leaf)
            for name, value in zip(fields, tree)
            for p, leaf in flat_paths(value)
        ]
    paths, leaves, _ = optree.tree_flatten_with_path(tree, none_is_leaf=False)
    return [("/".join(map(str, p)), leaf) for p, leaf in zip(paths, leaves)]


def leaf_spec(spec: Any) -> tuple:
    """``(shape, numpy dtype, name)`` of a TensorSpec-like leaf."""
    from ostinato.types import TensorSpec

    s = TensorSpec.from_spec(spec)
    return s.shape, s.dtype, s.name


def spec_mismatch(table: Any, expected: Any, *, names: bool = False) -> str | None:
    """Why the ``table`` signature differs from ``expected``, or None when they agree.

    Leaves are compared in flattened order (shape, dtype and, with ``names``, name): a
    signature that came over the network may have lost its named tuples' class, not its
    order. The message names the column by its path in ``expected``.
    """
    a, b = flat_paths(table), flat_paths(expected)
    if len(a) != len(b):
        return f"the table has {len(a)} columns, the data gives {len(b)} ({[p for p, _ in b]})"
    for (_, x), (path, y) in zip(a, b):
        lx, ly = leaf_spec(x), leaf_spec(y)
        if not names:
            lx, ly = lx[:2], ly[:2]
        if lx != ly:
            return f"{path}: the table has {lx}, the data gives {ly}"
    return None

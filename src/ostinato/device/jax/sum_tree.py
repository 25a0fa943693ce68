"""A shallow sum/min tree as pure jax functions, held in an immutable :class:`TreeState`.

Leaves are grouped in blocks of ``fanout`` (64); block totals form the next level, and so on
until a level fits in one block (the *top*): depth 3 for 500k slots. Each block stores the
inclusive prefix sums of its children, with ``-1`` in place of the boundary of a zero child.
A descent step gathers each query's row and picks the first child whose boundary reaches
the query's mass: a zero child is never picked, whatever rounding the prefix sums carry.
That matters because XLA computes prefix sums in parallel (here as a small matrix product,
which XLA runs far faster on CPU than its scan-based ``cumsum``), so the boundary after a
zero is not guaranteed to equal the one before it.

Block minima over the positive leaves (same shape, from the level above the leaves up) give
the minimum leaf that importance weights are normalised by.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

FANOUT = 64


class TreeState(NamedTuple):
    """Arrays of one tree (a pytree).

    Attributes:
        leaves: Leaf values, ``(sizes[0],)``.
        prefix: Per level below the top, ``(sizes[h + 1], fanout)`` masked prefix sums.
        values: Per level above the leaves, ``(sizes[h + 1],)`` block totals.
        mins: Per level above the leaves, minimum over the positive leaves below each node.
    """

    leaves: jax.Array
    prefix: tuple[jax.Array, ...]
    values: tuple[jax.Array, ...]
    mins: tuple[jax.Array, ...]


def layout(capacity: int, fanout: int = FANOUT) -> tuple[int, ...]:
    """Level sizes: ``sizes[0]`` leaves (padded to whole blocks), up to a top <= fanout."""
    sizes = [capacity]
    while sizes[-1] > fanout:
        sizes[-1] = -(-sizes[-1] // fanout) * fanout
        sizes.append(sizes[-1] // fanout)
    return tuple(sizes)


def init(capacity: int, dtype: Any = jnp.float32, fanout: int = FANOUT) -> TreeState:
    """An all-zero tree over ``capacity`` leaves."""
    sizes = layout(capacity, fanout)
    return TreeState(
        leaves=jnp.zeros(sizes[0], dtype),
        prefix=tuple(jnp.full((n, fanout), -1, dtype) for n in sizes[1:]),
        values=tuple(jnp.zeros(n, dtype) for n in sizes[1:]),
        mins=tuple(jnp.full(n, jnp.inf, dtype) for n in sizes[1:]),
    )


def _masked_prefix(children: jax.Array) -> jax.Array:
    """Row-wise inclusive prefix sums, ``-1`` where the child is zero."""
    k = children.shape[-1]
    upper = jnp.triu(jnp.ones((k, k), children.dtype))
    sums = jnp.matmul(children, upper, precision=jax.lax.Precision.HIGHEST)
    return jnp.where(children > 0, sums, -1)


def _top(tree: TreeState) -> jax.Array:
    return tree.values[-1] if tree.values else tree.leaves


def total(tree: TreeState) -> jax.Array:
    """Sum of all leaves."""
    return jnp.sum(_top(tree))


def minimum(tree: TreeState) -> jax.Array:
    """Minimum over positive leaves (``inf`` if none)."""
    if tree.mins:
        return jnp.min(tree.mins[-1])
    return jnp.min(jnp.where(tree.leaves > 0, tree.leaves, jnp.inf))


def _pick(rows: jax.Array, mass: jax.Array) -> jax.Array:
    # First child whose boundary reaches the mass; the mass is first capped at the largest
    # boundary so that one always does (zero children hold -1 and never do).
    mass = jnp.minimum(mass, jnp.max(rows, axis=-1))
    return jnp.argmax(rows >= mass[:, None], axis=-1).astype(jnp.int32), mass


def find(tree: TreeState, mass: jax.Array) -> jax.Array:
    """For each mass in ``(0, total]``, a leaf whose prefix-sum interval contains it
    (up to rounding); zero leaves are never returned while the total is positive."""
    top = _top(tree)
    top_rows = _masked_prefix(top[None, :])
    node, mass = _pick(jnp.broadcast_to(top_rows, (mass.shape[0], top.shape[0])), mass)
    mass = mass - (top_rows[0, node] - top[node])
    k = tree.prefix[0].shape[1] if tree.prefix else 1
    for h in range(len(tree.prefix) - 1, -1, -1):
        rows = tree.prefix[h][node]
        child, mass = _pick(rows, mass)
        node = node * k + child
        if h:
            before = jnp.take_along_axis(rows, child[:, None], 1)[:, 0] - tree.values[h - 1][node]
            mass = mass - before
    return node


def last_kept(index: jax.Array, keep: jax.Array) -> jax.Array:
    """Mask of the entries that win a scatter: kept, and the last kept one of their index."""
    pos = jnp.arange(index.shape[0], dtype=jnp.int32)
    rank = jnp.where(keep, pos, -1)
    order = jnp.lexsort((rank, index))
    sorted_index = index[order]
    is_last = jnp.concatenate([sorted_index[1:] != sorted_index[:-1], jnp.ones(1, bool)])
    return jnp.zeros_like(keep).at[order].set(is_last & keep[order])


def set_leaves(
    tree: TreeState, index: jax.Array, value: jax.Array, keep: jax.Array | None = None
) -> TreeState:
    """Sets leaves ``index`` to ``value`` and rebuilds their blocks.

    Args:
        tree: The tree.
        index: Leaf indices in range.
        value: Non-negative values.
        keep: Optional mask; when given, only kept entries are written and of repeated
            indices the last kept one wins. When ``None``, indices must be distinct.
    """
    leaves = tree.leaves
    if keep is not None:
        target = jnp.where(last_kept(index, keep), index, leaves.shape[0])  # dropped
    else:
        target = index
    leaves = leaves.at[target].set(value.astype(leaves.dtype), mode="drop")
    prefix, values, mins = list(tree.prefix), list(tree.values), list(tree.mins)
    k = tree.prefix[0].shape[1] if tree.prefix else 1
    node, below_values, below_mins = index, leaves, None
    for h in range(len(prefix)):
        node = node // k
        children = below_values.reshape(-1, k)[node]
        prefix[h] = prefix[h].at[node].set(_masked_prefix(children))
        values[h] = values[h].at[node].set(jnp.sum(children, axis=1))
        if h == 0:
            child_mins = jnp.where(children > 0, children, jnp.inf)
        else:
            child_mins = below_mins.reshape(-1, k)[node]
        mins[h] = mins[h].at[node].set(jnp.min(child_mins, axis=1))
        below_values, below_mins = values[h], mins[h]
    return TreeState(leaves, tuple(prefix), tuple(values), tuple(mins))


def clear(tree: TreeState) -> TreeState:
    """An all-zero tree of the same shape."""
    return TreeState(
        leaves=jnp.zeros_like(tree.leaves),
        prefix=tuple(jnp.full_like(p, -1) for p in tree.prefix),
        values=tuple(jnp.zeros_like(v) for v in tree.values),
        mins=tuple(jnp.full_like(m, jnp.inf) for m in tree.mins),
    )

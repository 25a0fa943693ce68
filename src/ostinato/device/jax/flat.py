"""Flat priority search for accelerators, with :mod:`~ostinato.device.jax.sum_tree`'s interface.

On a GPU a tree costs a gather, a prefix sum and a scatter per level, on both the sampling
and the update path; reading every leaf once costs less (the float32 leaves of a million
rows are 4 MB). So this layout keeps only the leaves, padded to ``nblocks`` blocks of ``B``
(``B`` about ``sqrt(capacity)``):

* :func:`draw` sums every block (and takes its minimum positive leaf in the same pass),
  takes the masked prefix sum of the block sums to choose each draw's block, then the
  masked prefix sum of that block's leaves to choose its leaf (a zero leaf has boundary
  ``-1`` and is never chosen, whatever the rounding);
* :func:`set_leaves` is one scatter (the last kept entry of a repeated index wins).

The state is a :class:`~ostinato.device.jax.sum_tree.TreeState` with empty upper levels,
so :class:`~ostinato.device.jax.functional.PriorityState` keeps its structure.
"""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp

from ostinato.device.jax.sum_tree import TreeState, last_kept


def block_size(capacity: int) -> int:
    """Leaves per block: the power of two at or above ``sqrt(capacity)``, at least 128."""
    return max(128, 1 << math.isqrt(max(capacity, 1) - 1).bit_length())


def init(capacity: int, dtype: Any = jnp.float32) -> TreeState:
    """All-zero leaves for ``capacity`` rows, padded to whole blocks."""
    b = block_size(capacity)
    return TreeState(jnp.zeros(-(-capacity // b) * b, dtype), (), (), ())


def _pick(values: jax.Array, mass: jax.Array) -> tuple[jax.Array, jax.Array]:
    # values: (n, k) rows (or (1, k) shared); the first entry whose masked inclusive prefix
    # sum reaches the mass, and the mass left inside it.
    bounds = jnp.where(values > 0, jnp.cumsum(values, axis=-1), -1)
    mass = jnp.minimum(mass, jnp.max(bounds, axis=-1))
    k = jnp.argmax(bounds >= mass[:, None], axis=-1).astype(jnp.int32)
    starts = jnp.broadcast_to(bounds - values, (mass.shape[0], values.shape[1]))
    return k, mass - jnp.take_along_axis(starts, k[:, None], 1)[:, 0]


def draw(tree: TreeState, fraction: jax.Array, capacity: int) -> tuple[jax.Array, jax.Array]:
    """The leaves at cumulative fractions ``fraction`` (in ``(0, 1]``) of the total, and the
    minimum positive leaf, from one pass over the leaves (block sums and minima together).

    Zero leaves are never returned while the total is positive. ``capacity`` is the one
    the leaves were made for (static).
    """
    b = block_size(capacity)
    rows = tree.leaves.reshape(-1, b)
    sums = jnp.sum(rows, axis=1)
    low = jnp.min(jnp.where(rows > 0, rows, jnp.inf))
    block, mass = _pick(sums[None, :], fraction * jnp.sum(sums))
    leaf, _ = _pick(rows[block], mass)
    return block * b + leaf, low


def set_leaves(
    tree: TreeState, index: jax.Array, value: jax.Array, keep: jax.Array | None = None
) -> TreeState:
    """Sets leaves ``index`` to ``value``; with ``keep``, only kept entries are written and
    of repeated indices the last kept one wins (else indices must be distinct)."""
    leaves = tree.leaves
    target = index if keep is None else jnp.where(last_kept(index, keep), index, leaves.shape[0])
    leaves = leaves.at[target].set(value.astype(leaves.dtype), mode="drop")
    return tree._replace(leaves=leaves)


def clear(tree: TreeState) -> TreeState:
    """All-zero leaves of the same shape."""
    return tree._replace(leaves=jnp.zeros_like(tree.leaves))

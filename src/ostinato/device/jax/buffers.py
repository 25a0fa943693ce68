"""MindSpore-style buffer objects over the jax functional form.

Each object holds a state, a PRNG key and a host-side :class:`~ostinato.device.ring.
RingCursor` (so ``size()``, ``full()`` and index checks never wait for the device), and
calls the shared jit-compiled functions of :mod:`ostinato.device.jax.functional` with the
state donated.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ostinato.device._checks import distinct_rows_fit
from ostinato.device.jax.functional import (
    PriorityBuffer,
    UniformBuffer,
    compiled,
    make_priority_buffer,
    make_uniform_buffer,
    resolve_device,
)
from ostinato.device.priority import PriorityReplayBuffer
from ostinato.device.ring import RingCursor
from ostinato.device.uniform import UniformReplayBuffer


def _key(seed: int | None) -> jax.Array:
    if seed is None:
        seed = int(np.random.SeedSequence().generate_state(1)[0])
    return jax.random.key(seed)


class _JaxMixin:
    """State handling shared by the two jax buffer objects."""

    _fns: UniformBuffer | PriorityBuffer
    state: Any
    ring: RingCursor

    def _setup(self, fns: Any, device: Any, seed: int | None) -> None:
        self.device = resolve_device(device)
        self._fns = fns
        self._add = compiled(fns, "add")
        self._sample = compiled(fns, "sample_step")
        self._reset = compiled(fns, "reset")
        self.state = fns.init(self.device)
        self.ring = RingCursor(fns.capacity)
        self._key = jax.device_put(_key(seed), self.device)

    def _insert(self, columns: Sequence[Any], **kwargs: Any) -> None:
        # Validate and count rows on the host first: shapes are static, so this is free.
        # Untyped Python values take the column's dtype (as in the torch backend).
        if isinstance(columns, (list, tuple)):
            columns = tuple(
                np.asarray(c, dtype=spec.dtype) if isinstance(c, (list, tuple, int, float)) else c
                for spec, c in zip(self._fns.specs, columns)
            ) + tuple(columns[len(self._fns.specs) :])
        rows, _ = self._fns.check(columns)
        self.state = self._add(self.state, tuple(columns), **kwargs)
        self.ring.advance(rows)

    def get_item(self, index: int) -> tuple[jax.Array, ...]:
        slot = self.ring.slot_of(index)
        return tuple(c[slot] for c in self.state.columns)

    def size(self) -> int:
        return self.ring.size

    def reset(self) -> bool:
        self.state = self._reset(self.state)
        self.ring.reset()
        return True

    def block_until_ready(self) -> None:
        """Waits until every queued operation on the state has finished."""
        jax.block_until_ready(self.state)

    def state_dict(self) -> dict[str, Any]:
        return {"state": self.state, "key": self._key, "ring": self.ring.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        mine = jax.tree_util.tree_structure(self.state)
        theirs = jax.tree_util.tree_structure(state["state"])
        if mine != theirs:
            raise ValueError("state does not match this buffer's structure")
        for a, b in zip(
            jax.tree_util.tree_leaves(self.state), jax.tree_util.tree_leaves(state["state"])
        ):
            if a.shape != b.shape or a.dtype != b.dtype:
                raise ValueError(f"state array {b.shape} {b.dtype} != {a.shape} {a.dtype}")
        self.ring.load_state_dict(state["ring"])
        # Copies, so donating our state later cannot invalidate the caller's arrays.
        self.state = jax.tree_util.tree_map(lambda x: jnp.array(x, copy=True), state["state"])
        self.state = jax.device_put(self.state, self.device)
        self._key = jax.device_put(state["key"], self.device)


class JaxUniformReplayBuffer(_JaxMixin, UniformReplayBuffer):
    """:class:`~ostinato.device.UniformReplayBuffer` on a jax device. Arguments are those of
    :class:`~ostinato.device.UniformReplayBuffer`; ``device`` is a jax platform (``"cpu"``,
    ``"gpu"``, ``"gpu:1"``) or a ``jax.Device``. Returns jax arrays."""

    def __init__(
        self,
        sample_size: int,
        capacity: int,
        shapes: Sequence[Any],
        types: Sequence[Any],
        **kwargs: Any,
    ) -> None:
        super().__init__(sample_size, capacity, shapes, types, **kwargs)
        names = [s.name for s in self.specs] if self.specs[0].name is not None else None
        fns = make_uniform_buffer(self.capacity, self.sample_size, shapes, types, names)
        self._setup(fns, kwargs.get("device"), self.seed)

    def insert(self, exp: Sequence[Any]) -> None:
        self._insert(exp)

    def sample(
        self, *, unique: bool = False, order_preserving: bool = False
    ) -> tuple[jax.Array, ...]:
        if self.ring.size == 0:
            raise IndexError("cannot sample from an empty buffer")
        if unique:
            distinct_rows_fit(self.sample_size, self.ring.size)
        self._key, out = self._sample(
            self.state, self._key, unique=unique, order_preserving=order_preserving
        )
        return out


class JaxPriorityReplayBuffer(_JaxMixin, PriorityReplayBuffer):
    """:class:`~ostinato.device.PriorityReplayBuffer` on a jax device. Arguments are those
    of :class:`~ostinato.device.PriorityReplayBuffer`, plus ``tree_dtype`` (float32 unless
    jax's x64 mode is on) and ``search`` (``"tree"``, or ``"flat"``, the default on a GPU;
    see :class:`~ostinato.device.jax.functional.PriorityBuffer`). Indices are int32 row
    ids; weights float32."""

    def __init__(
        self,
        alpha: float,
        capacity: int,
        sample_size: int,
        shapes: Sequence[Any],
        types: Sequence[Any],
        *,
        tree_dtype: Any = None,
        search: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(alpha, capacity, sample_size, shapes, types, **kwargs)
        names = [s.name for s in self.specs] if self.specs[0].name is not None else None
        if search is None:
            platform = resolve_device(kwargs.get("device")).platform
            search = "flat" if platform in ("gpu", "cuda", "rocm") else "tree"
        fns = make_priority_buffer(
            self.alpha,
            self.capacity,
            self.sample_size,
            shapes,
            types,
            names,
            tree_dtype,
            search,
        )
        self._setup(fns, kwargs.get("device"), self.seed)
        self._update = compiled(fns, "update_priorities")

    def _check(self, priorities: Any, what: str) -> None:
        if not self.validate:
            return
        p = np.asarray(priorities, dtype=np.float64).reshape(-1)
        bad = ~(np.isfinite(p) & (p >= 0))
        if bad.any():
            i = int(np.argmax(bad))
            raise ValueError(f"{what} must be finite and >= 0; got {p[i]} at position {i}")

    def insert(self, *transition: Any, priority: Any = None) -> None:
        if priority is not None:
            self._check(priority, "priority")
        self._insert(self._transition(transition), priority=priority)

    def sample(self, beta: float | None = None) -> tuple[jax.Array, ...]:
        beta = self._beta(beta)
        if self.ring.size == 0:
            raise IndexError("cannot sample from an empty buffer")
        self._key, out = self._sample(self.state, self._key, beta)
        return out

    def update_priorities(self, indices: Any, priorities: Any) -> None:
        n_ids, n_p = np.shape(indices), np.shape(priorities)
        if int(np.prod(n_ids)) != int(np.prod(n_p)):
            raise ValueError(
                f"indices ({int(np.prod(n_ids))}) and priorities ({int(np.prod(n_p))}) "
                "differ in length"
            )
        self._check(priorities, "priorities")
        self.state = self._update(self.state, indices, priorities)

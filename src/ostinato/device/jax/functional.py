"""Pure functional device buffers for jax (flashbax style): ``init/add/sample/...`` over an
immutable state, all jit-compatible; jit ``add``/``update_priorities``/``reset`` with the
state donated (``jax.jit(buf.add, donate_argnums=0)``, or :meth:`UniformBuffer.jit`) and XLA
updates the buffers in place.

Row bookkeeping follows :mod:`ostinato.device.ring`, with int32 counters: ``total`` counts
insertions modulo ``period`` (the largest multiple of the capacity below 2**31), so row ids
stay int32 forever and ``id % capacity`` is still the row's slot.

Example:
    >>> import jax, numpy as np
    >>> buf = make_priority_buffer(0.6, 1024, 32, [(4,), ()], ["float32", "int32"]).jit()
    >>> state = buf.init()
    >>> state = buf.add(state, (np.zeros((64, 4), np.float32), np.arange(64, dtype=np.int32)))
    >>> indices, weights, obs, action = buf.sample(state, jax.random.key(0), 0.4)
    >>> state = buf.update_priorities(state, indices, np.ones(32, np.float32))
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ostinato.device._checks import distinct_rows_fit, unit_float
from ostinato.device.jax import flat, sum_tree
from ostinato.device.spec import (
    ColumnSpec,
    check_row_count,
    dtype_name,
    make_specs,
    split_batch,
)
from ostinato.validate import positive_int

INT32_MAX = 2**31 - 1


class UniformState(NamedTuple):
    """State of a uniform buffer (a pytree).

    Attributes:
        columns: One ``(capacity, *shape)`` array per column.
        total: Rows ever inserted, modulo the id period (int32 scalar).
        size: Rows held (int32 scalar).
    """

    columns: tuple[jax.Array, ...]
    total: jax.Array
    size: jax.Array


class PriorityState(NamedTuple):
    """State of a prioritized buffer (a pytree): a :class:`UniformState`'s fields plus the
    sum/min tree and the running maximum priority."""

    columns: tuple[jax.Array, ...]
    total: jax.Array
    size: jax.Array
    tree: sum_tree.TreeState
    max_priority: jax.Array


def _floor(dtype: Any) -> float:
    """Smallest leaf value: zero priorities are stored as this. Far enough above the
    smallest normal number that masses derived from it (total / sample_size) stay normal;
    XLA flushes subnormals to zero."""
    info = jnp.finfo(dtype)
    return float(info.tiny / info.eps)


def _is_traced(x: Any) -> bool:
    return isinstance(x, jax.core.Tracer)


def resolve_device(device: Any = None) -> Any:
    """Returns the ``jax.Device`` for ``device`` (None, a platform such as ``"gpu"``,
    ``"cuda:1"``, or a Device), raising ``ValueError`` if it is not present."""
    if device is None:
        return jax.devices()[0]
    if isinstance(device, jax.Device):
        return device
    if not isinstance(device, str):
        raise ValueError(f"device ({device!r}) must be None, a platform name or a jax.Device")
    platform, _, index = device.partition(":")
    platform = {"cuda": "gpu", "rocm": "gpu"}.get(platform, platform)
    try:
        devices = jax.devices(platform)
    except RuntimeError as exc:
        raise ValueError(f"device ({device!r}) is not available: {exc}") from exc
    i = int(index) if index else 0
    if not 0 <= i < len(devices):
        raise ValueError(f"device ({device!r}) is not available: {len(devices)} device(s)")
    return devices[i]


@dataclasses.dataclass(frozen=True)
class _Base:
    capacity: int
    sample_size: int
    specs: tuple[ColumnSpec, ...]

    @property
    def period(self) -> int:
        """Row ids are counted modulo this multiple of the capacity (< 2**31)."""
        return self.capacity * max(1, INT32_MAX // self.capacity)

    def check(self, columns: Sequence[Any]) -> tuple[int, bool]:
        """Validates an insert from shapes and dtypes alone (no device work).

        Returns:
            ``(rows, single)``.

        Raises:
            ValueError: Wrong column count, a shape that is neither an element nor a batch,
                or batch sizes that differ; the message names the column.
            TypeError: A typed value whose dtype differs from the column's.
        """
        if not isinstance(columns, (list, tuple)) or len(columns) != len(self.specs):
            got = len(columns) if isinstance(columns, (list, tuple)) else type(columns).__name__
            raise ValueError(f"insert expects a list of {len(self.specs)} columns, got {got}")
        counts = []
        for spec, value in zip(self.specs, columns):
            if hasattr(value, "dtype"):
                try:
                    got = dtype_name(value.dtype)
                except TypeError:
                    got = str(value.dtype)
                if got != spec.dtype:
                    raise TypeError(f"{spec.label}: dtype {got} does not match {spec.dtype}")
            else:  # untyped Python values take the column's dtype
                try:
                    value = np.asarray(value, dtype=spec.dtype)
                except (TypeError, ValueError) as exc:
                    raise TypeError(
                        f"{spec.label}: cannot convert {value!r} to {spec.dtype}"
                    ) from exc
            counts.append(split_batch(spec, tuple(np.shape(value))))
        if len(set(counts)) != 1:
            check_row_count(self.specs, counts)
        return (1, True) if counts[0] is None else (counts[0], False)

    def _columns(self, columns: Sequence[Any]) -> tuple[tuple[jax.Array, ...], int, bool]:
        # Shapes and dtypes are static under jit, so this check runs at trace time too.
        rows, single = self.check(columns)
        arrays = [
            jnp.asarray(v) if hasattr(v, "dtype") else jnp.asarray(np.asarray(v, s.dtype))
            for s, v in zip(self.specs, columns)
        ]
        if single:
            arrays = [a[None] for a in arrays]
        return tuple(arrays), rows, single

    def _init_columns(self) -> tuple[jax.Array, ...]:
        return tuple(jnp.zeros((self.capacity, *s.shape), s.dtype) for s in self.specs)

    def _write(self, state: Any, arrays: tuple[jax.Array, ...], rows: int) -> tuple[Any, ...]:
        """Writes the kept rows; returns (columns, slots, total, size)."""
        cap, period = self.capacity, self.period
        kept = min(rows, cap)
        src = rows - kept
        start = jnp.mod(state.total, cap) + src
        slots = jnp.mod(start + jnp.arange(kept, dtype=jnp.int32), cap)
        columns = tuple(c.at[slots].set(a[src:]) for c, a in zip(state.columns, arrays))
        r = rows % period  # total + r without int32 overflow:
        total = jnp.where(state.total >= period - r, state.total - (period - r), state.total + r)
        size = jnp.minimum(state.size + rows, cap).astype(jnp.int32)
        return columns, slots, total.astype(jnp.int32), size

    def size(self, state: Any) -> jax.Array:
        """Rows held."""
        return state.size

    def can_sample(self, state: Any) -> jax.Array:
        """Whether at least one row is held (sampling an empty buffer returns garbage)."""
        return state.size > 0

    def _slot(self, state: Any, index: Any) -> jax.Array:
        if not _is_traced(state.size) and not _is_traced(index):
            size = int(state.size)
            if not -size <= int(index) < size:
                raise IndexError(f"index ({int(index)}) out of range for a buffer of size {size}")
        index = jnp.asarray(index, jnp.int32)
        index = jnp.where(index < 0, index + state.size, index)
        return jnp.mod(jnp.mod(state.total - state.size, self.capacity) + index, self.capacity)

    def get(self, state: Any, index: Any) -> tuple[jax.Array, ...]:
        """The row at a logical index (0 oldest, negative from the newest). Raises
        ``IndexError`` when called outside jit; under jit, keep the index in range."""
        slot = self._slot(state, index)
        return tuple(c[slot] for c in state.columns)

    def _check_sample(self, state: Any) -> None:
        if not _is_traced(state.size) and int(state.size) == 0:
            raise IndexError("cannot sample from an empty buffer")


@dataclasses.dataclass(frozen=True)
class UniformBuffer(_Base):
    """Pure functions of a uniform FIFO buffer; build with :func:`make_uniform_buffer`."""

    def init(self, device: Any = None) -> UniformState:
        """An empty state on ``device`` (default: jax's default device)."""
        with jax.default_device(resolve_device(device)):
            # Distinct arrays: a donated state must not hold one buffer twice.
            return UniformState(
                self._init_columns(), jnp.zeros((), jnp.int32), jnp.zeros((), jnp.int32)
            )

    def add(self, state: UniformState, columns: Sequence[Any]) -> UniformState:
        """Appends one row (element-shaped columns) or a batch (leading dimension)."""
        arrays, rows, _ = self._columns(columns)
        if rows == 0:
            return state
        new_columns, _, total, size = self._write(state, arrays, rows)
        return UniformState(new_columns, total, size)

    def sample(
        self,
        state: UniformState,
        key: jax.Array,
        unique: bool = False,
        order_preserving: bool = False,
    ) -> tuple[jax.Array, ...]:
        """``sample_size`` rows drawn uniformly with replacement (``sample_size`` may exceed
        the size and the capacity). ``unique``: without replacement, which needs
        ``size >= sample_size`` (checked outside jit; under jit only ``capacity >=
        sample_size`` can be checked); ``order_preserving``: oldest first. Both flags are
        static."""
        self._check_sample(state)
        cap, n = self.capacity, self.sample_size
        if unique:
            if _is_traced(state.size):
                distinct_rows_fit(n, cap, "capacity")
            else:
                distinct_rows_fit(n, int(state.size))
            u = jax.random.uniform(key, (cap,))
            u = jnp.where(jnp.arange(cap) < state.size, u, 2.0)
            logical = jax.lax.top_k(-u, n)[1].astype(jnp.int32)
        else:
            logical = jax.random.randint(key, (n,), 0, jnp.maximum(state.size, 1), jnp.int32)
        if order_preserving:
            logical = jnp.sort(logical)
        slots = jnp.mod(jnp.mod(state.total - state.size, cap) + logical, cap)
        return tuple(c[slots] for c in state.columns)

    def reset(self, state: UniformState) -> UniformState:
        """An empty state (columns zeroed); ids keep counting."""
        columns = tuple(jnp.zeros_like(c) for c in state.columns)
        return UniformState(columns, state.total, jnp.zeros((), jnp.int32))

    def jit(self) -> JittedBuffer:
        """The same functions, jit-compiled, with the state donated where it is replaced."""
        return JittedBuffer(self)


@dataclasses.dataclass(frozen=True)
class PriorityBuffer(_Base):
    """Pure functions of a prioritized FIFO buffer; build with :func:`make_priority_buffer`."""

    alpha: float = 0.6
    tree_dtype: str = "float32"
    #: ``"tree"`` (the sum tree: fewer bytes touched, for CPUs) or ``"flat"`` (every leaf
    #: read per draw, no tree to maintain: fewer, larger kernels, for GPUs).
    search: str = "tree"

    @property
    def _search(self) -> Any:
        return flat if self.search == "flat" else sum_tree

    def init(self, device: Any = None) -> PriorityState:
        """An empty state on ``device`` (default: jax's default device)."""
        with jax.default_device(resolve_device(device)):
            if self.search == "flat":
                tree = flat.init(self.capacity, self.tree_dtype)
            else:
                tree = sum_tree.init(self.capacity, self.tree_dtype)
            return PriorityState(
                self._init_columns(),
                jnp.zeros((), jnp.int32),
                jnp.zeros((), jnp.int32),
                tree,
                jnp.ones((), self.tree_dtype),
            )

    def _leaf(self, priorities: jax.Array) -> jax.Array:
        p = jnp.asarray(priorities, self.tree_dtype)
        return jnp.maximum(p**self.alpha, _floor(self.tree_dtype))

    def add(
        self, state: PriorityState, columns: Sequence[Any], priority: Any = None
    ) -> PriorityState:
        """Appends rows; they get ``priority`` (a scalar or one per row) or the running
        maximum. Negative, NaN or infinite priorities count as 0 (validate before calling,
        as :class:`~ostinato.device.PriorityReplayBuffer` does)."""
        arrays, rows, _ = self._columns(columns)
        if rows == 0:
            return state
        max_priority = state.max_priority
        if priority is None:
            leaves = jnp.broadcast_to(max_priority**self.alpha, (min(rows, self.capacity),))
        else:
            p = jnp.asarray(priority, self.tree_dtype).reshape(-1)
            if p.shape[0] not in (1, rows):
                raise ValueError(f"priority has {p.shape[0]} values for an insert of {rows} rows")
            p = jnp.where(jnp.isfinite(p) & (p >= 0), p, 0)
            max_priority = jnp.maximum(max_priority, jnp.max(p))
            p = jnp.broadcast_to(p, (rows,))[rows - min(rows, self.capacity) :]
            leaves = self._leaf(p)
        new_columns, slots, total, size = self._write(state, arrays, rows)
        tree = self._search.set_leaves(state.tree, slots, leaves)
        return PriorityState(new_columns, total, size, tree, max_priority)

    def sample(
        self, state: PriorityState, key: jax.Array, beta: Any = 0.4
    ) -> tuple[jax.Array, ...]:
        """``(indices, weights, *columns)``: stratified draws, with replacement, in
        proportion to ``priority ** alpha`` (``sample_size`` may exceed the size and the
        capacity); int32 row ids and float32 weights ``(p_i / p_min) ** -beta``."""
        self._check_sample(state)
        n, cap, tree = self.sample_size, self.capacity, state.tree
        dtype = tree.leaves.dtype
        strata = jnp.arange(1, n + 1, dtype=dtype) - jax.random.uniform(key, (n,), dtype)
        if self.search == "flat":
            found, low = flat.draw(tree, strata / n, cap)
        else:
            found = sum_tree.find(tree, strata * (sum_tree.total(tree) / n))
            low = sum_tree.minimum(tree)
        slots = found.astype(jnp.int32)
        weights = (low / tree.leaves[slots]) ** jnp.asarray(beta, dtype)
        newest = jnp.mod(state.total - 1, self.period)
        ids = jnp.mod(newest - jnp.mod(newest - slots, cap), self.period)
        return (ids, weights.astype(jnp.float32), *(c[slots] for c in state.columns))

    def update_priorities(
        self, state: PriorityState, indices: Any, priorities: Any
    ) -> PriorityState:
        """Sets priorities of sampled rows; ids of rows overwritten since are skipped, as are
        negative, NaN and infinite priorities; of repeated ids the last wins."""
        ids = jnp.asarray(indices).astype(jnp.int32).reshape(-1)
        p = jnp.asarray(priorities, self.tree_dtype).reshape(-1)
        if ids.shape[0] != p.shape[0]:
            raise ValueError(
                f"indices ({ids.shape[0]}) and priorities ({p.shape[0]}) differ in length"
            )
        age = jnp.mod(state.total - ids, self.period)  # 1 for the newest row
        live = (age >= 1) & (age <= state.size) & jnp.isfinite(p) & (p >= 0)
        max_priority = jnp.maximum(state.max_priority, jnp.max(jnp.where(live, p, 0)))
        slots = jnp.mod(ids, self.capacity)
        tree = self._search.set_leaves(state.tree, slots, self._leaf(p), keep=live)
        return state._replace(tree=tree, max_priority=max_priority)

    def reset(self, state: PriorityState) -> PriorityState:
        """An empty state; the running maximum goes back to 1 and ids keep counting."""
        columns = tuple(jnp.zeros_like(c) for c in state.columns)
        return PriorityState(
            columns,
            state.total,
            jnp.zeros((), jnp.int32),
            self._search.clear(state.tree),
            jnp.ones_like(state.max_priority),
        )

    def jit(self) -> JittedBuffer:
        """The same functions, jit-compiled, with the state donated where it is replaced."""
        return JittedBuffer(self)


_DONATING = ("add", "update_priorities", "reset")


@functools.cache
def compiled(buf: UniformBuffer | PriorityBuffer, name: str) -> Any:
    """``buf.<name>`` compiled with ``jax.jit`` (state donated where it is replaced), cached
    per configuration so that equal buffers share compilations. ``"sample_step"`` is
    ``sample`` fused with the key split: ``(state, key, ...) -> (next_key, sample)``."""
    uniform = isinstance(buf, UniformBuffer)
    static: tuple[str, ...] = ()
    if name == "sample_step" and uniform:

        def fn(
            state: Any, key: jax.Array, unique: bool = False, order_preserving: bool = False
        ) -> Any:
            key, sub = jax.random.split(key)
            return key, buf.sample(state, sub, unique, order_preserving)

    elif name == "sample_step":

        def fn(state: Any, key: jax.Array, beta: Any = 0.4) -> Any:  # type: ignore[misc]
            key, sub = jax.random.split(key)
            return key, buf.sample(state, sub, beta)

    else:
        fn = getattr(buf, name)
    if uniform and name in ("sample", "sample_step"):
        static = ("unique", "order_preserving")
    donate = (0,) if name in _DONATING else ()
    return jax.jit(fn, static_argnames=static, donate_argnums=donate)


class JittedBuffer:
    """A buffer's functions compiled with ``jax.jit``; the state is donated (updated in
    place) by ``add``, ``update_priorities`` and ``reset``, so do not reuse a state passed
    to them. Compilations are cached per configuration and shared between buffers.

    Args:
        buf: A :class:`UniformBuffer` or :class:`PriorityBuffer`.
    """

    def __init__(self, buf: UniformBuffer | PriorityBuffer) -> None:
        self.buffer = buf

    def init(self, device: Any = None) -> Any:
        """See the buffer's ``init``."""
        return self.buffer.init(device)

    def __getattr__(self, name: str) -> Any:
        if name in ("add", "sample", "update_priorities", "reset", "get"):
            if hasattr(self.buffer, name):
                return compiled(self.buffer, name)
        return getattr(self.buffer, name)


def _jax_specs(shapes: Sequence[Any], types: Sequence[Any], names: Any) -> tuple[ColumnSpec, ...]:
    specs = make_specs(shapes, types, names)
    if not jax.config.jax_enable_x64:
        for spec in specs:
            if spec.dtype in ("int64", "float64"):
                raise TypeError(
                    f"{spec.label}: dtype {spec.dtype} needs jax's x64 mode "
                    "(jax.config.update('jax_enable_x64', True)); without it jax would "
                    "silently store 32 bits"
                )
    return specs


def make_uniform_buffer(
    capacity: int,
    sample_size: int,
    shapes: Sequence[Any],
    types: Sequence[Any],
    names: Sequence[str] | None = None,
) -> UniformBuffer:
    """Pure functions of a uniform FIFO buffer (arguments as for
    :class:`~ostinato.device.UniformReplayBuffer`)."""
    cap = positive_int("capacity", capacity)
    n = positive_int("sample_size", sample_size)
    return UniformBuffer(cap, n, _jax_specs(shapes, types, names))


def make_priority_buffer(
    alpha: float,
    capacity: int,
    sample_size: int,
    shapes: Sequence[Any],
    types: Sequence[Any],
    names: Sequence[str] | None = None,
    tree_dtype: Any = None,
    search: str | None = None,
) -> PriorityBuffer:
    """Pure functions of a prioritized FIFO buffer (arguments as for
    :class:`~ostinato.device.PriorityReplayBuffer`). ``tree_dtype`` defaults to float64 when
    jax's x64 mode is on, else float32. ``search`` is ``"tree"`` or ``"flat"`` (see
    :class:`PriorityBuffer`); by default flat when jax's default backend is a GPU."""
    cap = positive_int("capacity", capacity)
    n = positive_int("sample_size", sample_size)
    if tree_dtype is None:
        tree_dtype = "float64" if jax.config.jax_enable_x64 else "float32"
    tree_dtype = dtype_name(tree_dtype)
    if tree_dtype not in ("float32", "float64"):
        raise ValueError(f"tree_dtype ({tree_dtype!r}) must be float32 or float64")
    if search is None:
        search = "flat" if jax.default_backend() in ("gpu", "cuda", "rocm") else "tree"
    if search not in ("tree", "flat"):
        raise ValueError(f"search ({search!r}) must be 'tree' or 'flat'")
    specs = _jax_specs(shapes, types, names)
    return PriorityBuffer(cap, n, specs, unit_float("alpha", alpha), tree_dtype, search)

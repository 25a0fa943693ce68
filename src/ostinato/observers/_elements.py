"""TF-Agents' ``as_dataset`` element pipeline on numpy batches, for numpy, PyTorch and JAX.

The source is :func:`ostinato.datasets.numpy` (its sampler fetches, decodes and stacks
items on background threads). On each sampled item this applies, in TF-Agents' order:
``SampleInfo`` fields repeated along the item's time axis, ``sequence_preprocess_fn`` on the
item's data, the cut into non-overlapping ``num_steps`` chunks (the tail is dropped), a
shuffle of the chunks, and batching with ``drop_remainder``. Arrays are converted to the
framework at the end (PyTorch shares their memory).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import optree

from ostinato.client import Client
from ostinato.core.specs import is_spec_like
from ostinato.datasets.iterator import numpy as numpy_iterator
from ostinato.replay_sample import SampleInfo


@dataclasses.dataclass(frozen=True)
class ElementPlan:
    """What a dataset yields; built by :meth:`ReplayBuffer.as_dataset`."""

    client: Client
    table: str
    sequence_length: int | None
    sample_batch_size: int | None
    num_steps: int | None  # None: no split
    preprocess: Callable[[Any], Any] | None
    data_spec: Any  # rebuilds the data structure; None: the sampler's
    sampler_kwargs: dict[str, Any]
    shuffle: bool
    seed: int | None = None

    @property
    def source_batch(self) -> int | None:
        """Items per source batch (None: one at a time, as items of unknown length must be
        when they are split): enough items for one batch of chunks."""
        b = self.sample_batch_size
        if self.num_steps is None:
            return b
        if self.sequence_length is None or b is None:
            return None
        return max(1, -(-b // (self.sequence_length // self.num_steps)))


def _rebuild(plan: ElementPlan) -> Callable[[list[np.ndarray]], Any] | None:
    if plan.data_spec is None:
        return None
    treedef = optree.tree_structure(plan.data_spec, is_leaf=is_spec_like, none_is_leaf=False)

    def rebuild(columns: list[np.ndarray]) -> Any:
        if len(columns) != treedef.num_leaves:
            raise ValueError(
                f"data_spec has {treedef.num_leaves} leaves, but items of table {plan.table!r} "
                f"have {len(columns)} columns"
            )
        return optree.tree_unflatten(treedef, columns)

    return rebuild


def _stacks(plan: ElementPlan) -> Iterator[tuple[list[np.ndarray], SampleInfo, Any]]:
    """Yields (flat data leaves [K, T, ...], info [K, T], treedef) per source batch."""
    rebuild = _rebuild(plan)
    k = plan.source_batch
    # Whole-item batches drop an incomplete last batch (TF-Agents' drop_remainder); chunks
    # of a last, smaller batch of items still go to the pool.
    it = numpy_iterator(
        plan.client,
        plan.table,
        k,
        flat=rebuild is not None,
        drop_remainder=k is not None and plan.num_steps is None,
        **plan.sampler_kwargs,
    )
    try:
        for sample in it:
            data = rebuild(sample.data) if rebuild is not None else sample.data
            info = sample.info
            if k is None:  # one item: give it a leading dimension of 1
                data = optree.tree_map(lambda x: np.asarray(x)[None], data, none_is_leaf=False)
                info = SampleInfo(*(np.asarray(a)[None] for a in info))
            leaves, treedef = optree.tree_flatten(data, none_is_leaf=False)
            if not leaves:
                raise ValueError(f"items of table {plan.table!r} have no columns")
            n = leaves[0].shape[0]
            length = leaves[0].shape[1] if leaves[0].ndim > 1 else None
            if length is None or any(x.ndim < 2 or x.shape[1] != length for x in leaves):
                raise ValueError(
                    f"items of table {plan.table!r} must have the same number of steps in every "
                    f"column (got shapes {[x.shape[1:] for x in leaves]})"
                )
            if plan.sequence_length is not None and length != plan.sequence_length:
                raise ValueError(
                    f"an item of table {plan.table!r} has {length} steps, but sequence_length "
                    f"is {plan.sequence_length}"
                )
            info = SampleInfo(*(np.repeat(np.asarray(a)[:, None], length, axis=1) for a in info))
            if plan.preprocess is not None:
                leaves, treedef = _preprocess(plan.preprocess, leaves, treedef, n)
            yield leaves, info, treedef
    finally:
        it.close()


def _preprocess(
    fn: Callable[[Any], Any], leaves: list[np.ndarray], treedef: Any, n: int
) -> tuple[list[np.ndarray], Any]:
    """``fn`` on each item's data (TF-Agents calls it per sequence), restacked."""
    outs = [fn(optree.tree_unflatten(treedef, [x[i] for x in leaves])) for i in range(n)]
    flat = [optree.tree_flatten(o, none_is_leaf=False) for o in outs]
    out_def = flat[0][1]
    columns = [np.stack([np.asarray(f[0][j]) for f in flat]) for j in range(len(flat[0][0]))]
    return columns, out_def


def _split(
    leaves: list[np.ndarray], info: SampleInfo, num_steps: int
) -> tuple[list[np.ndarray], SampleInfo]:
    """[K, T, ...] -> [K * (T // n), n, ...]: non-overlapping chunks, the tail dropped."""
    k, t = info.key.shape
    rows = t // num_steps
    keep = rows * num_steps

    def cut(x: np.ndarray) -> np.ndarray:
        return x[:, :keep].reshape(k * rows, num_steps, *x.shape[2:])

    return [cut(x) for x in leaves], SampleInfo(*(cut(a) for a in info))


def elements(plan: ElementPlan) -> Iterator[tuple[Any, SampleInfo]]:
    """Yields ``(data, info)`` elements as TF-Agents' ``as_dataset`` does, in numpy."""
    b = plan.sample_batch_size
    rng = np.random.default_rng(plan.seed)
    pool: list[np.ndarray] | None = None
    pool_info: list[np.ndarray] | None = None
    treedef = None
    for leaves, info, treedef in _stacks(plan):
        if plan.num_steps is None:
            if b is None:  # one whole item
                yield (
                    optree.tree_unflatten(treedef, [x[0] for x in leaves]),
                    SampleInfo(*(a[0] for a in info)),
                )
            else:
                yield optree.tree_unflatten(treedef, leaves), info
            continue
        leaves, info = _split(leaves, info, plan.num_steps)
        if plan.shuffle and len(info.key) > 1:
            order = rng.permutation(len(info.key))
            leaves = [x[order] for x in leaves]
            info = SampleInfo(*(a[order] for a in info))
        if pool is None or pool_info is None:
            pool, pool_info = leaves, list(info)
        else:
            pool = [np.concatenate([p, x]) for p, x in zip(pool, leaves)]
            pool_info = [np.concatenate([p, a]) for p, a in zip(pool_info, info)]
        take = 1 if b is None else b
        start = 0
        while len(pool_info[0]) - start >= take:
            end = start + take
            if b is None:
                yield (
                    optree.tree_unflatten(treedef, [x[start] for x in pool]),
                    SampleInfo(*(a[start] for a in pool_info)),
                )
            else:
                yield (
                    optree.tree_unflatten(treedef, [x[start:end] for x in pool]),
                    SampleInfo(*(a[start:end] for a in pool_info)),
                )
            start = end
        if start:
            pool = [x[start:] for x in pool]
            pool_info = [a[start:] for a in pool_info]


# -- frameworks ---------------------------------------------------------------------------------
class NumpyDataset:
    """An iterable of ``(data, info)`` numpy elements; each ``iter()`` starts a new stream."""

    def __init__(self, plan: ElementPlan):
        self.plan = plan

    def _convert(self, element: tuple[Any, SampleInfo]) -> tuple[Any, SampleInfo]:
        return element

    def __iter__(self) -> Iterator[tuple[Any, SampleInfo]]:
        return map(self._convert, elements(self.plan))


class JaxDataset(NumpyDataset):
    """``data`` put on a JAX device (one ``device_put`` per element); ``info`` stays numpy
    (keys are uint64, which JAX truncates unless ``jax_enable_x64`` is set)."""

    def __init__(self, plan: ElementPlan, device: Any = None):
        import jax

        super().__init__(plan)
        self._jax = jax
        self.device = device if device is not None else jax.devices()[0]

    def _convert(self, element: tuple[Any, SampleInfo]) -> tuple[Any, SampleInfo]:
        data, info = element
        leaves, treedef = optree.tree_flatten(data, none_is_leaf=False)
        numeric = [i for i, x in enumerate(leaves) if x.dtype.kind != "O"]
        moved = self._jax.device_put([leaves[i] for i in numeric], self.device)
        for i, m in zip(numeric, moved):
            leaves[i] = m
        return optree.tree_unflatten(treedef, leaves), info


def torch_dataset(plan: ElementPlan, device: Any = None) -> Any:
    """A ``torch.utils.data.IterableDataset`` of ``(data, info)`` tensor elements."""
    from ostinato.observers._torch_elements import TorchElements

    return TorchElements(plan, device)

"""TF-Agents' ``as_dataset`` pipeline as ``tf.data`` on :class:`ostinato.TrajectoryDataset`.

Imported only for ``as_dataset(framework="tf")``.
"""

from __future__ import annotations

from typing import Any

import optree
import tensorflow as tf

from ostinato.core.specs import TensorSpec, is_spec_like
from ostinato.datasets.tf_dataset import TrajectoryDataset
from ostinato.observers._elements import ElementPlan
from ostinato.replay_sample import SampleInfo


def _repeat_info(sample: Any) -> tuple[Any, SampleInfo]:
    info, data = sample
    first = tf.nest.flatten(data)[0]
    length = first.shape[0] or tf.shape(first)[0]
    # tf.repeat has no uint64 kernel: repeat keys through their bit pattern.
    key = tf.bitcast(tf.repeat(tf.bitcast(info.key, tf.int64), [length]), tf.uint64)
    rest = [tf.repeat(t, [length]) for t in info[1:]]
    return data, SampleInfo(key, *rest)


def _cut(num_steps: int) -> Any:
    def cut(data: Any, info: Any) -> Any:
        both = (data, info)
        first = tf.nest.flatten(both)[0]
        static = first.shape[0]
        rows = static // num_steps if static is not None else tf.shape(first)[0] // num_steps

        def reshape(t: tf.Tensor) -> tf.Tensor:
            out = tf.reshape(
                t[: rows * num_steps], tf.concat(([rows, num_steps], tf.shape(t)[1:]), axis=0)
            )
            out.set_shape([rows if static is not None else None, num_steps] + t.shape[1:])
            return out

        return tf.nest.map_structure(reshape, both)

    return cut


def tf_dataset(
    plan: ElementPlan, num_parallel_calls: int | None, shuffle_size: int
) -> tf.data.Dataset:
    """The ``tf.data.Dataset`` of ``(data, info)`` elements TF-Agents' buffer builds."""
    kwargs = dict(plan.sampler_kwargs)
    inflight = kwargs.pop("max_in_flight_samples_per_worker", None) or 2 * (plan.source_batch or 50)
    if plan.data_spec is not None:
        specs = optree.tree_map(
            TensorSpec.from_spec, plan.data_spec, is_leaf=is_spec_like, none_is_leaf=False
        )
        dtypes = optree.tree_map(
            lambda s: tf.as_dtype(s.dtype), specs, is_leaf=is_spec_like, none_is_leaf=False
        )
        shapes = optree.tree_map(
            lambda s: tf.TensorShape((plan.sequence_length, *s.shape)),
            specs,
            is_leaf=is_spec_like,
            none_is_leaf=False,
        )
        ds = TrajectoryDataset(plan.client, plan.table, dtypes, shapes, inflight, **kwargs)
    else:
        ds = TrajectoryDataset.from_table_signature(plan.client, plan.table, inflight, **kwargs)
    calls = num_parallel_calls or tf.data.AUTOTUNE
    ds = ds.map(_repeat_info, num_parallel_calls=calls)
    if plan.preprocess is not None:
        fn = plan.preprocess
        ds = ds.map(lambda data, info: (fn(data), info), num_parallel_calls=calls)
    if plan.num_steps is not None:
        ds = ds.map(_cut(plan.num_steps), num_parallel_calls=calls).unbatch()
        if plan.shuffle:
            ds = ds.shuffle(shuffle_size, seed=plan.seed)
    options = tf.data.Options()
    options.deterministic = not plan.shuffle
    if hasattr(options, "experimental_allow_stateful"):  # as TF-Agents does
        options.experimental_allow_stateful = True
    ds = ds.with_options(options)
    if plan.sample_batch_size:
        ds = ds.batch(plan.sample_batch_size, drop_remainder=True)
    return ds

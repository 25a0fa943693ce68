"""``PatternDataset``: structured-writer configs applied to a ``tf.data`` dataset of steps.

Reverb's ``reverb.PatternDataset`` (used by RLDS's ``pattern_map``): each step of the input
dataset is appended as to a :class:`~ostinato.writers.structured_writer.StructuredWriter`, and
the items the configs would create become the elements, in order, without a server. The same
:class:`~ostinato.writers.structured_writer.PatternEngine` decides when items are made, so a
dataset and a writer given the same configs and steps produce the same items.

This module imports TensorFlow; ``ostinato`` loads it only when ``PatternDataset`` is first
used.

Differences from Reverb (checked against dm-reverb 0.14):

* Each config needs only the history its own pattern reads. Reverb added to every config a
  condition on the longest pattern among the configs listed before it (and modified the configs
  given), so a short end-of-episode config listed after a long one silently made nothing for
  short episodes, and the output depended on the order of the configs.
* Invalid configs raise ``ValueError`` (Reverb's kernel could abort the process).
* Element shapes of strided slices are right (``x[-5::2]`` is 3 steps; Reverb declared 2).
* Patterns with lists work (as tuples); Reverb's dataset failed on them.
"""

from __future__ import annotations

import functools
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
import optree
import tensorflow as tf

from ostinato.datasets.tf_dataset import WrappedDataset, lists_to_tuples
from ostinato.replay_sample import ReplaySample, SampleInfo
from ostinato.writers.pattern_validation import CompiledConfig, infer_signature
from ostinato.writers.structured_writer import PatternEngine


class PatternDataset(WrappedDataset):
    """A ``tf.data.Dataset`` of the items that ``configs`` make from the steps of a dataset.

    Args:
      input_dataset: a dataset of steps (flatten a dataset of episodes first).
      configs: structured-writer configs (see :mod:`ostinato.structured_writer`); all must
        have the same pattern structure and table, as they describe one signature.
      respect_episode_boundaries: with True the history is cleared at the end of each episode,
        so no item mixes steps of two episodes.
      is_end_of_episode: maps a step to a scalar ``tf.bool``, True for an episode's last step.

    Example:
      >>> step = sw.create_reference_step(steps.element_spec)
      >>> config = sw.create_config({"obs": step["obs"][-2], "next": step["obs"][-1]}, "t")
      >>> pairs = PatternDataset(steps, [config], True, lambda s: s["is_last"])

    Raises:
      ValueError: an invalid config, configs with different structures or tables, or an
        ``is_end_of_episode`` that does not return a scalar bool.
    """

    def __init__(
        self,
        input_dataset: tf.data.Dataset,
        configs: Sequence[Any],
        respect_episode_boundaries: bool,
        is_end_of_episode: Callable[[Any], Any],
    ):
        configs = list(configs)
        PatternEngine(configs)  # validates before anything is built
        # tf.data has no list structures: lists become tuples (Reverb's dataset failed on them).
        signature = lists_to_tuples(infer_signature(configs, input_dataset.element_spec))
        treespec = optree.tree_structure(
            signature, is_leaf=lambda x: hasattr(x, "dtype"), none_is_leaf=True
        )
        specs = [
            tf.TensorSpec(s.shape, tf.as_dtype(s.dtype))
            for s in optree.tree_leaves(
                signature, is_leaf=lambda x: hasattr(x, "dtype"), none_is_leaf=True
            )
        ]
        ends = input_dataset.map(is_end_of_episode)
        if not isinstance(
            ends.element_spec, tf.TensorSpec
        ) or not ends.element_spec.is_compatible_with(tf.TensorSpec([], tf.bool)):
            raise ValueError(
                "Invalid `is_end_of_episode`. `is_end_of_episode` must return `bool`, but its "
                f"return type is {ends.element_spec}."
            )
        steps = tf.data.Dataset.zip((input_dataset, ends))
        generator = functools.partial(_generate, steps, configs, bool(respect_episode_boundaries))
        flat = tf.data.Dataset.from_generator(generator, output_signature=tuple(specs))
        self._wrap(
            flat.map(lambda *cols: optree.tree_unflatten(treespec, list(cols))),
            optree.tree_unflatten(treespec, specs),
        )


def pattern_dataset_with_info(
    input_dataset: tf.data.Dataset,
    configs: Sequence[Any],
    respect_episode_boundaries: bool,
    is_end_of_episode: Callable[[Any], Any],
) -> tf.data.Dataset:
    """:class:`PatternDataset` whose elements are ``ReplaySample(info, data)``, ``info`` all
    zeros (with Reverb's sample-info dtypes)."""
    dataset = PatternDataset(input_dataset, configs, respect_episode_boundaries, is_end_of_episode)
    dtypes = SampleInfo.tf_dtypes()

    def with_info(data: Any) -> ReplaySample:
        return ReplaySample(info=SampleInfo(*(tf.zeros([], d) for d in dtypes)), data=data)

    return dataset.map(with_info)


def _generate(
    steps: tf.data.Dataset, configs: list[Any], clear_buffers: bool
) -> Iterator[tuple[np.ndarray, ...]]:
    engine = PatternEngine(configs)
    buffers: dict[int, deque[Any]] = {c: deque(maxlen=age) for c, age in engine.column_ages.items()}
    ready: list[tuple[np.ndarray, ...]] = []

    def make_item(config: CompiledConfig) -> bool:
        columns = []
        for column, key in config.nodes:
            if isinstance(key, slice):
                values = list(buffers[column])[key]
                if any(v is None for v in values):
                    return False
                columns.append(np.stack(values))
            else:
                value = buffers[column][key]
                if value is None:
                    return False
                columns.append(value)
        ready.append(tuple(columns))
        return True

    paths: list[Any] | None = None
    for step, end in steps.as_numpy_iterator():
        leaves = tf.nest.flatten(step)
        if paths is None:
            engine.check_width(len(leaves))
            paths = [tuple(p) for p in optree.tree_paths(step, none_is_leaf=True)]
        engine.check_values(leaves, paths)
        for column, buffer in buffers.items():
            buffer.append(leaves[column])
        engine.note_append(leaves, False)
        engine.apply(False, make_item)
        if end:
            engine.apply(True, make_item)
            engine.end_episode(clear_buffers)
            if clear_buffers:
                for buffer in buffers.values():
                    buffer.clear()
        yield from ready
        ready.clear()

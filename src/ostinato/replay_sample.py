"""Sampled items as Reverb returns them (Reverb's ``reverb.replay_sample``): ``SampleInfo`` and
``ReplaySample``."""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np


class SampleInfo(NamedTuple):
    """What the table reported about a sampled item.

    ``probability`` is the probability the sampler gave the item; ``table_size`` the number of
    items at sampling time; ``times_sampled`` counts this sample too. In a batched sample each
    field is a numpy array.

    ``times_sampled`` defaults to ``0`` so that code written for Reverb 0.7, whose
    ``SampleInfo`` had only the first four fields (Acme 0.4: ``SampleInfo(key, probability,
    table_size, priority)``), still builds one. A sampled item always reports ``>= 1``, so
    ``0`` reads as "not reported".
    """

    key: Any
    probability: Any
    table_size: Any
    priority: Any
    times_sampled: Any = 0

    @staticmethod
    def tf_dtypes():  # pragma: no cover - needs TensorFlow
        import tensorflow as tf

        return SampleInfo(tf.uint64, tf.double, tf.int64, tf.double, tf.int32)

    @staticmethod
    def tf_shapes():  # pragma: no cover - needs TensorFlow
        import tensorflow as tf

        return SampleInfo(*([tf.TensorShape([])] * 5))

    @staticmethod
    def zeros() -> SampleInfo:
        return SampleInfo(0, 0.0, 0, 0.0, 0)

    @staticmethod
    def numpy_dtypes() -> SampleInfo:
        """numpy dtypes of the fields in batched form."""
        return SampleInfo(
            np.dtype(np.uint64),
            np.dtype(np.float64),
            np.dtype(np.int64),
            np.dtype(np.float64),
            np.dtype(np.int32),
        )


class ReplaySample(NamedTuple):
    """A sampled item (or batch of items): ``info`` and ``data``."""

    info: SampleInfo
    data: Any


__all__ = ["ReplaySample", "SampleInfo"]

"""Reverb's value types, as the public module ``ostinato.types`` (and ``reverb.replay_sample``
/ ``reverb.reverb_types`` under :func:`ostinato.install_as_reverb`).

The types live where they are made -- :mod:`ostinato.core.specs` (``TensorSpec``),
:mod:`ostinato.core.table_info` (``TableInfo`` and its parts) and :mod:`ostinato.replay_sample`
(``SampleInfo``, ``ReplaySample``); this module only gathers them under their public names.

It also holds the aliases that Reverb's ``reverb_types`` has had since Reverb 0.7 and that
typed Reverb programs (Acme's ``reverb_utils``) name: the selector classes ``Fifo``, ``Heap``,
``Lifo``, ``Prioritized`` and ``Uniform``, ``SelectorType`` (any of them) and ``SpecNest`` (a
nest of tensor specs, as a table's ``signature``).
"""

from collections.abc import Iterable, Mapping
from typing import Union

from ostinato.core.selectors import Fifo, Lifo, Prioritized, Uniform
from ostinato.core.selectors import HeapSelector as Heap
from ostinato.core.specs import TensorSpec
from ostinato.core.table_info import (
    HeapOptions,
    KeyDistributionOptions,
    PrioritizedOptions,
    RateLimiterCallStats,
    RateLimiterInfo,
    TableInfo,
    TableWorkerTime,
)
from ostinato.replay_sample import ReplaySample, SampleInfo

#: Any item selector (``reverb_types.SelectorType``): what ``Table`` takes as sampler/remover.
SelectorType = Union[Fifo, Heap, Lifo, Prioritized, Uniform]

#: A nest of tensor specs (``reverb_types.SpecNest``): a ``TensorSpec`` (or a TensorFlow
#: ``tf.TensorSpec``, accepted by duck typing), or sequences / mappings of them.
SpecNest = Union[TensorSpec, Iterable["SpecNest"], Mapping[str, "SpecNest"]]

__all__ = [
    "Fifo",
    "Heap",
    "Lifo",
    "Prioritized",
    "SelectorType",
    "SpecNest",
    "Uniform",
    "HeapOptions",
    "KeyDistributionOptions",
    "PrioritizedOptions",
    "RateLimiterCallStats",
    "RateLimiterInfo",
    "ReplaySample",
    "SampleInfo",
    "TableInfo",
    "TableWorkerTime",
    "TensorSpec",
]

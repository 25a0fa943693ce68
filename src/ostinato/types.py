"""Reverb's value types, as the public module ``ostinato.types`` (and ``reverb.replay_sample``
/ ``reverb.reverb_types`` under :func:`ostinato.install_as_reverb`).

The types live where they are made -- :mod:`ostinato.core.specs` (``TensorSpec``),
:mod:`ostinato.core.table_info` (``TableInfo`` and its parts) and :mod:`ostinato.replay_sample`
(``SampleInfo``, ``ReplaySample``); this module only gathers them under their public names.
"""

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

__all__ = [
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

"""Datasets: prefetching, batched streams of sampled items for every framework.

Importing this package loads no framework. Each adapter imports its framework when it is
first used:

* :func:`numpy` — a plain iterator of numpy batches (no framework).
* :class:`TrajectoryDataset`, :class:`TimestepDataset` — ``tf.data`` datasets with Reverb's
  constructor arguments (TensorFlow).
* :class:`TFClient` — Reverb's TF-op client (``sample``, ``insert``, ``update_priorities``),
  usable inside ``tf.function`` (TensorFlow).
* :class:`TorchDataset` — a ``torch.utils.data.IterableDataset`` of torch tensor batches
  (PyTorch).
* :class:`JaxIterator` — batches put on a JAX device ahead of the consumer (JAX).
* :class:`SampleStream` — the framework-free engine under all of them (``Sampler`` and
  ``SamplerOptions`` are the older names of :class:`SampleStream` and :class:`StreamOptions`).

Example:
  >>> import ostinato
  >>> for batch in ostinato.datasets.numpy(client, "replay", batch_size=256):
  ...     batch.data["obs"].shape   # (256, 10, 64)
"""

from __future__ import annotations

import importlib
from typing import Any

from ostinato.datasets.iterator import NumpyIterator, numpy
from ostinato.datasets.options import StreamOptions
from ostinato.datasets.stream import SampleStream

#: Older names (kept so that existing code keeps working).
Sampler = SampleStream
SamplerOptions = StreamOptions

_LAZY = {
    "TrajectoryDataset": "ostinato.datasets.tf_dataset",
    "TimestepDataset": "ostinato.datasets.tf_dataset",
    "TFClient": "ostinato.datasets.tf_client",
    "TorchDataset": "ostinato.datasets.torch_dataset",
    "JaxIterator": "ostinato.datasets.jax_iterator",
    "PatternDataset": "ostinato.datasets.pattern_dataset",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'ostinato.datasets' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


__all__ = [
    "JaxIterator",
    "NumpyIterator",
    "PatternDataset",
    "SampleStream",
    "Sampler",
    "SamplerOptions",
    "StreamOptions",
    "TFClient",
    "TimestepDataset",
    "TorchDataset",
    "TrajectoryDataset",
    "numpy",
]

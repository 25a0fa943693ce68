"""``ReplayBuffer.as_dataset(framework="torch")``: elements as torch tensors.

This module imports PyTorch; it is loaded only when a torch dataset is asked for.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import numpy as np
import optree
import torch
from torch.utils.data import IterableDataset, get_worker_info

from ostinato.datasets.torch_dataset import network_client
from ostinato.observers._elements import ElementPlan, elements
from ostinato.replay_sample import SampleInfo


class TorchElements(IterableDataset):
    """``(data, info)`` elements as torch tensors (CPU tensors share the numpy memory).

    Give ``DataLoader`` ``batch_size=None``: elements are already batches. In ``DataLoader``
    worker processes the server is reached over gRPC at its address (prefer
    ``multiprocessing_context="spawn"``), and each worker samples its own stream.
    """

    def __init__(self, plan: ElementPlan, device: Any = None):
        super().__init__()
        self.plan = plan
        self.device = None if device is None else torch.device(device)
        if self.device is not None and self.device.type == "cuda" and not torch.cuda.is_available():
            raise ValueError(
                f"device ({device!r}) needs CUDA, but torch.cuda.is_available() is False"
            )

    def _tensor(self, a: Any) -> Any:
        a = np.asarray(a)
        if a.dtype.kind == "O":  # strings stay numpy (torch has no string tensor)
            return a
        t = torch.from_numpy(np.ascontiguousarray(a))
        return t if self.device is None else t.to(self.device)

    def __iter__(self) -> Iterator[tuple[Any, SampleInfo]]:
        plan = self.plan
        if get_worker_info() is not None:
            plan = dataclasses.replace(plan, client=network_client(plan.client))
        for data, info in elements(plan):
            yield (
                optree.tree_map(self._tensor, data, none_is_leaf=False),
                SampleInfo(*map(self._tensor, info)),
            )

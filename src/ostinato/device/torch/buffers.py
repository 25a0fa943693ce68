"""The torch implementations of the two MindSpore-style buffers (CPU and CUDA)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from ostinato.device._checks import distinct_rows_fit
from ostinato.device.priority import PriorityReplayBuffer
from ostinato.device.torch.prioritized import make_prioritized_sampler
from ostinato.device.torch.sampler import UniformSampler
from ostinato.device.torch.storage import TensorStorage
from ostinato.device.uniform import UniformReplayBuffer


class _StorageAndSampler:
    """What both torch buffers do the same way, through their :attr:`storage` (a
    :class:`~ostinato.device.torch.TensorStorage`) and :attr:`sampler`."""

    storage: TensorStorage
    sampler: Any

    def get_item(self, index: int) -> tuple[torch.Tensor, ...]:
        return self.storage.read(index)

    def reset(self) -> bool:
        self.storage.reset()
        self.sampler.reset()
        return True

    def size(self) -> int:
        return self.storage.ring.size

    def state_dict(self) -> dict[str, Any]:
        return {"storage": self.storage.state_dict(), "sampler": self.sampler.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.storage.load_state_dict(state["storage"])
        self.sampler.load_state_dict(state["sampler"])


class TorchUniformReplayBuffer(_StorageAndSampler, UniformReplayBuffer):
    """:class:`~ostinato.device.UniformReplayBuffer` on a torch device.

    Built from two composable pieces: :attr:`storage` (a
    :class:`~ostinato.device.torch.TensorStorage`) and :attr:`sampler` (a
    :class:`~ostinato.device.torch.UniformSampler`). Arguments are those of
    :class:`~ostinato.device.UniformReplayBuffer`.
    """

    def __init__(
        self,
        sample_size: int,
        capacity: int,
        shapes: Sequence[Any],
        types: Sequence[Any],
        **kwargs: Any,
    ) -> None:
        super().__init__(sample_size, capacity, shapes, types, **kwargs)
        self.storage = TensorStorage(self.capacity, self.specs, kwargs.get("device"))
        self.device = self.storage.device
        self.sampler = UniformSampler(self.device, self.seed)

    def insert(self, exp: Sequence[Any]) -> None:
        storage = self.storage
        tensors, rows, single = storage.prepare(exp)
        storage.write(tensors, rows, single)

    def sample(
        self, *, unique: bool = False, order_preserving: bool = False
    ) -> tuple[torch.Tensor, ...]:
        if unique and self.storage.ring.size:
            distinct_rows_fit(self.sample_size, self.storage.ring.size)
        slots = self.sampler.slots(
            self.storage.ring, self.sample_size, unique=unique, ordered=order_preserving
        )
        return self.storage.gather(slots)


class TorchPriorityReplayBuffer(_StorageAndSampler, PriorityReplayBuffer):
    """:class:`~ostinato.device.PriorityReplayBuffer` on a torch device.

    Built from :attr:`storage` (a :class:`~ostinato.device.torch.TensorStorage`) and
    :attr:`sampler` (a :class:`~ostinato.device.torch.PrioritizedSampler` holding the sum
    and min trees). Arguments are those of :class:`~ostinato.device.PriorityReplayBuffer`,
    plus ``kernels`` choosing how priorities are searched: ``"numpy"`` or ``"torch"`` (a
    sum tree, see :mod:`~ostinato.device.torch.kernels`) or ``"triton"`` (flat leaves and
    fused kernels, see :mod:`~ostinato.device.torch.fused`). The default is numpy on the
    CPU, triton on CUDA when Triton is installed, else torch.
    """

    def __init__(
        self,
        alpha: float,
        capacity: int,
        sample_size: int,
        shapes: Sequence[Any],
        types: Sequence[Any],
        *,
        kernels: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(alpha, capacity, sample_size, shapes, types, **kwargs)
        self.storage = TensorStorage(self.capacity, self.specs, kwargs.get("device"))
        self.device = self.storage.device
        self.sampler = make_prioritized_sampler(
            self.capacity,
            self.alpha,
            self.device,
            self.seed,
            validate=self.validate,
            kernels=kernels,
        )

    def insert(self, *transition: Any, priority: Any = None) -> None:
        storage = self.storage
        tensors, rows, single = storage.prepare(self._transition(transition))
        # Validate everything before writing anything, so a bad insert leaves no trace.
        leaves = self.sampler.new_leaves(priority, rows)
        self.sampler.on_write(storage.write(tensors, rows, single), leaves)

    def sample(self, beta: float | None = None) -> tuple[torch.Tensor, ...]:
        ids, weights, slots = self.sampler.sample(
            self.storage.ring, self.sample_size, self._beta(beta)
        )
        return (ids, weights, *self.storage.gather(slots))

    def update_priorities(self, indices: Any, priorities: Any) -> None:
        self.sampler.update(self.storage.ring, indices, priorities)

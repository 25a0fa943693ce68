"""Uniform slot sampler for :class:`~ostinato.device.torch.storage.TensorStorage`."""

from __future__ import annotations

from typing import Any

import torch

from ostinato.device._checks import distinct_rows_fit
from ostinato.device.ring import RingCursor
from ostinato.device.torch.device import make_generator, resolve_device


class UniformSampler:
    """Draws physical slots uniformly from the rows a ring currently holds.

    Everything it needs from the ring (size, where the oldest row sits) is a host integer,
    so a draw is a handful of device ops with no synchronisation, except ``unique=True`` on
    the CPU, which may inspect its draw (free there) to avoid an O(size) permutation.

    Args:
        device: Device of the storage being sampled.
        seed: Seed for the sampler's own generator; ``None`` seeds from the OS.
    """

    def __init__(self, device: Any = None, seed: int | None = None) -> None:
        self.device = resolve_device(device)
        self.generator = make_generator(self.device, seed)

    def logical(
        self, ring: RingCursor, count: int, *, unique: bool = False, ordered: bool = False
    ) -> torch.Tensor:
        """Draws ``count`` logical indices in ``[0, ring.size)``; with replacement unless
        ``unique``, so ``count`` may exceed the size and the capacity.

        Args:
            ring: The cursor of the storage being sampled.
            count: How many indices.
            unique: Draw without replacement.
            ordered: Return them sorted (oldest first).

        Returns:
            A long tensor of ``count`` logical indices on the sampler's device.

        Raises:
            IndexError: If the ring is empty.
            ValueError: If ``unique`` and ``count`` exceeds the rows held.
        """
        size = ring.size
        if size == 0:
            raise IndexError("cannot sample from an empty buffer")
        gen, dev = self.generator, self.device
        if not unique:
            draw = torch.randint(0, size, (count,), generator=gen, device=dev)
        else:
            distinct_rows_fit(count, size, name="count")
            draw = self._distinct(size, count)
        if ordered:
            draw = torch.sort(draw).values
        return draw

    def _distinct(self, size: int, count: int) -> torch.Tensor:
        gen, dev = self.generator, self.device
        if dev.type == "cpu" and count * count < size:
            # Draws with replacement that happen to be distinct are a uniform draw without
            # replacement; on the CPU checking costs no sync. Likely when count**2 << size.
            draw = torch.randint(0, size, (count,), generator=gen, device=dev)
            if torch.unique(draw).numel() == count:
                return draw
        return torch.randperm(size, generator=gen, device=dev)[:count]

    def slots(
        self, ring: RingCursor, count: int, *, unique: bool = False, ordered: bool = False
    ) -> torch.Tensor:
        """Like :meth:`logical`, mapped to physical slots of the storage."""
        draw = self.logical(ring, count, unique=unique, ordered=ordered)
        start = ring.oldest_id % ring.capacity
        if start == 0 or (ring.size == ring.capacity and not ordered):
            # Every slot in [0, size) is held (and in order), or the ring is full and order
            # does not matter: a uniform logical draw is already a uniform slot draw.
            return draw
        return torch.remainder(draw + start, ring.capacity)

    def reset(self) -> None:
        """Nothing to forget: uniform draws keep no per-row state (the random stream goes on)."""

    def state_dict(self) -> dict[str, Any]:
        """Returns the generator state."""
        return {"generator": self.generator.get_state()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restores :meth:`state_dict` output."""
        self.generator.set_state(state["generator"])

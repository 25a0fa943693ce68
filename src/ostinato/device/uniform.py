"""``UniformReplayBuffer``: MindSpore RL's device-resident uniform buffer, corrected."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ostinato.device.base import DeviceBuffer


class UniformReplayBuffer(DeviceBuffer):
    """A fixed-capacity FIFO replay buffer held on an accelerator, sampled uniformly.

    The API is MindSpore RL's ``UniformReplayBuffer``; the behaviour is what MindSpore's
    documentation promises rather than what its kernels do (see the QUIRK notes in the
    design reference): a batch insert that wraps keeps exactly its newest rows, ``reset``
    really empties the buffer, out-of-range ``get_item`` raises, and the newest row is
    sampled as often as any other.

    ``UniformReplayBuffer(...)`` returns the subclass for ``backend`` (torch or jax); the
    framework is imported only then.

    Args:
        sample_size: Rows returned by :meth:`sample`. It may exceed ``capacity`` (and the
            rows held): sampling is with replacement.
        capacity: Rows held; the oldest is overwritten when full.
        shapes: One element shape per column, without the capacity dimension.
        types: One dtype per column (strings, numpy, torch, jax or MindSpore dtypes).
        names: Optional column names, used in error messages.
        device: Where the buffer lives: a torch device (``"cuda:0"``) or a jax device or
            platform (``"gpu"``). ``None`` is the framework's default device. A device that
            is not present raises; there is no silent CPU fallback.
        seed: Seed for sampling; ``None`` seeds from the OS.
        backend: ``"torch"`` or ``"jax"``.

    Raises:
        ValueError: For a non-positive ``capacity``/``sample_size``, malformed shapes, an
            unknown backend or a missing device.
        TypeError: For unsupported dtypes or ``shapes``/``types`` that are not lists.

    Example:
        >>> import torch
        >>> buf = UniformReplayBuffer(2, 100, [(4,), ()], [torch.float32, torch.int64])
        >>> buf.insert([torch.zeros(4), torch.tensor(3)])       # one transition
        >>> buf.insert([torch.ones(8, 4), torch.arange(8)])     # a batch of 8
        >>> buf.size(), buf.get_item(-1)[1].item()
        (9, 7)
        >>> obs, action = buf.sample()
        >>> obs.shape
        torch.Size([2, 4])
    """

    _KIND = "uniform"

    def __init__(
        self,
        sample_size: int,
        capacity: int,
        shapes: Sequence[Any],
        types: Sequence[Any],
        *,
        names: Sequence[str] | None = None,
        device: Any = None,
        seed: int | None = None,
        backend: str = "torch",
    ) -> None:
        self._init_common(capacity, sample_size, shapes, types, names, seed, backend)

    def insert(self, exp: Sequence[Any]) -> None:
        """Appends one transition, or a batch of them, overwriting the oldest rows when full.

        Args:
            exp: One value per column: all of element shape (one transition), or all with
                the same leading batch dimension. Tensors and typed arrays must have the
                column's dtype; Python scalars and lists are converted to it.

        Raises:
            ValueError: Wrong number of columns, or a shape that is neither an element nor a
                batch of elements, or columns with different batch sizes. The message names
                the column.
            TypeError: A dtype differing from the column's. The message names the column.
        """
        raise NotImplementedError

    def sample(self, *, unique: bool = False, order_preserving: bool = False) -> tuple[Any, ...]:
        """Draws ``sample_size`` stored transitions uniformly, with replacement.

        ``sample_size`` may exceed ``size()`` and ``capacity``: rows then repeat.

        Args:
            unique: Draw without replacement (requires ``size() >= sample_size``).
            order_preserving: Return rows oldest first instead of in random order.

        Returns:
            One array per column, shaped ``(sample_size, *element_shape)``.

        Raises:
            IndexError: If the buffer is empty.
            ValueError: If ``unique`` and fewer than ``sample_size`` rows are stored (the
                message quotes ``sample_size`` and ``size()``).
        """
        raise NotImplementedError

    def reset(self) -> bool:
        """Empties the buffer (size 0, storage zeroed) and returns ``True``."""
        raise NotImplementedError

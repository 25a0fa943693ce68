"""What every device-resident buffer shares: backend dispatch, the checked common arguments,
and the parts of the MindSpore-style API that do not depend on the sampling rule."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ostinato.device._checks import optional_seed
from ostinato.device._dispatch import backend_class
from ostinato.device.spec import ColumnSpec, make_specs
from ostinato.validate import positive_int


class DeviceBuffer:
    """Base of :class:`~ostinato.device.UniformReplayBuffer` and
    :class:`~ostinato.device.PriorityReplayBuffer`.

    Constructing one of those public classes returns its subclass for ``backend`` (torch or
    jax): a public class names its kind in ``_KIND``, the backend classes inherit it. The
    framework is imported only then.
    """

    #: ``"uniform"`` or ``"priority"``, set on the public classes only.
    _KIND: str = ""

    def __new__(cls, *args: Any, backend: str = "torch", **kwargs: Any) -> Any:
        if "_KIND" in cls.__dict__:  # a public class: pick its backend's subclass
            cls = backend_class(cls._KIND, backend)
        return super().__new__(cls)

    def _init_common(
        self,
        capacity: int,
        sample_size: int,
        shapes: Sequence[Any],
        types: Sequence[Any],
        names: Sequence[str] | None,
        seed: int | None,
        backend: str,
    ) -> None:
        self.capacity = positive_int("capacity", capacity)
        self.sample_size = positive_int("sample_size", sample_size)
        self.specs: tuple[ColumnSpec, ...] = make_specs(shapes, types, names)
        self.seed = optional_seed(seed)
        self.backend = backend

    def get_item(self, index: int) -> tuple[Any, ...]:
        """Returns a copy of one stored transition.

        Args:
            index: Logical index: 0 is the oldest row, ``size() - 1`` the newest, and
                negative values count back from the newest.

        Raises:
            IndexError: If ``index`` is out of range.
        """
        raise NotImplementedError

    def reset(self) -> bool:
        """Empties the buffer and returns ``True``."""
        raise NotImplementedError

    def size(self) -> int:
        """Number of rows stored, as a host ``int`` (no device synchronisation)."""
        raise NotImplementedError

    def full(self) -> bool:
        """Whether ``size() == capacity``, as a host ``bool``."""
        return self.size() >= self.capacity

    def __len__(self) -> int:
        return self.size()

    def state_dict(self) -> dict[str, Any]:
        """Returns everything needed to restore the buffer (storage, cursor, RNG state)."""
        raise NotImplementedError

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restores :meth:`state_dict` output into a buffer built with the same arguments."""
        raise NotImplementedError

    def _repr_fields(self) -> str:
        return f"sample_size={self.sample_size}, capacity={self.capacity}"

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}({self._repr_fields()}, columns={len(self.specs)}, "
            f"size={self.size()})"
        )

"""``PriorityReplayBuffer``: MindSpore RL's device-resident prioritized buffer, corrected."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ostinato.device._checks import non_negative_float, optional_seed, unit_float
from ostinato.device.base import DeviceBuffer


class PriorityReplayBuffer(DeviceBuffer):
    """A fixed-capacity FIFO replay buffer on an accelerator with proportional prioritization.

    The API is MindSpore RL's ``PriorityReplayBuffer`` (``insert(*transition)``,
    ``sample(beta) -> (indices, weights, *columns)``, ``update_priorities``), with the parts
    MindSpore lacks or gets wrong done properly: ``reset``, ``size``, ``full`` and
    ``get_item`` work; the ring cursor never runs past the end; sampled indices are row ids,
    so ``update_priorities`` skips rows overwritten since they were sampled; negative and
    NaN priorities raise instead of silently becoming 1e-7.

    The sum and min trees live on the device and are read and written for a whole batch at
    a time; nothing on the sampling or update path loops over items on the host, and with
    ``validate=False`` nothing on it synchronises with the device either.

    Sampling is stratified: the total priority mass is split into ``sample_size`` equal
    strata with one draw in each, so rows come back ordered by their position in the
    cumulative sum. Row ``i`` is drawn with probability ``p_i ** alpha / sum_j p_j ** alpha``
    and weighted by ``(N * P(i)) ** -beta`` normalised by the largest possible weight.

    ``PriorityReplayBuffer(...)`` returns the subclass for ``backend`` (torch or jax); the
    framework is imported only then.

    Args:
        alpha: Priority exponent in [0, 1] (0 is uniform).
        capacity: Rows held; the oldest is overwritten when full.
        sample_size: Rows returned by :meth:`sample`. It may exceed ``capacity`` (and the
            rows held): sampling is with replacement.
        shapes: One element shape per column, without the capacity dimension.
        types: One dtype per column (strings, numpy, torch, jax or MindSpore dtypes).
        beta: Default importance-sampling exponent for :meth:`sample`.
        names: Optional column names, used in error messages.
        device: Where the buffer lives; see :class:`UniformReplayBuffer`.
        seed: Seed for sampling; ``None`` seeds from the OS.
        seed0: MindSpore's seed argument; used when ``seed`` is ``None`` and it is nonzero.
        seed1: MindSpore's second seed; takes precedence over ``seed0`` when nonzero.
        backend: ``"torch"`` or ``"jax"``.
        validate: Check priorities passed to :meth:`insert` and :meth:`update_priorities`
            (one host synchronisation per call). With ``False``, invalid priorities are
            ignored (skipped on update, treated as 0 on insert) and no call synchronises.

    Raises:
        ValueError: For ``alpha`` outside [0, 1], negative ``beta``, non-positive sizes,
            malformed shapes, an unknown backend or a missing device.
        TypeError: For unsupported dtypes or ``shapes``/``types`` that are not lists.

    Example:
        >>> import torch
        >>> buf = PriorityReplayBuffer(0.6, 1024, 4, [(3,), ()], ["float32", "int64"], seed=0)
        >>> buf.insert(torch.zeros(10, 3), torch.arange(10))
        >>> indices, weights, obs, action = buf.sample(0.4)
        >>> buf.update_priorities(indices, torch.rand(4))
    """

    _KIND = "priority"

    def __init__(
        self,
        alpha: float,
        capacity: int,
        sample_size: int,
        shapes: Sequence[Any],
        types: Sequence[Any],
        *,
        beta: float = 0.4,
        names: Sequence[str] | None = None,
        device: Any = None,
        seed: int | None = None,
        seed0: int = 0,
        seed1: int = 0,
        backend: str = "torch",
        validate: bool = True,
    ) -> None:
        self.alpha = unit_float("alpha", alpha)
        self._init_common(capacity, sample_size, shapes, types, names, seed, backend)
        self.beta = non_negative_float("beta", beta)
        seed0_, seed1_ = optional_seed(seed0, "seed0"), optional_seed(seed1, "seed1")
        if self.seed is None:
            self.seed = seed1_ or seed0_ or None
        self.validate = bool(validate)

    def _beta(self, beta: float | None) -> float:
        return self.beta if beta is None else non_negative_float("beta", beta)

    def _transition(self, transition: tuple[Any, ...]) -> Sequence[Any]:
        # MindSpore passes columns as separate arguments; a single list of all the columns
        # (the UniformReplayBuffer convention) is accepted too.
        if (
            len(transition) == 1
            and len(self.specs) > 1
            and isinstance(transition[0], (list, tuple))
            and len(transition[0]) == len(self.specs)
        ):
            return transition[0]
        return transition

    def insert(self, *transition: Any, priority: Any = None) -> None:
        """Appends one transition, or a batch of them, overwriting the oldest when full.

        Args:
            *transition: One value per column (or one list of them): all of element shape,
                or all with the same leading batch dimension.
            priority: ``None`` gives new rows the running maximum priority (``** alpha``);
                otherwise a scalar, or one priority per row.

        Raises:
            ValueError: For malformed columns (naming the column) or a bad priority.
            TypeError: For a dtype differing from the column's (naming the column).
        """
        raise NotImplementedError

    def sample(self, beta: float | None = None) -> tuple[Any, ...]:
        """Draws ``sample_size`` rows in proportion to ``priority ** alpha``, with
        replacement (``sample_size`` may exceed ``size()`` and ``capacity``).

        Args:
            beta: Importance-sampling exponent; ``None`` uses the constructor's ``beta``.

        Returns:
            ``(indices, weights, *columns)``: int64 row ids to pass back to
            :meth:`update_priorities`, float32 weights in (0, 1], and one array per column
            shaped ``(sample_size, *element_shape)``.

        Raises:
            IndexError: If the buffer is empty.
        """
        raise NotImplementedError

    def update_priorities(self, indices: Any, priorities: Any) -> None:
        """Sets new priorities for sampled rows.

        Indices of rows that have been overwritten (or reset) since they were sampled are
        ignored. If an index appears more than once, its last priority wins.

        Args:
            indices: Row ids from :meth:`sample`.
            priorities: One finite, non-negative priority per index.

        Raises:
            ValueError: On a length mismatch, or a negative, NaN or infinite priority
                (when ``validate``), naming the first bad value.
        """
        raise NotImplementedError

    def reset(self) -> bool:
        """Empties the buffer and its trees, resets the running maximum; returns ``True``."""
        raise NotImplementedError

    def state_dict(self) -> dict[str, Any]:
        """Returns everything needed to restore the buffer (storage, trees, RNG state)."""
        raise NotImplementedError

    def _repr_fields(self) -> str:
        return f"alpha={self.alpha}, capacity={self.capacity}, sample_size={self.sample_size}"

"""Argument checks shared by every device buffer; messages quote the bad value."""

from __future__ import annotations

import math
from typing import Any

from ostinato.validate import is_real, non_negative_int, non_negative_number


def unit_float(name: str, value: Any) -> float:
    """Returns ``value`` as a ``float`` or raises if it is not a finite number in [0, 1].

    Args:
        name: The argument name, quoted in the error message.
        value: The value to check.

    Returns:
        ``float(value)``.

    Raises:
        ValueError: If ``value`` is not a real number with ``0 <= value <= 1``.
    """
    if not is_real(value) or not math.isfinite(value) or not 0.0 <= value <= 1.0:
        raise ValueError(f"{name} ({value!r}) must be a number in [0, 1]")
    return float(value)


def non_negative_float(name: str, value: Any) -> float:
    """Returns ``value`` as a ``float`` or raises if it is not a finite number ``>= 0``.

    Args:
        name: The argument name, quoted in the error message.
        value: The value to check.

    Returns:
        ``float(value)``.

    Raises:
        ValueError: If ``value`` is negative, NaN, infinite or not a real number.
    """
    return non_negative_number(name, value)


def optional_seed(value: Any, name: str = "seed") -> int | None:
    """Returns ``value`` as an ``int`` seed, or ``None``.

    Args:
        value: ``None`` (seed from the operating system) or an integer ``>= 0``.
        name: The argument name, quoted in the error message.

    Returns:
        The seed.

    Raises:
        ValueError: If ``value`` is neither ``None`` nor a non-negative integer.
    """
    return non_negative_int(name, value, none_ok=True)


def distinct_rows_fit(
    sample_size: int, available: int, of: str = "size()", name: str = "sample_size"
) -> None:
    """Raises if a draw *without* replacement asks for more rows than there are.

    ``sample_size`` is not limited by ``capacity``: sampling is with replacement, so any
    positive ``sample_size`` works (MindSpore's ``PriorityReplayBuffer`` and its sampling
    kernels accept it too; only its ``UniformReplayBuffer`` op refuses it at construction,
    a limit not copied here). Only ``sample(unique=True)`` needs ``sample_size <= size()``.

    Args:
        sample_size: Rows asked for.
        available: Rows that can be drawn from (the buffer's ``size()``, or its capacity
            where the size is not known, as under ``jax.jit``).
        of: What ``available`` is, for the message: ``"size()"`` or ``"capacity"``.
        name: The argument name quoted in the message.

    Raises:
        ValueError: If ``sample_size > available``; the message names both values.
    """
    if sample_size > available:
        where = f"holding {available}" if of == "size()" else f"of {of} {available}"
        raise ValueError(
            f"cannot draw {sample_size} distinct rows from a buffer {where}: "
            f"sample(unique=True) draws without replacement, so {name} ({sample_size}) "
            f"must not exceed {of} ({available}); sample() without unique=True draws with "
            f"replacement and accepts any {name}"
        )


def state_alpha(state: dict[str, Any], alpha: float) -> None:
    """Raises ``ValueError`` unless a sampler state was saved with ``alpha``."""
    if float(state["alpha"]) != alpha:
        raise ValueError(f"state alpha ({state['alpha']}) differs from alpha ({alpha})")


def restore_random_state(set_state: Any, state: dict[str, Any]) -> None:
    """Restores a sampler state's random stream with ``set_state``; a state saved by a
    sampler of another kind (numpy's generator, or a CPU one) cannot carry its stream over,
    so it is left as it is (the priorities still carry over)."""
    try:
        set_state(state["generator"])
    except (TypeError, RuntimeError, ValueError, KeyError):
        pass

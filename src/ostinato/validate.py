"""Argument checks shared by every layer: each returns the value (as a plain ``int`` or
``float``) or raises ``ValueError`` naming the argument and quoting the value.

``bool`` is refused where an integer or a number is asked for, although Python counts it as
an ``int``: ``capacity=True`` is a mistake, not 1. NumPy integers and floats are accepted.

This module imports nothing of Ostinato (and no framework), so that any layer, the core and
the device buffers included, may use it.
"""

from __future__ import annotations

import math
import numbers
from typing import Any

#: Highest TCP port.
MAX_PORT = 65535


def is_int(value: Any) -> bool:
    """True for an integer (Python's or NumPy's), False for a ``bool`` or anything else."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def is_real(value: Any) -> bool:
    """True for a real number (an integer or a float, Python's or NumPy's), not a ``bool``."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def positive_int(name: str, value: Any, *, none_ok: bool = False) -> Any:
    """``value`` as an ``int`` >= 1 (or ``None`` when ``none_ok`` and it is ``None``).

    Raises:
      ValueError: ``"{name} ({value!r}) must be a positive integer"`` (``"... must be None or
        a positive integer"`` when ``none_ok``).
    """
    if value is None and none_ok:
        return None
    if not is_int(value) or value < 1:
        raise ValueError(
            f"{name} ({value!r}) must be {'None or ' if none_ok else ''}a positive integer"
        )
    return int(value)


def non_negative_int(name: str, value: Any, *, none_ok: bool = False) -> Any:
    """``value`` as an ``int`` >= 0 (or ``None`` when ``none_ok`` and it is ``None``).

    Raises:
      ValueError: ``"{name} ({value!r}) must be a non-negative integer"`` (``"... must be None
        or a non-negative integer"`` when ``none_ok``).
    """
    if value is None and none_ok:
        return None
    if not is_int(value) or value < 0:
        raise ValueError(
            f"{name} ({value!r}) must be {'None or ' if none_ok else ''}a non-negative integer"
        )
    return int(value)


def int_in(name: str, value: Any, low: int, high: int, *, none_ok: bool = False) -> Any:
    """``value`` as an ``int`` in ``low..high`` (both included).

    Raises:
      ValueError: ``"{name} ({value!r}) must be an integer in {low}..{high}"``.
    """
    if value is None and none_ok:
        return None
    if not is_int(value) or not low <= value <= high:
        raise ValueError(
            f"{name} ({value!r}) must be {'None or ' if none_ok else ''}an integer in {low}..{high}"
        )
    return int(value)


def port(name: str, value: Any, *, zero_ok: bool = True, none_ok: bool = False) -> Any:
    """``value`` as a TCP port: an ``int`` in ``0..65535`` (``1..65535`` unless ``zero_ok``;
    0 asks the system for a free port).

    Raises:
      ValueError: ``"{name} ({value!r}) must be an integer in 0..65535"``.
    """
    return int_in(name, value, 0 if zero_ok else 1, MAX_PORT, none_ok=none_ok)


def non_negative_number(name: str, value: Any) -> float:
    """``value`` as a finite ``float`` >= 0.

    Raises:
      ValueError: ``"{name} ({value!r}) must be a finite number >= 0"``.
    """
    if not is_real(value) or not math.isfinite(value) or value < 0:
        raise ValueError(f"{name} ({value!r}) must be a finite number >= 0")
    return float(value)


def positive_number(name: str, value: Any, *, none_ok: bool = False) -> Any:
    """``value`` as a finite ``float`` > 0 (or ``None`` when ``none_ok`` and it is ``None``).

    Raises:
      ValueError: ``"{name} ({value!r}) must be a finite number > 0"`` (``"... must be None or
        a finite number > 0"`` when ``none_ok``).
    """
    if value is None and none_ok:
        return None
    if not is_real(value) or not math.isfinite(value) or value <= 0:
        raise ValueError(
            f"{name} ({value!r}) must be {'None or ' if none_ok else ''}a finite number > 0"
        )
    return float(value)

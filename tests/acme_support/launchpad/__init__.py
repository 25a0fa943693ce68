"""A test-only stand-in for dm-launchpad, so that ``import acme`` works (NOT part of Ostinato).

dm-acme 0.4.0 imports ``launchpad`` at package import time (``acme.utils.signals``, through
``acme.environment_loop``), but dm-launchpad publishes no wheel for Python >= 3.10, and nothing
that Acme's Reverb tests, ``scripts/test_acme.sh`` or ``examples/acme_dqn.py`` run starts a
Launchpad program. This module provides the two functions that single-process Acme code calls
(``EnvironmentLoop.run`` registers a stop handler) and nothing else: any other attribute raises
an ``AttributeError`` that says so. It is put on ``sys.path`` only by those scripts.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

_lock = threading.Lock()
_handlers: list[Callable[[], Any]] = []


def register_stop_handler(handler: Callable[[], Any]) -> None:
    """Remembers ``handler``; this stand-in never stops a program, so it is never called."""
    with _lock:
        _handlers.append(handler)


def unregister_stop_handler(handler: Callable[[], Any]) -> None:
    """Forgets ``handler`` (registered by :func:`register_stop_handler`)."""
    with _lock:
        if handler in _handlers:
            _handlers.remove(handler)


def __getattr__(name: str) -> Any:
    raise AttributeError(
        f"launchpad.{name}: this is Ostinato's test-only stand-in for dm-launchpad "
        "(tests/acme_support/launchpad), which only provides register_stop_handler and "
        "unregister_stop_handler; a distributed (Launchpad) Acme program needs the real package"
    )

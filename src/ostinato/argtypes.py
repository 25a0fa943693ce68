"""Argument types shared by Ostinato's command lines (``argparse`` ``type=`` callables)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any


def positive(kind: type) -> Callable[[str], Any]:
    """An ``argparse`` type: ``kind(text)``, which must be > 0; a clear message otherwise."""

    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a valid {kind.__name__}") from None
        if not value > 0:
            raise argparse.ArgumentTypeError(f"{text!r} must be > 0")
        return value

    parse.__name__ = f"positive {kind.__name__}"
    return parse

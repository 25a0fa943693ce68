"""What Ostinato's command lines share: ``argparse`` types and reading the files they name."""

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


def read_pem(path: str, flag: str, error: Callable[[str], BaseException] = ValueError) -> bytes:
    """The contents of the PEM file ``path`` given to ``flag``; ``error(message)`` is raised,
    naming the flag and the path, when it cannot be read or holds no PEM block."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise error(f"{flag} {path}: {e.strerror or e}") from None
    if b"-----BEGIN " not in data:
        raise error(f"{flag} {path}: not a PEM file (no '-----BEGIN' line)")
    return data

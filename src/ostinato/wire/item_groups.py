"""Item groups: runs of alike items of an Insert request as arrays.

A writer's stream sends runs of consecutive items of one table whose every column is one slice
(the same squeeze flags, as many columns) as one group -- keys, priorities, chunk keys, offsets
and lengths as little-endian arrays -- which the server checks and turns into items with numpy
instead of reading one msgpack item each (see ``ostinato.wire.request_encoder`` and
``ostinato.wire.inserts``).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from ostinato.errors import DecodeError


def item_group(
    table: int,
    squeeze: list[bool],
    keys: Any,
    priorities: Any,
    chunk_keys: Any,
    offsets: Any,
    lengths: Any,
) -> dict[str, Any]:
    """An item group: ``n`` items of one table whose every column is one slice, as arrays
    (little-endian bytes): ``keys`` uint64[n], ``priorities`` float64[n], and per column
    ``chunk_keys`` uint64[c, n], ``offsets`` and ``lengths`` int64[c, n]. It stands for ``n``
    consecutive items of the request (positions, acknowledgements and ``retried`` count
    items, not groups)."""
    return {
        "g": table,
        "n": int(len(keys)),
        "sq": squeeze,
        "k": keys.astype("<u8", copy=False).tobytes(),
        "p": priorities.astype("<f8", copy=False).tobytes(),
        "c": chunk_keys.astype("<u8", copy=False).tobytes(),
        "o": offsets.astype("<i8", copy=False).tobytes(),
        "l": lengths.astype("<i8", copy=False).tobytes(),
    }


@dataclasses.dataclass
class ItemGroup:
    """An item group read from a request (:func:`item_group`), its arrays checked for size."""

    table: int
    squeeze: list[bool]
    keys: np.ndarray
    priorities: np.ndarray
    chunk_keys: np.ndarray  # [columns, n]
    offsets: np.ndarray
    lengths: np.ndarray


def parse_item_group(m: dict[str, Any]) -> ItemGroup:
    """Reads an item group.

    Raises:
      DecodeError: a field is missing, of the wrong type, or its arrays disagree in size.
    """
    n, ti, sq = m.get("n"), m.get("g"), m.get("sq")
    if type(n) is not int or not 0 < n <= 1_000_000:
        raise DecodeError(f"item group field 'n' must be a positive count, got {n!r:.40}")
    if type(ti) is not int:
        raise DecodeError(f"item group field 'g' must be a table index, got {ti!r:.40}")
    if not isinstance(sq, list) or not sq or len(sq) > 100_000:
        raise DecodeError("item group field 'sq' must be a non-empty list of squeeze flags")
    cols = len(sq)
    arrays = []
    for f, dtype, size in (
        ("k", "<u8", n),
        ("p", "<f8", n),
        ("c", "<u8", n * cols),
        ("o", "<i8", n * cols),
        ("l", "<i8", n * cols),
    ):
        b = m.get(f)
        if not isinstance(b, bytes) or len(b) != 8 * size:
            raise DecodeError(
                f"item group field {f!r} must hold {size} 8-byte values for {n} items of "
                f"{cols} columns"
            )
        arrays.append(np.frombuffer(b, dtype))
    k, p, c, o, ln = arrays
    return ItemGroup(ti, sq, k, p, c.reshape(cols, n), o.reshape(cols, n), ln.reshape(cols, n))

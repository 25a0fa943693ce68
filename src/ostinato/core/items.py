"""Compact item trajectories and sampled batches.

An item's trajectory is a list of columns; a column is a list of slices ``(chunk, offset,
length)`` plus a squeeze flag. To keep per-item memory small, a trajectory whose columns are
each one slice is packed into one flat tuple ``(chunk0, offset0, length0, chunk1, ...)``; any
other trajectory is a tuple of per-column tuples of slices. Squeeze flags are a tuple of bools
interned so that items share it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from ostinato.core.chunks import Chunk

Slice = tuple[Chunk, int, int]
Packed = tuple[Any, ...]

#: Interned squeeze-flag tuples (read-only outside :func:`intern_squeeze`; hot paths look
#: them up directly before calling it).
SQUEEZE_CACHE: dict[tuple[bool, ...], tuple[bool, ...]] = {}


_SQUEEZE_CACHE_MAX = 4096  # distinct flag tuples kept (a remote peer chooses them)


def intern_squeeze(flags: Sequence[bool]) -> tuple[bool, ...]:
    """The flags as a tuple of bools, one shared tuple per distinct value (cheap to compare
    and to keep per item)."""
    try:
        hit = SQUEEZE_CACHE.get(tuple(flags))
    except TypeError:  # unhashable elements: truth values are taken below
        hit = None
    if hit is not None:
        return hit
    t = tuple(bool(f) for f in flags)
    if len(SQUEEZE_CACHE) >= _SQUEEZE_CACHE_MAX:
        return SQUEEZE_CACHE.get(t, t)
    return SQUEEZE_CACHE.setdefault(t, t)


def is_flat(packed: Packed) -> bool:
    """True when ``packed`` is the flat form ``(chunk0, offset0, length0, chunk1, ...)``: each
    column one slice (see module docstring)."""
    return type(packed[0]) is Chunk


def pack(columns: Sequence[Sequence[Slice]]) -> Packed:
    """Packs columns of slices (see module docstring)."""
    if all(len(c) == 1 for c in columns):
        out: list[Any] = []
        for c in columns:
            out.extend(c[0])
        return tuple(out)
    return tuple(tuple(c) for c in columns)


def columns(packed: Packed) -> list[tuple[Slice, ...]]:
    """Unpacks to a list of columns, each a tuple of slices."""
    if is_flat(packed):
        return [((packed[i], packed[i + 1], packed[i + 2]),) for i in range(0, len(packed), 3)]
    return list(packed)


def chunk_refs(packed: Packed) -> Sequence[Chunk]:
    """Every chunk reference of the trajectory, one per slice (a chunk may appear several
    times); what an item holds in the chunk store."""
    if is_flat(packed):
        return packed[0::3]
    return [s[0] for col in packed for s in col]


def approx_nbytes(packed: Packed) -> int | None:
    """Bytes of data the trajectory refers to, from its chunks' specs (None if one is unknown)."""
    total = 0
    for col in columns(packed):
        for chunk, _, ln in col:
            spec = chunk.spec
            if spec is None:
                return None
            total += ln * spec[0].itemsize * math.prod(spec[1])
    return total


class SampleBatch:
    """Items sampled from a table in one call.

    Attributes are numpy arrays of length ``n`` (``keys`` uint64, ``probabilities`` float64,
    ``table_sizes`` int64, ``priorities`` float64, ``times_sampled`` int32), plus lists of packed
    ``trajectories`` and ``squeeze`` flags. A batch that arrived already stacked (one array per
    column, batch dimension first) has them in ``columns`` and may have no ``trajectories``.
    """

    __slots__ = (
        "keys",
        "probabilities",
        "table_sizes",
        "priorities",
        "times_sampled",
        "trajectories",
        "squeeze",
        "rate_limited",
        "columns",
        "located",
    )

    def __init__(
        self,
        keys: np.ndarray,
        probabilities: np.ndarray,
        table_sizes: np.ndarray,
        priorities: np.ndarray,
        times_sampled: np.ndarray,
        trajectories: list[Packed],
        squeeze: list[tuple[bool, ...]],
        rate_limited: bool = False,
        columns: list[np.ndarray] | None = None,
        located: Any = None,
    ):
        self.columns = columns
        #: :class:`~ostinato.core.locations.Located` when the table knows where every item's
        #: rows are (batch assembly then takes them from the writers' blocks at once).
        self.located = located
        self.keys = keys
        self.probabilities = probabilities
        self.table_sizes = table_sizes
        self.priorities = priorities
        self.times_sampled = times_sampled
        self.trajectories = trajectories
        self.squeeze = squeeze
        self.rate_limited = rate_limited

    def __len__(self) -> int:
        return len(self.keys)

"""Reverb's legacy ``Writer``: items are the last ``num_timesteps`` whole steps."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import numpy as np
import optree

from ostinato import errors
from ostinato.writers.packing import pack_columns
from ostinato.writers.trajectory_writer import TrajectoryWriter

if TYPE_CHECKING:
    from ostinato.transport.base import Transport

_log = logging.getLogger(__name__)


class Writer:
    """The legacy writer returned by ``Client.writer`` (kept for Reverb compatibility).

    Args:
      transport: the client's transport.
      max_sequence_length: the longest item, in steps (>= 1).
      delta_encoded: accepted for compatibility; in-process chunks are not encoded.
      chunk_length: rows per chunk; default ``min(10, max_sequence_length)``.
      max_in_flight_items: items the server may hold back before ``create_item`` blocks
        (``None`` = 1,000,000).
    """

    def __init__(
        self,
        transport: Transport,
        max_sequence_length: int,
        *,
        delta_encoded: bool = False,
        chunk_length: int | None = None,
        max_in_flight_items: int | None = 25,
    ):
        if not isinstance(max_sequence_length, (int, np.integer)) or max_sequence_length < 1:
            raise ValueError(
                f"max_sequence_length ({max_sequence_length}) must be a positive integer"
            )
        if chunk_length is None:
            chunk_length = min(10, max_sequence_length)
        if not 1 <= chunk_length <= max_sequence_length:
            raise ValueError(
                f"chunk_length ({chunk_length}) must be a positive integer le to "
                f"max_sequence_length ({max_sequence_length})"
            )
        if max_in_flight_items is None:
            max_in_flight_items = 1_000_000
        if max_in_flight_items < 1:
            raise ValueError(
                f"max_in_flight_items ({max_in_flight_items}) must be a positive integer"
            )
        self._max_sequence_length = int(max_sequence_length)
        self._delta_encoded = delta_encoded
        self._chunk_length = int(chunk_length)
        self._num_leaves: int | None = None
        self._writer = TrajectoryWriter(
            transport,
            self._max_sequence_length,
            validate_items=True,
            max_chunk_length=self._chunk_length,
            max_pending_items=max_in_flight_items,
        )
        self._closed = False

    def __enter__(self) -> Writer:
        if self._closed:
            raise ValueError("Cannot reuse already closed Writer")
        return self

    def __exit__(self, *exc: Any) -> None:
        try:
            if not self._closed:
                self.flush()
        finally:
            if not self._closed:
                self.close()

    def append(self, data: Any) -> None:
        """Appends one step. Every step must have the same number of leaves."""
        leaves = optree.tree_leaves(data, none_is_leaf=True)
        if self._num_leaves is None:
            self._num_leaves = len(leaves)
        elif len(leaves) != self._num_leaves:
            raise ValueError(
                "Number of tensors per timestep was inconsistent. Previously it was "
                f"{self._num_leaves}, but is now {len(leaves)}."
            )
        self._writer.append(data)

    def append_sequence(self, sequence: Any) -> None:
        """Appends ``T`` steps given as a nest of arrays with leading dimension ``T``."""
        leaves, spec = optree.tree_flatten(sequence, none_is_leaf=True)
        arrays = [np.asarray(x) for x in leaves]
        if any(a.ndim == 0 for a in arrays):
            raise ValueError("append_sequence requires every leaf to have a leading time dimension")
        lengths = {a.shape[0] for a in arrays}
        if len(lengths) != 1:
            raise ValueError(f"append_sequence: leaves have different lengths {sorted(lengths)}")
        for t in range(lengths.pop()):
            self.append(optree.tree_unflatten(spec, [a[t] for a in arrays]))

    def create_item(self, table: str, num_timesteps: int, priority: float) -> None:
        """Creates an item of the last ``num_timesteps`` steps."""
        if num_timesteps < 1:
            raise ValueError(f"num_timesteps ({num_timesteps}) must be a positive integer")
        w = self._writer
        if num_timesteps > w.episode_steps:
            raise ValueError(
                "Argument `num_timesteps` is larger than number of buffered timesteps."
            )
        if num_timesteps > self._max_sequence_length:
            raise ValueError("`num_timesteps` must be <= `max_timesteps`")
        priority = float(priority)
        if priority != priority:
            raise ValueError("`priority` must not be nan.")
        cols = [c.history[-num_timesteps:] for c in w._columns]
        packed, sq = pack_columns(cols)
        w._create_packed(table, priority, cols, packed, sq, None, whole_steps=True)

    def flush(self, *, timeout_ms: int | None = None) -> None:
        """Waits until every created item is in its table (``timeout_ms``: Ostinato only)."""
        self._writer.flush(timeout_ms=timeout_ms)

    def close(self, retry_on_unavailable: bool = True, *, timeout_ms: int | None = None) -> None:
        """Flushes and closes. A second call raises ``ValueError``.

        Args:
          retry_on_unavailable: accepted for compatibility (in-process writes cannot be lost).
          timeout_ms: (Ostinato only) how long to wait for the flush; items still pending then
            are dropped with a warning.
        """
        if self._closed:
            raise ValueError("close() has already been called on Writer.")
        try:
            self._writer.flush(timeout_ms=timeout_ms)
        except errors.ReverbError:
            _log.warning("Writer.close: could not deliver all items", exc_info=True)
        finally:
            self._writer.close()
            self._closed = True

    def __repr__(self) -> str:
        return (
            f"Writer(max_sequence_length={self._max_sequence_length}, "
            f"chunk_length={self._chunk_length}), closed: {self._closed}"
        )

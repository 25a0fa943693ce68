"""A table's items as a whole: reading them (``get``, ``keys``) and the checkpoint round trip
(``snapshot``, ``restore_items``).

:class:`~ostinato.core.table.Table` builds on this class and adds inserting, sampling and
mutating items one call at a time.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from ostinato import errors
from ostinato.core import items as items_lib
from ostinato.core import table_state
from ostinato.core.chunks import Chunk
from ostinato.core.gate import Gate
from ostinato.core.slots import Slots
from ostinato.core.table_settings import TableSettings


class TableContents(TableSettings):
    """The item store's state, read and restored whole; :class:`~ostinato.core.table.Table`
    sets these attributes up."""

    _gate: Gate
    _lock: threading.Lock
    _cond: threading.Condition
    _slots: Slots
    _num_unique_samples: int
    _remaining_samples: int

    # -- introspection (tests, checkpoints) --------------------------------------------------------
    def get(self, key: int) -> dict[str, Any]:
        """Metadata of one item: key, priority, times_sampled, trajectory, squeeze."""
        with self._lock:
            s = self._slots
            slot = s.key_to_slot.get(key)
            if slot is None:
                raise KeyError(f"Key not found: {key} (table {self._name!r})")
            return {
                "key": key,
                "priority": float(s.priorities[slot]),
                "times_sampled": int(s.times_sampled[slot]),
                "trajectory": s.traj[slot],
                "squeeze": s.squeeze[slot],
                "insertion_order": int(s.sequence[slot]),
            }

    def keys(self) -> np.ndarray:
        """Keys of all items in insertion order."""
        with self._lock:
            return self._slots.keys[self._slots.in_insertion_order()].copy()

    # -- checkpoints -------------------------------------------------------------------------------
    def snapshot(self) -> dict[str, Any]:
        """A consistent copy of all items and counters, taken under the lock (for checkpoints).

        Metadata arrays are copied in insertion order; trajectories are the items' immutable
        packed tuples, so the chunk data can be written after the lock is released.
        ``heap_order`` is the order in which a heap selector last saw the items (its ties).
        """
        with self._lock:
            return table_state.snapshot(
                self._slots, self._sampler, self._remover, self._limiter, self._num_unique_samples
            )

    def restore_items(
        self,
        keys: np.ndarray,
        priorities: np.ndarray,
        times_sampled: np.ndarray,
        trajectories: Sequence[items_lib.Packed],
        squeeze: Sequence[tuple[bool, ...]],
        counters: dict[str, int],
        heap_order: np.ndarray | None = None,
        chunk_refs: tuple[Sequence[Chunk], Sequence[int]] | None = None,
    ) -> None:
        """Fills this empty table with checkpointed items (given in insertion order).

        Bypasses the rate limiter, keeps each item's priority and ``times_sampled``, then sets
        the limiter and statistics counters to the checkpointed values. Built in bulk: the items
        take slots ``0..n-1``, the per-slot arrays are filled at once and each selector is built
        by :meth:`ItemSelector.bulk_insert` (the state inserting the items one by one gives).

        Args:
          heap_order: the order in which heap selectors last saw the items (a permutation of
            ``range(n)``; of equal priorities, the item earlier in it is selected first), or
            None for insertion order.
          chunk_refs: optional ``(chunks, counts)``: the chunks the trajectories reference and
            how many slices reference each, when the caller knows them (else counted here).
        """
        state = table_state.RestoreInput(
            self._name,
            keys,
            priorities,
            times_sampled,
            trajectories,
            squeeze,
            heap_order,
            chunk_refs,
        )
        n = len(state)
        with self._cond:
            self._gate.check_open()
            if self._slots.key_to_slot or n > self._max_size:
                raise errors.FailedPreconditionError(
                    f"cannot restore {n} items into table {self._name!r} holding "
                    f"{len(self._slots.key_to_slot)} items with max_size {self._max_size}"
                )
            self._slots.fill(
                state.keys,
                state.key_to_slot,
                state.priorities,
                state.times_sampled,
                trajectories,
                squeeze,
                state.chunks,
                state.counts,
            )
            state.fill_selectors((self._sampler, self._remover))
            if self._max_times_sampled:
                self._remaining_samples += self._max_times_sampled * n - int(
                    state.times_sampled.sum()
                )
            if self._hooks is not None:
                self._hooks.inserted(state.key_list, state.priorities.tolist())
            self._limiter.restore_counters(
                counters["inserts"], counters["samples"], counters["deletes"]
            )
            self._slots.num_deleted_episodes = int(counters["num_deleted_episodes"])
            self._num_unique_samples = int(counters["num_unique_samples"])
            self._gate.notify_all()

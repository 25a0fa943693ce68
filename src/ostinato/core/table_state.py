"""A table's state as checkpoints see it: the snapshot a save takes, and the checks and chunk
counting a restore needs before it fills a table in bulk.

:meth:`Table.snapshot` and :meth:`Table.restore_items` are the public entry points; this module
holds what they do outside the table's lock.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ostinato import errors
from ostinato.core import items as items_lib
from ostinato.core.chunks import Chunk
from ostinato.core.keys import key_list
from ostinato.core.rate_limiter import RateLimiter
from ostinato.core.selectors import HeapSelector, ItemSelector
from ostinato.core.slots import Slots


def snapshot(
    slots: Slots,
    sampler: ItemSelector,
    remover: ItemSelector,
    limiter: RateLimiter,
    num_unique_samples: int,
) -> dict[str, Any]:
    """The snapshot of :meth:`Table.snapshot` (called under the table's lock)."""
    order = slots.in_insertion_order()
    heaps = [s for s in (sampler, remover) if isinstance(s, HeapSelector)]
    sl = order.tolist()
    return {
        "keys": slots.keys[order],
        "priorities": slots.priorities[order],
        "times_sampled": slots.times_sampled[order],
        "trajectories": [slots.traj[s] for s in sl],
        "squeeze": [slots.squeeze[s] for s in sl],
        "heap_order": heaps[0].tie_order(order) if heaps else None,
        "inserts": limiter.inserts,
        "samples": limiter.samples,
        "deletes": limiter.deletes,
        "num_deleted_episodes": slots.num_deleted_episodes,
        "num_unique_samples": num_unique_samples,
    }


class RestoreInput:
    """Checked, normalised arguments of :meth:`Table.restore_items`."""

    __slots__ = (
        "keys",
        "key_list",
        "key_to_slot",
        "priorities",
        "times_sampled",
        "trajectories",
        "squeeze",
        "heap_order",
        "chunks",
        "counts",
    )

    def __init__(
        self,
        table: str,
        keys: Any,
        priorities: Any,
        times_sampled: Any,
        trajectories: Sequence[items_lib.Packed],
        squeeze: Sequence[tuple[bool, ...]],
        heap_order: Any,
        chunk_refs: tuple[Sequence[Chunk], Sequence[int]] | None,
    ):
        if isinstance(keys, np.ndarray) and keys.dtype.kind in "ui":
            self.keys = keys.astype(np.uint64, copy=False).reshape(-1)
            self.key_list = self.keys.tolist()
        else:
            self.key_list = key_list(keys)
            self.keys = np.array(self.key_list, dtype=np.uint64)
        n = len(self.key_list)
        self.priorities = np.asarray(priorities, dtype=np.float64).reshape(-1)
        self.times_sampled = np.asarray(times_sampled, dtype=np.int64).reshape(-1)
        self.trajectories = trajectories
        self.squeeze = squeeze
        if (
            not len(self.priorities)
            == len(self.times_sampled)
            == len(trajectories)
            == len(squeeze)
            == n
        ):
            raise errors.FailedPreconditionError(
                f"restore into table {table!r}: {n} keys, {len(self.priorities)} priorities, "
                f"{len(self.times_sampled)} times_sampled, {len(trajectories)} trajectories and "
                f"{len(squeeze)} squeeze flags"
            )
        self.heap_order = None
        if heap_order is not None:
            order = np.asarray(heap_order, dtype=np.int64).reshape(-1)
            if len(order) != n or (
                n and (order.min() < 0 or order.max() >= n or np.bincount(order).max() > 1)
            ):
                raise errors.FailedPreconditionError(
                    f"restore into table {table!r}: heap_order is not a permutation of "
                    f"the {n} items"
                )
            self.heap_order = order
        self.key_to_slot = dict(zip(self.key_list, range(n)))  # item i goes to slot i
        if len(self.key_to_slot) != n:
            seen: set[int] = set()
            for k in self.key_list:
                if k in seen:
                    raise errors.FailedPreconditionError(f"duplicate key {k} in checkpoint")
                seen.add(k)
        if chunk_refs is None:
            chunk_refs = count_chunk_refs(trajectories)
        chunks, counts = chunk_refs
        self.chunks = chunks
        self.counts = counts.tolist() if isinstance(counts, np.ndarray) else list(counts)

    def __len__(self) -> int:
        return len(self.key_list)

    def fill_selectors(self, selectors: Sequence[ItemSelector]) -> None:
        """Builds each (empty) selector over slots ``0..n-1`` at once; heap selectors replay
        the checkpointed tie order."""
        n = len(self)
        slots = np.arange(n, dtype=np.int64)  # slot i holds item i
        prio = self.priorities
        order = self.heap_order
        for sel in selectors:
            if order is not None and isinstance(sel, HeapSelector):
                sel.bulk_insert(order, prio[order])
            else:
                sel.bulk_insert(slots, prio)


def count_chunk_refs(trajectories: Sequence[items_lib.Packed]) -> tuple[list[Chunk], list[int]]:
    """Every chunk the trajectories reference (by identity) and how many slices reference it."""
    found: dict[int, list[Any]] = {}
    for tr in trajectories:
        for c in items_lib.chunk_refs(tr):
            e = found.get(id(c))
            if e is None:
                found[id(c)] = [c, 1]
            else:
                e[1] += 1
    return [e[0] for e in found.values()], [e[1] for e in found.values()]

"""Prometheus figures of :mod:`ostinato.gc_pauses` (full garbage collections of a server
process that freezes their survivors), for :mod:`ostinato.ops.metrics`."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

#: (field of ``ostinato.gc_pauses`` stats, metric name, type, help); exported while the
#: process freezes what survives full collections (``ostinato-server``, Ray shards).
GC_METRICS: tuple[tuple[str, str, str, str], ...] = (
    (
        "full_collections",
        "ostinato_gc_full_collections",
        "counter",
        "Full garbage collections of the process since ostinato.gc_pauses was installed.",
    ),
    (
        "full_seconds",
        "ostinato_gc_full_collection_seconds",
        "counter",
        "Seconds those full collections took (nothing else runs meanwhile).",
    ),
    (
        "longest_seconds",
        "ostinato_gc_longest_full_collection_seconds",
        "gauge",
        "The longest of them.",
    ),
    (
        "frozen",
        "ostinato_gc_frozen_objects",
        "gauge",
        "Objects frozen now (full collections skip them until the next unfreeze).",
    ),
)


class GcCollector:
    """A Prometheus collector of :mod:`ostinato.gc_pauses`' figures, while it is installed."""

    def __init__(self) -> None:
        from ostinato.ops.metrics import require_prometheus

        self._pc = require_prometheus()

    def describe(self) -> list[Any]:
        return []

    def collect(self) -> Iterator[Any]:
        from ostinato.gc_pauses import active

        policy = active()
        if policy is None:
            return
        from ostinato.ops.metrics import scalar_families

        yield from scalar_families(self._pc, GC_METRICS, policy.stats())

"""The ``TableInfo`` map that ``ServerInfo`` replies carry (:mod:`ostinato.wire.protocol`):
a table's selectors, limits, rate limiter counters, signature and sizes, both directions.
Readers raise :class:`~ostinato.errors.DecodeError` on anything malformed.
"""

from __future__ import annotations

from typing import Any

from ostinato.core.signature import signature_from_data, signature_to_data
from ostinato.core.table_info import (
    HeapOptions,
    KeyDistributionOptions,
    PrioritizedOptions,
    RateLimiterCallStats,
    RateLimiterInfo,
    TableInfo,
)
from ostinato.errors import DecodeError


def encode_options(o: KeyDistributionOptions) -> dict:
    return {
        "which": o.WhichOneof("distribution"),
        "exp": o.prioritized.priority_exponent if o.prioritized else None,
        "min_heap": o.heap.min_heap if o.heap else None,
        "det": o.is_deterministic,
    }


def decode_options(m: Any) -> KeyDistributionOptions:
    if not isinstance(m, dict):
        raise DecodeError("bad selector options")
    which = m.get("which")
    if which == "prioritized":
        exp = m.get("exp")
        if not isinstance(exp, (int, float)) or isinstance(exp, bool):
            raise DecodeError("bad priority exponent")
        return KeyDistributionOptions(prioritized=PrioritizedOptions(float(exp)))
    if which == "heap":
        return KeyDistributionOptions(
            heap=HeapOptions(bool(m.get("min_heap"))), is_deterministic=True
        )
    if which in ("fifo", "lifo", "uniform"):
        return KeyDistributionOptions(**{which: True}, is_deterministic=which != "uniform")  # type: ignore[arg-type]
    raise DecodeError(f"unknown selector {which!r}")


def encode_table_info(i: TableInfo) -> dict:
    r = i.rate_limiter_info
    return {
        "name": i.name,
        "sampler": encode_options(i.sampler_options),
        "remover": encode_options(i.remover_options),
        "max_size": i.max_size,
        "max_times_sampled": i.max_times_sampled,
        "rl": [
            r.samples_per_insert,
            r.min_diff,
            r.max_diff,
            r.min_size_to_sample,
            r.insert_stats.completed,
            r.sample_stats.completed,
            r.delete_count,
        ],
        "signature": signature_to_data(i.signature),
        "current_size": i.current_size,
        "num_episodes": i.num_episodes,
        "num_deleted_episodes": i.num_deleted_episodes,
        "num_unique_samples": i.num_unique_samples,
    }


def decode_table_info(m: dict) -> TableInfo:
    try:
        rl = m["rl"]
        return TableInfo(
            name=m["name"],
            sampler_options=decode_options(m["sampler"]),
            remover_options=decode_options(m["remover"]),
            max_size=m["max_size"],
            max_times_sampled=m["max_times_sampled"],
            rate_limiter_info=RateLimiterInfo(
                rl[0],
                rl[1],
                rl[2],
                rl[3],
                RateLimiterCallStats(rl[4]),
                RateLimiterCallStats(rl[5]),
                rl[6],
            ),
            signature=signature_from_data(m["signature"]),
            current_size=m["current_size"],
            num_episodes=m["num_episodes"],
            num_deleted_episodes=m["num_deleted_episodes"],
            num_unique_samples=m["num_unique_samples"],
        )
    except (KeyError, IndexError, TypeError, ValueError, AttributeError) as e:
        if isinstance(e, DecodeError):
            raise
        raise DecodeError(f"bad table info: {e}") from None

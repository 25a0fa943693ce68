"""The values a server reports about itself, as plain dicts: ``Server.metrics()``.

Everything is read when asked, from counters the server keeps anyway (the tables' rate-limiter
counters and sizes, the gate's waits, the chunk store's running byte count, the service's
request counters, the last checkpoint), so that nothing is added to the paths that insert and
sample. The same dict travels over the network as the ``Stats`` call's reply, feeds the
Prometheus collector (:mod:`ostinato.ops.metrics`) and ``ostinato top``/``ostinato info``.

Shape (``metrics()`` of one server)::

    {"time": unix seconds, "version": "0.1.0", "source": "stats",
     "server": {"port", "start_time", "uptime_seconds", "chunks", "chunk_bytes",
                "writer_streams", "rings_mapped", "ring_streams", "ring_bytes",
                "requests": {method: {status: n}}, "received_bytes": {method: n},
                "sent_bytes": {method: n},
                "checkpoint": {"saves", "failures", "last_path", "last_time",
                               "last_seconds", "last_bytes", "age_seconds",
                               "restore_path", "restore_seconds"}},
     "tables": {name: {"size", "max_size", "max_times_sampled", "sampler", "remover",
                       "inserts", "samples", "deletes", "unique_samples", "episodes",
                       "deleted_episodes", "sampled_per_item", "samples_per_insert",
                       "min_size_to_sample", "min_diff", "max_diff", "diff",
                       "blocked_inserters", "blocked_samplers",
                       "insert_blocked_seconds", "sample_blocked_seconds"}}}

:func:`collect` asks a client's server(s) and returns the same shape merged over shards, with
``"shards"``: one such dict per server (``{"address", "error"}`` for one that did not answer).
A server without ``Stats`` (an older Ostinato) is described from ``server_info`` instead
(``"source": "server_info"``; what it cannot tell is None).
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

from ostinato import errors
from ostinato.core.deadline import Deadline

#: Table fields added up over shards; the others are taken from the first shard.
SUMMED_TABLE_FIELDS = (
    "size",
    "max_size",
    "inserts",
    "samples",
    "deletes",
    "unique_samples",
    "episodes",
    "deleted_episodes",
    "blocked_inserters",
    "blocked_samplers",
    "insert_blocked_seconds",
    "sample_blocked_seconds",
)
#: Server fields added up over shards.
SUMMED_SERVER_FIELDS = (
    "chunks",
    "chunk_bytes",
    "writer_streams",
    "rings_mapped",
    "ring_streams",
    "ring_bytes",
)
#: Per-shard limiter state: merged over shards it means nothing, so it is None there.
PER_SHARD_TABLE_FIELDS = ("min_diff", "max_diff", "diff")


def _selector_name(options: Any) -> str:
    which = options.WhichOneof("distribution") or "unknown"
    if which == "prioritized":
        return f"prioritized({options.prioritized.priority_exponent:g})"
    if which == "heap":
        return "min_heap" if options.heap.min_heap else "max_heap"
    return which


def table_values(info: Any, waits: Any = None) -> dict[str, Any]:
    """One table's values from its :class:`~ostinato.core.table_info.TableInfo` and
    :class:`~ostinato.core.gate.WaitStats` (None: unknown, e.g. an older server)."""
    rl = info.rate_limiter_info
    inserts = int(rl.insert_stats.completed)
    samples = int(rl.sample_stats.completed)
    spi = float(rl.samples_per_insert)
    return {
        "size": int(info.current_size),
        "max_size": int(info.max_size),
        "max_times_sampled": int(info.max_times_sampled),
        "sampler": _selector_name(info.sampler_options),
        "remover": _selector_name(info.remover_options),
        "inserts": inserts,
        "samples": samples,
        "deletes": int(rl.delete_count),
        "unique_samples": int(info.num_unique_samples),
        "episodes": int(info.num_episodes),
        "deleted_episodes": int(info.num_deleted_episodes),
        "sampled_per_item": samples / inserts if inserts else 0.0,
        "samples_per_insert": spi,
        "min_size_to_sample": int(rl.min_size_to_sample),
        "min_diff": float(rl.min_diff),
        "max_diff": float(rl.max_diff),
        "diff": inserts * spi - samples,
        "blocked_inserters": None if waits is None else waits.blocked_inserters,
        "blocked_samplers": None if waits is None else waits.blocked_samplers,
        "insert_blocked_seconds": None if waits is None else waits.insert_wait_seconds,
        "sample_blocked_seconds": None if waits is None else waits.sample_wait_seconds,
    }


def _checkpoint_values(stats: Any, now: float) -> dict[str, Any]:
    return {
        "saves": stats.saves,
        "failures": stats.failures,
        "last_path": stats.last_path,
        "last_time": stats.last_time,
        "last_seconds": stats.last_seconds,
        "last_bytes": stats.last_bytes,
        "age_seconds": None if stats.last_time is None else max(0.0, now - stats.last_time),
        "restore_path": stats.restore_path,
        "restore_seconds": stats.restore_seconds,
    }


def server_metrics(server: Any) -> dict[str, Any]:
    """``server.metrics()``: the values of one :class:`~ostinato.server.Server` (see the
    module docstring for the fields)."""
    from ostinato import __version__

    now = time.time()
    tables = {
        name: table_values(t.info, t.wait_stats()) for name, t in server.tables_by_name.items()
    }
    chunks, nbytes = server.chunk_store.stats()
    service = server.service
    streams = service.streams
    with streams.lock:
        stream_values = {
            "writer_streams": streams.active_streams,
            "rings_mapped": streams.rings_mapped,
            "ring_streams": streams.ring_streams,
            "ring_bytes": streams.ring_bytes,
        }
    values: dict[str, Any] = {
        "port": server.port,
        "start_time": server.start_time,
        "uptime_seconds": max(0.0, now - server.start_time),
        "chunks": chunks,
        "chunk_bytes": nbytes,
        **stream_values,
        **service.requests.snapshot(),
        "checkpoint": _checkpoint_values(server.checkpoint_stats, now),
    }
    return {
        "time": now,
        "version": __version__,
        "source": "stats",
        "server": values,
        "tables": tables,
    }


def from_server_info(infos: dict[str, Any]) -> dict[str, Any]:
    """What ``server_info`` tells (a server without ``Stats``), in :func:`server_metrics`'s
    shape: no waits, no server counters."""
    return {
        "time": time.time(),
        "version": None,
        "source": "server_info",
        "server": {},
        "tables": {name: table_values(i) for name, i in infos.items()},
    }


# -- several servers ---------------------------------------------------------------------------
def _add(values: Iterable[Any]) -> Any:
    known = [v for v in values if v is not None]
    return sum(known) if known else None


def _merge_nested(parts: list[dict[str, Any]], field: str) -> dict[str, Any]:
    """Adds up ``{key: n}`` or ``{key: {key2: n}}`` maps."""
    out: dict[str, Any] = {}
    for p in parts:
        for k, v in (p.get(field) or {}).items():
            if isinstance(v, dict):
                d = out.setdefault(k, {})
                for k2, n in v.items():
                    d[k2] = d.get(k2, 0) + n
            else:
                out[k] = out.get(k, 0) + v
    return out


def merge(shards: list[dict[str, Any]]) -> dict[str, Any]:
    """The values of several servers holding the same tables, as if they were one.

    Counts, sizes, waits and bytes are added up; settings come from the first server;
    limiter diffs (per shard by nature) are None; the checkpoint is the stalest server's
    (the one whose newest checkpoint is oldest), with saves and failures added up; ``uptime``
    is the youngest server's. Shards with an ``"error"`` are left out.
    """
    ok = [s for s in shards if "error" not in s]
    out: dict[str, Any] = {
        "time": time.time(),
        "shards": shards,
        "source": _source(ok),
        "server": {},
        "tables": {},
    }
    if not ok:
        return out
    out["version"] = ok[0].get("version")
    tables: dict[str, Any] = {}
    for name, first in ok[0]["tables"].items():
        parts = [s["tables"][name] for s in ok if name in s["tables"]]
        t = dict(first)
        for f in SUMMED_TABLE_FIELDS:
            t[f] = _add(p.get(f) for p in parts)
        for f in PER_SHARD_TABLE_FIELDS:
            t[f] = None if len(parts) > 1 else first.get(f)
        t["sampled_per_item"] = t["samples"] / t["inserts"] if t.get("inserts") else 0.0
        t["shards"] = len(parts)
        tables[name] = t
    out["tables"] = tables
    servers = [s["server"] for s in ok if s.get("server")]
    if servers:
        merged: dict[str, Any] = {f: _add(s.get(f) for s in servers) for f in SUMMED_SERVER_FIELDS}
        for f in ("requests", "received_bytes", "sent_bytes"):
            merged[f] = _merge_nested(servers, f)
        ups = [s["uptime_seconds"] for s in servers if s.get("uptime_seconds") is not None]
        merged["uptime_seconds"] = min(ups) if ups else None
        cks = [s.get("checkpoint") or {} for s in servers]
        stalest = min(cks, key=lambda c: -1.0 if c.get("last_time") is None else c["last_time"])
        merged["checkpoint"] = {
            **stalest,
            "saves": _add(c.get("saves") for c in cks),
            "failures": _add(c.get("failures") for c in cks),
        }
        out["server"] = merged
    return out


def _source(ok: list[dict[str, Any]]) -> str:
    kinds = {str(s.get("source")) for s in ok}
    if not kinds:
        return "none"
    return kinds.pop() if len(kinds) == 1 else "mixed"


def _one(transport: Any, deadline: Deadline) -> dict[str, Any]:
    try:
        values = transport.metrics(deadline)
    except errors.UnimplementedError:
        values = from_server_info(transport.server_info(deadline))
    return {"address": transport.address, **values}


def collect(client: Any, timeout: float | None = None) -> dict[str, Any]:
    """The values of a client's server(s): :func:`merge` of one dict per server.

    A server that fails (unreachable, wrong token, ...) appears in ``"shards"`` as
    ``{"address", "error"}`` and is left out of the totals; if every server fails the first
    error is raised.

    Args:
      client: an :class:`ostinato.Client` (one address or several).
      timeout: seconds to wait for each server (None: the client's default).
    """
    transport = client.transport
    parts = list(getattr(transport, "shards", [transport]))
    shards: list[dict[str, Any]] = []
    first_error: BaseException | None = None
    for t in parts:
        deadline = Deadline.after(timeout)
        try:
            shards.append(_one(t, deadline))
        except errors.ReverbError as e:
            first_error = first_error or e
            shards.append({"address": t.address, "error": f"{type(e).__name__}: {e}"})
    if first_error is not None and all("error" in s for s in shards):
        raise first_error
    return merge(shards)

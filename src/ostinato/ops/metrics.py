"""Prometheus metrics, built at scrape time from what the server and the writers count anyway.

Nothing here runs on the paths that insert or sample: a scrape calls ``server.metrics()``
(:mod:`ostinato.ops.stats`) and :data:`ostinato.core.client_stats.CLIENT` and turns the values into
metric families (a custom ``Collector``), so metrics cost nothing between scrapes.

* ``Server(..., metrics_port=9090)`` / ``ostinato-server --metrics-port 9090``: the server's
  tables and requests, this process's writers, and the process (CPU, memory, GC).
* :func:`serve` -- the same endpoint for a process without a server (an actor): its writers'
  pending items and confirmation latency.
* :func:`client_metrics` -- the writers' values as a dict, without Prometheus.

Needs ``pip install 'ostinato[metrics]'`` (``prometheus-client``), imported only here and only
when an endpoint or a collector is made. See :data:`METRICS` for every metric.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator
from typing import Any

from ostinato import validate
from ostinato.core.client_stats import CLIENT
from ostinato.ops.gc_metrics import GC_METRICS, GcCollector

#: (field of ``metrics()["tables"][name]``, metric name, type, help); label ``table``.
TABLE_METRICS: tuple[tuple[str, str, str, str], ...] = (
    ("size", "ostinato_table_size", "gauge", "Items in the table."),
    ("max_size", "ostinato_table_max_size", "gauge", "The table's max_size."),
    (
        "inserts",
        "ostinato_table_inserts",
        "counter",
        "Items inserted (the rate limiter's count; Table.reset() sets it to 0).",
    ),
    ("samples", "ostinato_table_samples", "counter", "Items sampled (each sample counts)."),
    (
        "deletes",
        "ostinato_table_deletes",
        "counter",
        "Items deleted (evicted, sampled max_times_sampled times, or deleted by clients).",
    ),
    ("unique_samples", "ostinato_table_unique_samples", "counter", "Items sampled at least once."),
    ("episodes", "ostinato_table_episodes", "gauge", "Episodes with items in the table."),
    (
        "deleted_episodes",
        "ostinato_table_deleted_episodes",
        "counter",
        "Episodes whose last item left the table.",
    ),
    (
        "sampled_per_item",
        "ostinato_table_sampled_per_item",
        "gauge",
        "Samples per inserted item so far (samples / inserts).",
    ),
    (
        "samples_per_insert",
        "ostinato_rate_limiter_samples_per_insert",
        "gauge",
        "The rate limiter's target samples per insert.",
    ),
    (
        "min_size_to_sample",
        "ostinato_rate_limiter_min_size_to_sample",
        "gauge",
        "Items the table needs before sampling starts.",
    ),
    (
        "diff",
        "ostinato_rate_limiter_diff",
        "gauge",
        "inserts * samples_per_insert - samples: inserts wait while it would exceed max_diff, "
        "samples while it would fall below min_diff.",
    ),
    ("min_diff", "ostinato_rate_limiter_min_diff", "gauge", "The rate limiter's min_diff."),
    ("max_diff", "ostinato_rate_limiter_max_diff", "gauge", "The rate limiter's max_diff."),
    (
        "blocked_inserters",
        "ostinato_rate_limiter_blocked_inserters",
        "gauge",
        "Calls waiting for the rate limiter to admit an insert now (writers throttled).",
    ),
    (
        "blocked_samplers",
        "ostinato_rate_limiter_blocked_samplers",
        "gauge",
        "Calls waiting for the rate limiter to admit a sample now (learners throttled).",
    ),
    (
        "insert_blocked_seconds",
        "ostinato_rate_limiter_insert_blocked_seconds",
        "counter",
        "Seconds calls have waited to insert, added up over calls (its rate is the mean number "
        "of blocked inserters).",
    ),
    (
        "sample_blocked_seconds",
        "ostinato_rate_limiter_sample_blocked_seconds",
        "counter",
        "Seconds calls have waited to sample, added up over calls.",
    ),
)

#: (field of ``metrics()["server"]``, metric name, type, help); no labels.
SERVER_METRICS: tuple[tuple[str, str, str, str], ...] = (
    (
        "chunks",
        "ostinato_server_chunks",
        "gauge",
        "Chunks stored (shared by all tables of the server).",
    ),
    (
        "chunk_bytes",
        "ostinato_server_chunk_bytes",
        "gauge",
        "Bytes of row data held for all tables (uncompressed; a chunk that a writer in the "
        "server's process is still filling counts its whole buffer).",
    ),
    (
        "writer_streams",
        "ostinato_server_writer_streams",
        "gauge",
        "Insert streams (remote writers) open now.",
    ),
    (
        "rings_mapped",
        "ostinato_server_shm_rings",
        "gauge",
        "Writers' shared-memory rings mapped now.",
    ),
    (
        "ring_streams",
        "ostinato_server_shm_ring_streams",
        "counter",
        "Insert streams that mapped a shared-memory ring.",
    ),
    (
        "ring_bytes",
        "ostinato_server_shm_ring_bytes",
        "counter",
        "Row bytes read from shared-memory rings.",
    ),
    (
        "start_time",
        "ostinato_server_start_time_seconds",
        "gauge",
        "When the server started (Unix time).",
    ),
    ("uptime_seconds", "ostinato_server_uptime_seconds", "gauge", "Seconds since it started."),
)

#: (field of ``metrics()["server"]["checkpoint"]``, metric name, help); gauges, left out
#: while unknown (before the first checkpoint).
CHECKPOINT_METRICS: tuple[tuple[str, str, str], ...] = (
    (
        "last_seconds",
        "ostinato_checkpoint_last_duration_seconds",
        "Seconds the newest checkpoint took to write.",
    ),
    ("last_bytes", "ostinato_checkpoint_last_size_bytes", "Bytes of the newest checkpoint."),
    (
        "last_time",
        "ostinato_checkpoint_last_timestamp_seconds",
        "When the newest checkpoint was finished (Unix time).",
    ),
    ("age_seconds", "ostinato_checkpoint_age_seconds", "Seconds since the newest checkpoint."),
    (
        "restore_seconds",
        "ostinato_checkpoint_restore_duration_seconds",
        "Seconds the checkpoint loaded at start took.",
    ),
)

#: Every metric: name -> (type, labels, help), for the docs and the tests.
METRICS: dict[str, tuple[str, tuple[str, ...], str]] = {
    **{n: (k, ("table",), h) for _, n, k, h in TABLE_METRICS},
    "ostinato_table_info": (
        "info",
        ("table", "sampler", "remover"),
        "The table's sampler and remover (value 1).",
    ),
    **{n: (k, (), h) for _, n, k, h in SERVER_METRICS},
    **{n: (k, (), h) for _, n, k, h in GC_METRICS},
    "ostinato_server_requests": (
        "counter",
        ("method", "status"),
        "Requests served, by method and gRPC status (Insert: one per request message of a stream).",
    ),
    "ostinato_server_received_bytes": ("counter", ("method",), "Request bytes received."),
    "ostinato_server_sent_bytes": ("counter", ("method",), "Reply bytes sent."),
    "ostinato_checkpoints": (
        "counter",
        ("result",),
        "Checkpoints written (result ok) or failed (result error).",
    ),
    **{n: ("gauge", (), h) for _, n, h in CHECKPOINT_METRICS},
    "ostinato_writer_streams": (
        "gauge",
        ("address",),
        "Writer streams of this process, per server address.",
    ),
    "ostinato_writer_items_pending": (
        "gauge",
        ("address",),
        "Items this process's writers created that the server has not confirmed yet.",
    ),
    "ostinato_writer_requests_confirmed": (
        "counter",
        ("address",),
        "Insert requests (or, in process, rate-limited batches) confirmed.",
    ),
    "ostinato_writer_items_confirmed": (
        "counter",
        ("address",),
        "Items in those requests or batches.",
    ),
    "ostinato_writer_confirmation_latency_seconds": (
        "histogram",
        ("address",),
        "Seconds from an insert request being sent to the server confirming all its items "
        "(in process: from items being held back by the rate limiter to their insertion).",
    ),
}

_EXTRA = "pip install 'ostinato[metrics]'"


def require_prometheus() -> Any:
    """``prometheus_client``, or ImportError saying which extra to install."""
    try:
        import prometheus_client
    except ImportError as e:
        raise ImportError(
            f"Prometheus metrics need the prometheus-client package: {_EXTRA} "
            f"(or pip install prometheus-client). Server.metrics() works without it. ({e})"
        ) from e
    return prometheus_client


def client_metrics() -> dict[str, dict[str, Any]]:
    """This process's writer streams, per server address: ``streams``, items ``pending``,
    ``requests`` and items ``confirmed``, and the confirmation ``latency`` histogram
    (``bounds``, per-bucket ``counts`` with a last +inf bucket, ``sum``, ``count``).

    Over the network each Insert request is timed from being sent to its last item being
    confirmed. In process, items the rate limiter admits at once are in their table when
    ``create_item`` returns and are not timed; items it holds back are timed from being queued
    to being inserted.
    """
    return CLIENT.snapshot()


# -- collectors ----------------------------------------------------------------------------------
def _family(pc: Any, kind: str, name: str, doc: str, labels: list[str]) -> Any:
    m = pc.metrics_core
    if kind == "counter":
        return m.CounterMetricFamily(name, doc, labels=labels)
    if kind == "gauge":
        return m.GaugeMetricFamily(name, doc, labels=labels)
    raise ValueError(f"unknown metric type {kind!r}")


def _num(v: Any) -> float | None:
    if v is None:
        return None
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


def scalar_families(
    pc: Any, table: tuple[tuple[str, str, str, str], ...], values: dict[str, Any]
) -> Iterator[Any]:
    """One unlabelled family per ``(field, name, type, help)`` row of ``table`` whose field
    has a number in ``values``."""
    for field, name, kind, doc in table:
        v = _num(values.get(field))
        if v is not None:
            fam = _family(pc, kind, name, doc, [])
            fam.add_metric([], v)
            yield fam


def server_families(pc: Any, values: dict[str, Any]) -> Iterator[Any]:
    """Metric families of one ``server.metrics()`` dict."""
    tables = values.get("tables", {})
    for field, name, kind, doc in TABLE_METRICS:
        fam = _family(pc, kind, name, doc, ["table"])
        for tname, t in tables.items():
            v = _num(t.get(field))
            if v is not None:
                fam.add_metric([tname], v)
        yield fam
    info = pc.metrics_core.InfoMetricFamily(
        "ostinato_table", METRICS["ostinato_table_info"][2], labels=["table"]
    )
    for tname, t in tables.items():
        info.add_metric(
            [tname], {"sampler": str(t.get("sampler")), "remover": str(t.get("remover"))}
        )
    yield info
    server = values.get("server") or {}
    yield from scalar_families(pc, SERVER_METRICS, server)
    req = pc.metrics_core.CounterMetricFamily(
        "ostinato_server_requests",
        METRICS["ostinato_server_requests"][2],
        labels=["method", "status"],
    )
    for method, by_status in sorted((server.get("requests") or {}).items()):
        for status, n in sorted(by_status.items()):
            req.add_metric([method, status], float(n))
    yield req
    for field, name in (
        ("received_bytes", "ostinato_server_received_bytes"),
        ("sent_bytes", "ostinato_server_sent_bytes"),
    ):
        fam = pc.metrics_core.CounterMetricFamily(name, METRICS[name][2], labels=["method"])
        for method, n in sorted((server.get(field) or {}).items()):
            fam.add_metric([method], float(n))
        yield fam
    ck = server.get("checkpoint") or {}
    if ck:
        fam = pc.metrics_core.CounterMetricFamily(
            "ostinato_checkpoints", METRICS["ostinato_checkpoints"][2], labels=["result"]
        )
        fam.add_metric(["ok"], float(ck.get("saves") or 0))
        fam.add_metric(["error"], float(ck.get("failures") or 0))
        yield fam
        for field, name, doc in CHECKPOINT_METRICS:
            v = _num(ck.get(field))
            if v is not None:
                g = pc.metrics_core.GaugeMetricFamily(name, doc)
                g.add_metric([], v)
                yield g


def client_families(pc: Any, values: dict[str, dict[str, Any]]) -> Iterator[Any]:
    """Metric families of :func:`client_metrics`."""
    m = pc.metrics_core
    streams = m.GaugeMetricFamily(
        "ostinato_writer_streams", METRICS["ostinato_writer_streams"][2], labels=["address"]
    )
    pending = m.GaugeMetricFamily(
        "ostinato_writer_items_pending",
        METRICS["ostinato_writer_items_pending"][2],
        labels=["address"],
    )
    reqs = m.CounterMetricFamily(
        "ostinato_writer_requests_confirmed",
        METRICS["ostinato_writer_requests_confirmed"][2],
        labels=["address"],
    )
    items = m.CounterMetricFamily(
        "ostinato_writer_items_confirmed",
        METRICS["ostinato_writer_items_confirmed"][2],
        labels=["address"],
    )
    name = "ostinato_writer_confirmation_latency_seconds"
    hist = m.HistogramMetricFamily(name, METRICS[name][2], labels=["address"])
    for address, v in sorted(values.items()):
        streams.add_metric([address], v["streams"])
        pending.add_metric([address], v["pending"])
        reqs.add_metric([address], v["requests"])
        items.add_metric([address], v["confirmed"])
        lat = v["latency"]
        buckets, cum = [], 0
        for bound, n in zip([*lat["bounds"], math.inf], lat["counts"]):
            cum += n
            buckets.append(("+Inf" if bound == math.inf else repr(float(bound)), cum))
        hist.add_metric([address], buckets, lat["sum"])
    yield from (streams, pending, reqs, items, hist)


class ServerCollector:
    """A Prometheus collector of one server's :meth:`~ostinato.server.Server.metrics`."""

    def __init__(self, server: Any):
        self._server = server
        self._pc = require_prometheus()

    def describe(self) -> list[Any]:
        return []  # unchecked: families are built at scrape time

    def collect(self) -> Iterator[Any]:
        if self._server.stopped:
            return
        yield from server_families(self._pc, self._server.metrics())


class ClientCollector:
    """A Prometheus collector of :func:`client_metrics` (this process's writers)."""

    def __init__(self) -> None:
        self._pc = require_prometheus()

    def describe(self) -> list[Any]:
        return []

    def collect(self) -> Iterator[Any]:
        yield from client_families(self._pc, client_metrics())


def registry(server: Any = None, process: bool = True) -> Any:
    """A new ``CollectorRegistry`` with this process's writers, ``server``'s tables and
    requests (if given) and, with ``process``, the process's CPU, memory and GC metrics."""
    pc = require_prometheus()
    reg = pc.CollectorRegistry(auto_describe=False)
    if server is not None:
        reg.register(ServerCollector(server))
    reg.register(ClientCollector())
    if process:
        pc.ProcessCollector(registry=reg)
        pc.PlatformCollector(registry=reg)
        pc.GCCollector(registry=reg)
        reg.register(GcCollector())
    return reg


@dataclasses.dataclass
class Endpoint:
    """A running metrics HTTP endpoint (``GET /metrics``)."""

    host: str
    port: int
    registry: Any
    _httpd: Any = dataclasses.field(repr=False, default=None)
    _thread: Any = dataclasses.field(repr=False, default=None)

    @property
    def url(self) -> str:
        host = "localhost" if self.host in ("", "0.0.0.0", "::", "[::]") else self.host
        return f"http://{host}:{self.port}/metrics"

    def stop(self) -> None:
        """Stops serving (idempotent)."""
        httpd, self._httpd = self._httpd, None
        if httpd is not None:
            httpd.shutdown()
            httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)


def serve(
    port: int, *, server: Any = None, host: str = "0.0.0.0", process: bool = True
) -> Endpoint:
    """Serves Prometheus metrics over HTTP on ``host:port`` from a background thread.

    For a process with writers and no server (an actor), ``serve(9100)`` exports its writers'
    pending items and confirmation latency; ``Server(metrics_port=...)`` calls this with the
    server.

    Args:
      port: TCP port; 0 picks a free one (read it from the result's ``port``).
      server: a :class:`~ostinato.Server` whose tables and requests to export too.
      host: interface to listen on (all by default; the endpoint has no authentication,
        and tells table names and counts, never data).
      process: also export the process's CPU, memory and GC metrics.

    Raises:
      ImportError: prometheus-client is not installed (``pip install 'ostinato[metrics]'``).
      ValueError: the port is in use or cannot be bound.
    """
    validate.port("port", port)
    pc = require_prometheus()
    reg = registry(server, process)
    addr = host.strip("[]") if host else "0.0.0.0"
    if addr == "localhost":
        addr = "127.0.0.1"
    try:
        started = pc.start_http_server(port, addr=addr, registry=reg)
    except OSError as e:
        raise ValueError(f"metrics port ({port}) on {host} cannot be bound: {e}") from None
    if not isinstance(started, tuple):  # prometheus-client < 0.17 returned nothing
        raise ImportError(f"prometheus-client >= 0.17 is needed ({_EXTRA})")
    httpd, thread = started
    return Endpoint(host, int(httpd.server_address[1]), reg, httpd, thread)

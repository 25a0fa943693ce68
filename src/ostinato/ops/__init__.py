"""Operating Ostinato: what a running server reports, and how to look at it.

* :mod:`ostinato.ops.stats` -- the values (``Server.metrics()``, ``Client.metrics()``): per
  table, per server, merged over shards. Plain Python; no extra packages.
* :mod:`ostinato.ops.metrics` -- Prometheus metrics built from those values at scrape time
  (``Server(metrics_port=...)``, :func:`~ostinato.ops.metrics.serve` for actor processes,
  :func:`~ostinato.ops.metrics.client_metrics`); needs ``pip install 'ostinato[metrics]'``.
* :mod:`ostinato.ops.top` and :mod:`ostinato.ops.ostinato_cli` -- ``ostinato top ADDRESS`` (a live
  terminal view) and ``ostinato info ADDRESS [--json]``.

Importing this package imports none of them.
"""

"""The Prometheus endpoint: Server(metrics_port=), ostinato.ops.metrics.serve() and
ostinato-server --metrics-port, scraped over HTTP and read with prometheus_client's parser;
and the package without prometheus_client installed."""

from __future__ import annotations

import math
import os
import re
import socket
import subprocess
import sys
import textwrap
import time
import urllib.request

import numpy as np
import pytest

import ostinato as reverb
from ostinato.core.client_stats import LATENCY_BUCKETS
from ostinato.ops import metrics as ops_metrics

parser = pytest.importorskip("prometheus_client.parser")


def scrape(url: str) -> dict[str, dict[tuple, float]]:
    """name -> {sorted label items: value} for every sample of the endpoint."""
    text = urllib.request.urlopen(url, timeout=10).read().decode()
    out: dict[str, dict[tuple, float]] = {}
    for fam in parser.text_string_to_metric_families(text):
        for s in fam.samples:
            out.setdefault(s.name, {})[tuple(sorted(s.labels.items()))] = s.value
    return out


def _one(samples, name, **labels):
    return samples[name][tuple(sorted(labels.items()))]


def test_server_endpoint_exports_the_same_values_as_metrics(tmp_path, make_server):
    server = make_server(
        reverb.Table(
            "replay",
            reverb.selectors.Prioritized(0.6),
            reverb.selectors.Fifo(),
            100,
            reverb.rate_limiters.SampleToInsertRatio(2.0, 2, (0.0, 20.0)),
        ),
        reverb.Table.queue("q", 5),
        checkpointer=reverb.checkpointers.DefaultCheckpointer(str(tmp_path)),
        metrics_port=0,
    )
    assert isinstance(server.metrics_port, int) and server.metrics_port > 0
    remote = reverb.Client(f"localhost:{server.port}", in_process=False, unavailable_timeout=5)
    try:
        with remote.trajectory_writer(1) as w:
            for i in range(6):
                w.append({"x": np.full(3, i, np.float32)})
                w.create_item("replay", 1.0 + i, {"x": w.history["x"][-1]})
            w.flush()
        list(remote.sample("replay", num_samples=4))
        remote.checkpoint()
        values = server.metrics()
        got = scrape(f"http://localhost:{server.metrics_port}/metrics")
    finally:
        remote.close()
    t = values["tables"]["replay"]
    for field, name, kind, _ in ops_metrics.TABLE_METRICS:
        exported = name + ("_total" if kind == "counter" else "")
        v = _one(got, exported, table="replay")
        if field.endswith("_seconds"):
            assert v == pytest.approx(t[field], abs=0.5), name
        else:
            assert v == pytest.approx(t[field]), name
    assert _one(got, "ostinato_table_inserts_total", table="replay") == 6
    assert _one(got, "ostinato_table_samples_total", table="replay") == 4
    assert _one(got, "ostinato_table_size", table="q") == 0
    assert (
        _one(got, "ostinato_table_info", table="replay", sampler="prioritized(0.6)", remover="fifo")
        == 1
    )
    s = values["server"]
    assert _one(got, "ostinato_server_chunk_bytes") == s["chunk_bytes"] > 0
    assert _one(got, "ostinato_server_chunks") == s["chunks"]
    assert _one(got, "ostinato_server_requests_total", method="Sample", status="OK") >= 1
    assert _one(got, "ostinato_server_requests_total", method="Insert", status="OK") >= 1
    assert _one(got, "ostinato_server_received_bytes_total", method="Insert") > 0
    assert _one(got, "ostinato_server_sent_bytes_total", method="Sample") > 0
    assert _one(got, "ostinato_checkpoints_total", result="ok") == 1
    assert _one(got, "ostinato_checkpoints_total", result="error") == 0
    ck = s["checkpoint"]
    assert _one(got, "ostinato_checkpoint_last_size_bytes") == ck["last_bytes"] > 0
    assert _one(got, "ostinato_checkpoint_last_duration_seconds") == pytest.approx(
        ck["last_seconds"]
    )
    assert 0 <= _one(got, "ostinato_checkpoint_age_seconds") < 60
    # this process's writer (to the server over gRPC) and the process itself
    addr = f"localhost:{server.port}"
    assert _one(got, "ostinato_writer_items_confirmed_total", address=addr) >= 6
    assert _one(got, "ostinato_writer_items_pending", address=addr) == 0
    count = _one(got, "ostinato_writer_confirmation_latency_seconds_count", address=addr)
    assert count >= 1
    assert (
        _one(got, "ostinato_writer_confirmation_latency_seconds_bucket", address=addr, le="+Inf")
        == count
    )
    assert "process_resident_memory_bytes" in got
    # every documented metric is exported (the checkpoint restore gauge only after a restore,
    # the GC figures only where ostinato.gc_pauses is installed: a server process)
    names = {re.sub(r"_(total|count|sum|bucket)$", "", n) for n in got}
    gc_names = {n for _, n, _, _ in ops_metrics.GC_METRICS}
    missing = {
        n
        for n in ops_metrics.METRICS
        if n not in names
        and n != "ostinato_checkpoint_restore_duration_seconds"
        and n not in gc_names
    }
    assert not missing


def test_endpoint_stops_with_the_server_and_scrapes_add_nothing_per_item(make_server):
    server = make_server(reverb.Table.queue("q", 5), metrics_port=0)
    url = f"http://localhost:{server.metrics_port}/metrics"
    scrape(url)
    before = server.metrics()["server"]["requests"]
    scrape(url)
    assert server.metrics()["server"]["requests"] == before  # scrapes are not RPCs
    server.stop()
    with pytest.raises(OSError):
        urllib.request.urlopen(url, timeout=2)


def test_metrics_port_in_use_is_a_clear_error_and_frees_the_server_port(make_server):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        busy = s.getsockname()[1]
        with pytest.raises(ValueError, match=f"metrics port \\({busy}\\)"):
            make_server(reverb.Table.queue("q", 5), metrics_port=busy)
    with pytest.raises(ValueError, match="metrics_port"):
        reverb.Server([reverb.Table.queue("q", 5)], metrics_port=-1)


def test_serve_for_an_actor_process_exports_its_writers(make_server):
    server = make_server(reverb.Table.queue("q", 50))
    addr = f"localhost:{server.port}"
    endpoint = ops_metrics.serve(0, host="127.0.0.1", process=False)
    client = reverb.Client(addr, in_process=False, unavailable_timeout=5)
    try:
        with client.trajectory_writer(1) as w:
            for i in range(10):
                w.append({"x": np.int32(i)})
                w.create_item("q", 1.0, {"x": w.history["x"][-1]})
            w.flush()
        got = scrape(endpoint.url)
        assert "ostinato_table_size" not in got and "process_cpu_seconds_total" not in got
        assert _one(got, "ostinato_writer_items_confirmed_total", address=addr) >= 10
        assert _one(got, "ostinato_writer_requests_confirmed_total", address=addr) >= 1
        bounds = [
            float(dict(k)["le"])
            for k in got["ostinato_writer_confirmation_latency_seconds_bucket"]
            if dict(k)["address"] == addr
        ]
        assert sorted(bounds) == [*LATENCY_BUCKETS, math.inf]
    finally:
        client.close()
        endpoint.stop()


def test_ostinato_server_metrics_port_flag(tmp_path):
    config = tmp_path / "server.toml"
    config.write_text(
        textwrap.dedent("""
        [[tables]]
        table_name = "replay"
        sampler = { uniform = true }
        remover = { fifo = true }
        max_size = 100
        rate_limiter = { samples_per_insert = 1.0, min_size_to_sample = 1 }
        """)
    )
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        mport = s.getsockname()[1]
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "ostinato.server_cli",
            "--config",
            str(config),
            "--port",
            "0",
            "--metrics-port",
            str(mport),
            "--no-progress",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        line = proc.stdout.readline()
        assert "listening on port" in line, proc.stderr.read() if proc.poll() is not None else line
        got = {}
        end = time.monotonic() + 20
        while time.monotonic() < end and not got:
            try:
                got = scrape(f"http://localhost:{mport}/metrics")
            except OSError:
                time.sleep(0.1)
        assert _one(got, "ostinato_table_max_size", table="replay") == 100
    finally:
        proc.terminate()
        proc.wait(20)


_HIDDEN = """
import sys
class _Hide:
    def find_spec(self, name, path=None, target=None):
        if name == "prometheus_client" or name.startswith("prometheus_client."):
            raise ImportError("prometheus_client hidden by the test")
sys.meta_path.insert(0, _Hide())
"""


def test_metrics_without_prometheus_client_installed():
    code = _HIDDEN + textwrap.dedent("""
        import numpy as np
        import ostinato as reverb
        from ostinato.ops.metrics import client_metrics
        s = reverb.Server([reverb.Table.queue("q", 5)])
        c = s.localhost_client()
        c.insert(np.zeros(2), {"q": 1.0})
        assert s.metrics()["tables"]["q"]["size"] == 1
        assert c.metrics()["tables"]["q"]["inserts"] == 1
        assert reverb.Client(f"localhost:{s.port}", in_process=False).metrics()["server"]
        assert isinstance(client_metrics(), dict)
        try:
            reverb.Server([reverb.Table.queue("p", 5)], metrics_port=0)
        except ImportError as e:
            assert "ostinato[metrics]" in str(e), e
        else:
            raise AssertionError("metrics_port without prometheus_client")
        assert "prometheus_client" not in sys.modules
        s.stop()
        print("OK")
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip().endswith("OK"), out.stderr[-3000:]

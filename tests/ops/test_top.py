"""``ostinato top`` in a real terminal (tmux: send-keys / capture-pane) and ``ostinato info``
(table and JSON), against real servers; and the view's rendering of known values."""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from _ops_util import Tmux, serve_without_stats
from rich.console import Console

import ostinato as reverb
from ostinato.ops import ostinato_cli as cli
from ostinato.ops.top import TopModel, fmt_bytes, fmt_count, fmt_rate, fmt_seconds, fmt_short

ROOT = Path(__file__).resolve().parents[2]
OSTINATO = f"{sys.executable} -m ostinato.ops"


def _text(renderable, width=120) -> str:
    console = Console(width=width, record=True, force_terminal=False, color_system=None)
    console.print(renderable)
    return console.export_text()


def _values(inserts, samples, blocked_ins=0, ins_secs=0.0, age=12.0):
    table = {
        "size": min(inserts, 100),
        "max_size": 100,
        "inserts": inserts,
        "samples": samples,
        "samples_per_insert": 2.0,
        "diff": inserts * 2.0 - samples,
        "min_diff": 0.0,
        "max_diff": 50.0,
        "blocked_inserters": blocked_ins,
        "blocked_samplers": 0,
        "insert_blocked_seconds": ins_secs,
        "sample_blocked_seconds": 0.0,
    }
    server = {
        "uptime_seconds": 3700.0,
        "chunk_bytes": 3 << 20,
        "chunks": 42,
        "writer_streams": 2,
        "rings_mapped": 1,
        "requests": {"Sample": {"OK": samples}},
        "received_bytes": {"Insert": inserts * 100},
        "sent_bytes": {},
        "checkpoint": {
            "last_time": 1.0,
            "age_seconds": age,
            "last_seconds": 0.5,
            "last_bytes": 2048,
            "saves": 3,
            "failures": 0,
        },
    }
    one = {
        "address": "h:1",
        "source": "stats",
        "version": "0.1.0",
        "server": server,
        "tables": {"replay": table},
    }
    return {**one, "shards": [one]}


def test_the_view_shows_rates_ratio_blocked_and_checkpoint_age():
    m = TopModel("h:1", 1.0)
    m.update(_values(100, 100), now=10.0)
    first = _text(m.render())
    assert "replay" in first and "100 / 100" in first and "3.0 MiB in 42 chunks" in first
    assert "checkpoint 12.0 s ago (took 500 ms, 2.0 KiB)" in first
    assert "up 1h 01m" in first
    m.update(_values(300, 500, blocked_ins=2, ins_secs=1.5), now=12.0)
    text = _text(m.render())
    row = next(line for line in text.splitlines() if line.lstrip().startswith("replay"))
    # 200 inserts and 400 samples in 2 s; ratio 2.00 against the target 2; 2 writers blocked,
    # 0.75 on average over the interval (1.5 blocked-seconds in 2 s)
    assert re.search(r"\b100\s+200\s+2\.00 \(2\)", row), row
    assert "2 ~0.8" in row and "0 ~0.0" in row
    assert "q quit" in text


def test_the_view_of_a_sharded_set_and_of_failures():
    v = _values(10, 0)
    a, b = dict(v["shards"][0], address="a:1"), dict(v["shards"][0], address="b:2")
    m = TopModel("a:1,b:2", 1.0)
    m.update({**v, "shards": [a, b, {"address": "c:3", "error": "UnavailableError: down"}]})
    text = _text(m.render())
    assert "2/3 shards answering" in text and "shard c:3: UnavailableError: down" in text
    assert "└ a:1" in text and "└ b:2" in text
    m.failed("UnavailableError: gone")
    assert "cannot read a:1,b:2: UnavailableError: gone" in _text(m.render())
    old = TopModel("h:1", 1.0)
    old_values = _values(1, 0)
    old_values.update(source="server_info", server={})
    old_values["tables"]["replay"].update(blocked_inserters=None, insert_blocked_seconds=None)
    old.update(old_values)
    text = _text(old.render())
    assert "without the Stats call" in text and "n/a" in text


def test_a_min_size_limiter_has_no_ratio_target():
    v = _values(10, 0)
    v["tables"]["replay"].update(min_diff=-1.8e308, max_diff=1.8e308, samples_per_insert=1.0)
    m = TopModel("h:1", 1.0)
    m.update(v, now=0.0)
    v2 = _values(20, 5)
    v2["tables"]["replay"].update(min_diff=-1.8e308, max_diff=1.8e308, samples_per_insert=1.0)
    m.update(v2, now=1.0)
    row = next(line for line in _text(m.render()).splitlines() if "replay" in line)
    assert "0.50 " in row and "(1)" not in row and "[-∞, ∞]" in row


def test_formatting():
    assert [fmt_count(x) for x in (None, 5, 1234, 123_456, 12_345_678, 2.5, 1.8e308)] == [
        "-",
        "5",
        "1,234",
        "123k",
        "12.3M",
        "2.50",
        "∞",
    ]
    assert [fmt_short(x) for x in (950, 4000, 12_500, 2e6, -1.8e308, 0.5)] == [
        "950",
        "4k",
        "12.5k",
        "2M",
        "-∞",
        "0.50",
    ]
    assert [fmt_rate(x) for x in (None, 3.14, 395.9, 3111.5)] == ["-", "3.1", "396", "3,112"]
    assert fmt_bytes(1536) == "1.5 KiB" and fmt_bytes(10) == "10 B"
    assert [fmt_seconds(x) for x in (0.25, 5, 125, 7300, 200_000)] == [
        "250 ms",
        "5.0 s",
        "2m 05s",
        "2h 01m",
        "2d 7h",
    ]


# -- a real terminal ------------------------------------------------------------------------------
def _ratio_server(make_server):
    return make_server(
        reverb.Table(
            "replay",
            reverb.selectors.Uniform(),
            reverb.selectors.Fifo(),
            1000,
            reverb.rate_limiters.SampleToInsertRatio(1.0, 5, (0.0, 10.0)),
        ),
        reverb.Table.queue("queue", 50),
    )


def _restored(screen: str) -> bool:
    lines = {line.strip() for line in screen.splitlines()}
    return "EXIT=0" in lines and "icanon" in lines and "echo" in lines


@pytest.mark.parametrize("quit_key", ["q", "C-c"])
def test_top_in_a_real_terminal_quits_and_restores_it(make_server, quit_key):
    server = _ratio_server(make_server)
    address = f"localhost:{server.port}"
    client = server.localhost_client()
    stop = threading.Event()

    def load():  # the writer is held back by the ratio limiter until the sampler takes some
        w = client.trajectory_writer(1)
        i = 0
        while not stop.is_set():
            w.append({"x": np.float32(i)})
            w.create_item("replay", 1.0, {"x": w.history["x"][-1]})
            i += 1
            if i % 10 == 0:
                time.sleep(0.05)
                list(client.sample("replay", num_samples=5))
        w.close()  # items held back are dropped

    th = threading.Thread(target=load, daemon=True)
    th.start()
    try:
        with Tmux(120, 40, cwd=str(ROOT)) as term:
            term.type(
                f"{OSTINATO} top {address} --interval 0.3; echo EXIT=$?; "
                "stty -a | tr ' ' '\\n' | grep -E '^-?(icanon|echo)$'"
            )
            screen = term.wait_for(
                lambda s: (
                    "replay" in s
                    and "queue" in s
                    and re.search(r"\d+ / 1k", s)
                    and "samples/insert" in s
                ),
                what="the tables",
            )
            assert f"ostinato top  {address}" in screen
            assert "q quit" in screen
            # the rates appear from the second refresh on
            term.wait_for(
                lambda s: re.search(r"replay\s+\S+\s+[\d,]+ / 1k\s+[\d.,k]+\s+", s) is not None,
                what="rates",
            )
            term.keys(quit_key)
            screen = term.wait_for(_restored, timeout=15, what="top to exit")
            assert "samples/insert" not in screen  # the alternate screen was left
            assert "-icanon" not in screen and "-echo" not in screen
    finally:
        stop.set()
        th.join(10)


def test_top_shows_an_older_server_and_an_unreachable_one(make_server):
    real = make_server(reverb.Table.queue("q", 10))
    real.localhost_client().insert(np.ones(2), {"q": 1.0})
    gs, old_address = serve_without_stats(real)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"localhost:{s.getsockname()[1]}"
    try:
        with Tmux(120, 30, cwd=str(ROOT)) as term:
            term.type(f"{OSTINATO} top {old_address} --interval 0.3; echo EXIT=$?")
            screen = term.wait_for(
                lambda s: "without the Stats call" in s and "1 / 10" in s, what="the fallback view"
            )
            assert "n/a" in screen
            term.keys("q")
            term.wait_for(lambda s: "EXIT=0" in s, timeout=15, what="exit")
            term.type(f"clear; {OSTINATO} top {dead} --interval 0.3 --timeout 1; echo EXIT=$?")
            term.wait_for(lambda s: f"cannot read {dead}" in s, what="the error")
            t0 = time.monotonic()
            term.keys("q")
            term.wait_for(lambda s: "EXIT=0" in s, timeout=15, what="exit")
            assert time.monotonic() - t0 < 5  # q works while the server does not answer
    finally:
        gs.stop(0)


# -- ostinato info ------------------------------------------------------------------------------
def _info(*args, timeout=60):
    return subprocess.run(
        [sys.executable, "-m", "ostinato.ops", "info", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
    )


def test_info_json_for_scripts(make_server):
    a = _ratio_server(make_server)
    b = _ratio_server(make_server)
    a.localhost_client().insert(np.ones(2), {"replay": 1.0, "queue": 1.0})
    out = _info(f"localhost:{a.port},localhost:{b.port}", "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["tables"]["replay"]["size"] == 1 and data["tables"]["queue"]["max_size"] == 100
    assert [s["tables"]["replay"]["size"] for s in data["shards"]] == [1, 0]
    assert data["server"]["chunks"] >= 1
    text = _info(f"localhost:{a.port}")
    assert text.returncode == 0 and "replay" in text.stdout and "queue" in text.stdout


def test_info_errors():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"localhost:{s.getsockname()[1]}"
    out = _info(dead, "--json", "--timeout", "1")
    assert out.returncode == 1 and dead in out.stderr and "Unavailable" in out.stderr
    out = _info("no-port-here")
    assert out.returncode == 2 and "host:port" in out.stderr
    out = _info("localhost:1", "--tls-ca", "/nonexistent.pem")
    assert out.returncode != 0 and "--tls-ca" in out.stderr


def test_token_and_tls_options_reach_the_server(make_server, tmp_path):
    trustme = pytest.importorskip("trustme")
    ca = trustme.CA()
    cert = ca.issue_cert("localhost")
    tls = reverb.ServerTLS(
        b"".join(c.bytes() for c in cert.cert_chain_pems), cert.private_key_pem.bytes()
    )
    server = make_server(reverb.Table.queue("q", 10), token="s3cret", tls=tls)
    server.localhost_client().insert(np.ones(1), {"q": 1.0})
    ca_file = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    address = f"localhost:{server.port}"
    out = _info(address, "--json", "--tls-ca", str(ca_file), "--token", "s3cret")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["tables"]["q"]["size"] == 1
    out = _info(address, "--json", "--tls-ca", str(ca_file), "--timeout", "2")
    assert out.returncode == 1 and "credentials" in out.stderr


def test_the_console_script_is_declared():
    text = (ROOT / "pyproject.toml").read_text()
    assert 'ostinato = "ostinato.ops.ostinato_cli:main"' in text
    assert callable(cli.main)
    assert 'metrics = ["prometheus-client' in text


def test_help_shows_no_rest_markup_and_errors_have_one_prefix(capsys):
    for argv in (["--help"], ["info", "--help"], ["top", "--help"]):
        with pytest.raises(SystemExit):
            cli.main(argv)
        out = capsys.readouterr().out
        assert "``" not in out and ":mod:" not in out, out
    assert cli.main(["info", "no-port-here"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("ostinato info: ") and err.count("ostinato") == 1, err

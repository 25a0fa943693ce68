"""The ostinato-server command: Reverb's README config, TOML, bad configs, SIGTERM + checkpoint."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

import ostinato as reverb
from ostinato import cli

README_CONFIG = """
port: 8000
tables: {
  table_name: "my_table"
  sampler: {
    fifo: true
  }
  remover: {
    fifo: true
  }
  max_size: 200
  max_times_sampled: 5
  rate_limiter: {
    min_size_to_sample: 1
    samples_per_insert: 1
    min_diff: -1.7976931348623157e+308
    max_diff: 1.7976931348623157e+308
  }
}
"""

TOML_CONFIG = """
port = 0
checkpoint_keep = 2
[[tables]]
table_name = "replay"
max_size = 1000
sampler = { prioritized = { priority_exponent = 0.6 } }
remover = { fifo = true }
rate_limiter = { samples_per_insert = 4.0, min_size_to_sample = 1, min_diff = -100.0, max_diff = 100.0 }
"""


def _start(args: list[str]) -> tuple[subprocess.Popen, int]:
    p = subprocess.Popen([sys.executable, "-m", "ostinato.cli", *args, "--no-progress"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = p.stdout.readline()
    if "listening on port" not in line:
        p.kill()
        raise AssertionError(line + p.stderr.read())
    return p, int(line.rsplit(" ", 1)[1])


def test_readme_config_serves_a_client_and_checkpoints_on_sigterm(tmp_path):
    cfg = tmp_path / "reverb.config"
    cfg.write_text(README_CONFIG)
    ck = tmp_path / "ckpt"
    args = ["--config", str(cfg), "--port", "0", "--checkpoint-dir", str(ck),
            "--checkpoint-on-exit"]
    p, port = _start(args)
    try:
        client = reverb.Client(f"localhost:{port}")
        client.insert([np.arange(3, dtype=np.float32)], {"my_table": 1.0})
        s = next(iter(client.sample("my_table", 1)))
        np.testing.assert_array_equal(s[0].data[0], np.arange(3, dtype=np.float32))
        p.send_signal(signal.SIGTERM)
        assert p.wait(60) == 0, p.stderr.read()
    finally:
        if p.poll() is None:
            p.kill()
    assert len(os.listdir(ck)) == 1
    p, port = _start(args)  # restarted: the item is back
    try:
        info = reverb.Client(f"localhost:{port}").server_info()
        assert info["my_table"].current_size == 1
        p.send_signal(signal.SIGINT)
        assert p.wait(60) == 0
    finally:
        if p.poll() is None:
            p.kill()


def test_toml_config(tmp_path):
    cfg = tmp_path / "server.toml"
    cfg.write_text(TOML_CONFIG)
    tables = cli.tables_from_config(cli.load_config(str(cfg)))
    assert tables[0].name == "replay" and tables[0].sampler.options().prioritized


@pytest.mark.parametrize("text,field", [
    ("tables: { table_name: 'a' max_size: 10 sampler { fifo: true } remover { fifo: true } }",
     "rate_limiter"),
    ("tables: { table_name: 'a' max_size: 10 sampler { fifo: false } remover { fifo: true } "
     "rate_limiter { samples_per_insert: 1 min_size_to_sample: 1 } }", "sampler.fifo"),
    ("tables: { table_name: 'a' max_sise: 10 }", "max_sise"),
    ("tables: { table_name: 'a' max_size: 0 sampler { fifo: true } remover { fifo: true } "
     "rate_limiter { samples_per_insert: 1 min_size_to_sample: 1 } }", "max_size"),
    ("port: 1", "tables"),
])
def test_bad_config_names_the_field(tmp_path, text, field):
    cfg = tmp_path / "bad.config"
    cfg.write_text(text)
    p = subprocess.run([sys.executable, "-m", "ostinato.cli", "--config", str(cfg)],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2
    assert field in p.stderr and "bad config" in p.stderr, p.stderr


def test_periodic_flag(tmp_path):
    cfg = tmp_path / "reverb.config"
    cfg.write_text(README_CONFIG)
    p, _ = _start(["--config", str(cfg), "--port", "0", "--checkpoint-dir", str(tmp_path / "c"),
                   "--checkpoint-every", "0.2"])
    try:
        deadline = time.time() + 20
        while not os.path.isdir(tmp_path / "c") or not os.listdir(tmp_path / "c"):
            assert time.time() < deadline
            time.sleep(0.1)
    finally:
        p.send_signal(signal.SIGTERM)
        assert p.wait(60) == 0

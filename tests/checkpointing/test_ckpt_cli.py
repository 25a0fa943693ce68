"""The ostinato-server command: Reverb's README config, TOML, YAML, bad configs, TLS and token
flags, SIGTERM + checkpoint."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

import ostinato as reverb
from _helpers import wait_until
from ostinato import server_cli as cli
from ostinato import server_config

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
rate_limiter = { samples_per_insert = 4.0, min_size_to_sample = 1, \
min_diff = -100.0, max_diff = 100.0 }
"""


YAML_CONFIG = """
port: 0
checkpoint_keep: 2
tables:
  - table_name: replay
    max_size: 1000
    sampler: {prioritized: {priority_exponent: 0.6}}
    remover: {fifo: true}
    rate_limiter:
      samples_per_insert: 4.0
      min_size_to_sample: 1
      min_diff: -100.0
      max_diff: 100.0
"""


def _start(args: list[str]) -> tuple[subprocess.Popen, int]:
    p = subprocess.Popen(
        [sys.executable, "-m", "ostinato.server_cli", *args, "--no-progress"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    line = p.stdout.readline()
    if "listening on port" not in line:
        p.kill()
        raise AssertionError(line + p.stderr.read())
    return p, int(line.rsplit(" ", 1)[1])


def test_readme_config_serves_a_client_and_checkpoints_on_sigterm(tmp_path):
    cfg = tmp_path / "reverb.config"
    cfg.write_text(README_CONFIG)
    ck = tmp_path / "ckpt"
    args = [
        "--config",
        str(cfg),
        "--port",
        "0",
        "--checkpoint-dir",
        str(ck),
        "--checkpoint-on-exit",
    ]
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


@pytest.mark.parametrize(
    "text,field",
    [
        (
            "tables: { table_name: 'a' max_size: 10 sampler { fifo: true } "
            "remover { fifo: true } }",
            "rate_limiter",
        ),
        (
            "tables: { table_name: 'a' max_size: 10 sampler { fifo: false } remover { fifo: true } "
            "rate_limiter { samples_per_insert: 1 min_size_to_sample: 1 } }",
            "sampler.fifo",
        ),
        ("tables: { table_name: 'a' max_sise: 10 }", "max_sise"),
        (
            "tables: { table_name: 'a' max_size: 0 sampler { fifo: true } remover { fifo: true } "
            "rate_limiter { samples_per_insert: 1 min_size_to_sample: 1 } }",
            "max_size",
        ),
        ("port: 1", "tables"),
    ],
)
def test_bad_config_names_the_field(tmp_path, text, field):
    cfg = tmp_path / "bad.config"
    cfg.write_text(text)
    p = subprocess.run(
        [sys.executable, "-m", "ostinato.server_cli", "--config", str(cfg)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode == 2
    assert field in p.stderr and "bad config" in p.stderr, p.stderr


def test_periodic_flag(tmp_path):
    cfg = tmp_path / "reverb.config"
    cfg.write_text(README_CONFIG)
    p, _ = _start(
        [
            "--config",
            str(cfg),
            "--port",
            "0",
            "--checkpoint-dir",
            str(tmp_path / "c"),
            "--checkpoint-every",
            "0.2",
        ]
    )
    try:
        wait_until(
            lambda: os.path.isdir(tmp_path / "c") and os.listdir(tmp_path / "c"),
            20,
            "a periodic checkpoint",
            interval=0.1,
        )
    finally:
        p.send_signal(signal.SIGTERM)
        assert p.wait(60) == 0


# -- YAML -----------------------------------------------------------------------------------------
def _stop(p: subprocess.Popen) -> None:
    if p.poll() is None:
        p.send_signal(signal.SIGTERM)
        try:
            assert p.wait(60) == 0, p.stderr.read()
        finally:
            if p.poll() is None:
                p.kill()


def _insert_and_sample(client, table: str, value: float = 1.0) -> None:
    client.insert([np.full(3, value, dtype=np.float32)], {table: 1.0})
    s = next(iter(client.sample(table, 1)))
    np.testing.assert_array_equal(s[0].data[0], np.full(3, value, dtype=np.float32))


def test_yaml_and_toml_configs_are_the_same_config(tmp_path):
    (tmp_path / "a.toml").write_text(TOML_CONFIG)
    (tmp_path / "a.yaml").write_text(YAML_CONFIG)
    assert cli.load_config(str(tmp_path / "a.yaml")) == cli.load_config(str(tmp_path / "a.toml"))


@pytest.mark.parametrize(
    "name,text",
    [("server.yaml", YAML_CONFIG), ("server.yml", YAML_CONFIG), ("server.toml", TOML_CONFIG)],
)
def test_yaml_or_toml_config_serves_a_client(tmp_path, name, text):
    cfg = tmp_path / name
    cfg.write_text(text)
    p, port = _start(["--config", str(cfg)])  # port 0 in the file: a free port is picked
    try:
        client = reverb.Client(f"localhost:{port}")
        info = client.server_info()["replay"]
        assert info.max_size == 1000 and info.sampler_options.prioritized.priority_exponent == 0.6
        assert info.rate_limiter_info.samples_per_insert == 4.0
        _insert_and_sample(client, "replay")
    finally:
        _stop(p)


def test_yaml_without_pyyaml_says_what_to_install(tmp_path, monkeypatch):
    cfg = tmp_path / "server.yaml"
    cfg.write_text(YAML_CONFIG)
    monkeypatch.setitem(sys.modules, "yaml", None)  # import yaml -> ImportError
    with pytest.raises(cli.ConfigError, match=r"needs the 'pyyaml' package.*ostinato\[yaml\]"):
        cli.load_config(str(cfg))


def test_toml_on_python_3_10_without_tomli_says_what_to_install(tmp_path, monkeypatch):
    cfg = tmp_path / "server.toml"
    cfg.write_text(TOML_CONFIG)
    monkeypatch.setitem(sys.modules, "tomllib", None)
    monkeypatch.setitem(sys.modules, "tomli", None)
    with pytest.raises(cli.ConfigError, match="needs the 'tomli' package"):
        cli.load_config(str(cfg))


def test_bad_yaml_config_exits_2_naming_the_field(tmp_path):
    cfg = tmp_path / "bad.yaml"
    cfg.write_text(YAML_CONFIG.replace("max_size: 1000", "max_size: 1000\n    max_times_sample: 5"))
    p = subprocess.run(
        [sys.executable, "-m", "ostinato.server_cli", "--config", str(cfg)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode == 2, p.stderr
    assert "bad config" in p.stderr and "max_times_sample" in p.stderr, p.stderr
    assert "Traceback" not in p.stderr


@pytest.mark.parametrize(
    "old,new,field",
    [
        ("port: 0", "port: 0\ntabels: []", "tabels"),  # misspelt top level
        ("max_size: 1000", "max_size: 10.5", "max_size"),  # not an integer
        ("max_size: 1000", "max_size: true", "max_size"),
        ("max_size: 1000", "max_size: 1000\n    max_times_sampled: x", "max_times_sampled"),
        ("max_size: 1000", "", "max_size"),  # missing
        ("remover: {fifo: true}", "remover: {heap: true}", "remover.heap"),  # not a message
        ("remover: {fifo: true}", "remover: {heap: {min_heap: 1}}", "min_heap"),
        ("remover: {fifo: true}", "remover: {fifo: false}", "remover.fifo"),
        ("remover: {fifo: true}", "remover: {fifo: true, lifo: true}", "remover"),
        ("priority_exponent: 0.6", "priority_exponent: x", "priority_exponent"),
        ("priority_exponent: 0.6", "exponent: 0.6", "exponent"),
        ("min_size_to_sample: 1", "min_size_to_sample: 1.5", "min_size_to_sample"),
        ("samples_per_insert: 4.0", "samples_per_insert: -1", "rate_limiter"),
        ("min_diff: -100.0", "min_dif: -100.0", "min_dif"),
        ("port: 0", "port: 70000", "port"),
        ("port: 0", "port: zero", "port"),
        ("checkpoint_keep: 2", "checkpoint_keep: 0", "checkpoint_keep"),
        ("checkpoint_keep: 2", "checkpoint_every_seconds: -5", "checkpoint_every_seconds"),
        ("table_name: replay", "table_name: ''", "table_name"),
        ("max_size: 1000", "max_size: [1000", "line"),  # YAML syntax error
    ],
)
def test_bad_yaml_configs(tmp_path, capsys, old, new, field):
    cfg = tmp_path / "bad.yaml"
    assert old in YAML_CONFIG
    cfg.write_text(YAML_CONFIG.replace(old, new))
    assert cli.main(["--config", str(cfg), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "bad config" in err and field in err, err


@pytest.mark.parametrize(
    "text,what", [("- a\n- b\n", "mapping"), ("just text\n", "mapping"), ("port: 1\n", "tables")]
)
def test_yaml_document_of_the_wrong_shape(tmp_path, capsys, text, what):
    cfg = tmp_path / "bad.yml"
    cfg.write_text(text)
    assert cli.main(["--config", str(cfg)]) == 2
    assert what in capsys.readouterr().err


def test_duplicate_table_names_are_a_config_error(tmp_path, capsys):
    cfg = tmp_path / "dup.yaml"
    table = YAML_CONFIG.split("tables:\n", 1)[1]
    cfg.write_text(YAML_CONFIG + table)
    assert cli.main(["--config", str(cfg)]) == 2
    assert "tables[1].table_name ('replay')" in capsys.readouterr().err


# -- TLS and token flags -------------------------------------------------------------------------
@pytest.fixture(scope="module")
def ca():
    trustme = pytest.importorskip("trustme")  # test-only dependency, as in tests/wire
    return trustme.CA()


def _cert_files(ca, tmp_path, *names) -> tuple[str, str]:
    cert = ca.issue_cert(*(names or ("localhost", "127.0.0.1")))
    chain, key = tmp_path / "chain.pem", tmp_path / "key.pem"
    chain.write_bytes(b"".join(b.bytes() for b in cert.cert_chain_pems))
    cert.private_key_pem.write_to_path(str(key))
    return str(chain), str(key)


def test_tls_flags(tmp_path, ca):
    cfg = tmp_path / "server.yaml"
    cfg.write_text(YAML_CONFIG)
    chain, key = _cert_files(ca, tmp_path, "replay.ostinato.test")
    p, port = _start(["--config", str(cfg), "--tls-cert", chain, "--tls-key", key])
    try:
        good = reverb.Client(
            f"localhost:{port}",
            in_process=False,
            root_certificates=ca.cert_pem.bytes(),
            tls_server_name="replay.ostinato.test",
        )
        _insert_and_sample(good, "replay", 2.0)
        address = f"localhost:{port}"
        plain = reverb.Client(address, in_process=False, unavailable_timeout=0.5)
        t0 = time.monotonic()
        with pytest.raises(reverb.errors.UnavailableError, match=address) as ei:
            plain.insert([np.zeros(3, np.float32)], {"replay": 1.0})
        assert time.monotonic() - t0 < 10 and ei.value.address == address
        assert good.server_info()["replay"].current_size == 1  # nothing got in
    finally:
        _stop(p)


def test_tls_flag_errors_exit_2(tmp_path, ca, capsys):
    cfg = tmp_path / "server.yaml"
    cfg.write_text(YAML_CONFIG)
    chain, key = _cert_files(ca, tmp_path)
    with pytest.raises(SystemExit) as ei:  # argparse: usage error
        cli.main(["--config", str(cfg), "--tls-cert", chain])
    assert ei.value.code == 2 and "go together" in capsys.readouterr().err
    assert (
        cli.main(
            ["--config", str(cfg), "--tls-cert", chain, "--tls-key", str(tmp_path / "missing.pem")]
        )
        == 2
    )
    assert "--tls-key" in capsys.readouterr().err
    assert cli.main(["--config", str(cfg), "--tls-cert", str(cfg), "--tls-key", key]) == 2
    assert "not a PEM file" in capsys.readouterr().err
    other_key = tmp_path / "other.pem"
    ca.issue_cert("localhost").private_key_pem.write_to_path(str(other_key))
    assert cli.main(["--config", str(cfg), "--tls-cert", chain, "--tls-key", str(other_key)]) == 2
    assert "does the key match the certificate" in capsys.readouterr().err


def test_token_flag(tmp_path):
    cfg = tmp_path / "server.yaml"
    cfg.write_text(YAML_CONFIG)
    p, port = _start(["--config", str(cfg), "--token", "s3cret"])
    try:
        address = f"localhost:{port}"
        _insert_and_sample(reverb.Client(address, in_process=False, token="s3cret"), "replay")
        for token in ("wrong", None):
            bad = reverb.Client(address, in_process=False, token=token, unavailable_timeout=30)
            with pytest.raises(
                reverb.errors.FailedPreconditionError, match="rejected the credentials"
            ):
                bad.insert([np.zeros(3, np.float32)], {"replay": 1.0})
            with pytest.raises(reverb.errors.FailedPreconditionError, match=address):
                bad.server_info()
    finally:
        _stop(p)


def test_empty_token_is_a_usage_error(tmp_path, capsys):
    cfg = tmp_path / "server.yaml"
    cfg.write_text(YAML_CONFIG)
    with pytest.raises(SystemExit) as ei:
        cli.main(["--config", str(cfg), "--token", ""])
    assert ei.value.code == 2 and "--token" in capsys.readouterr().err


@pytest.mark.parametrize(
    "flag,value",
    [("--checkpoint-keep", "0"), ("--checkpoint-every", "-1"), ("--log-level", "chatty")],
)
def test_bad_flag_values_exit_2(tmp_path, capsys, flag, value):
    cfg = tmp_path / "server.yaml"
    cfg.write_text(YAML_CONFIG)
    with pytest.raises(SystemExit) as ei:
        cli.main(["--config", str(cfg), flag, value])
    assert ei.value.code == 2 and flag in capsys.readouterr().err


def test_the_shipped_example_config_parses_and_is_shown_by_help(capsys):
    import pathlib

    path = pathlib.Path(__file__).resolve().parents[2] / "examples" / "server_config.txtpb"
    config = server_config.load_config(str(path))
    tables = server_config.tables_from_config(config)
    assert [t.name for t in tables] == ["replay", "recent"]
    info = {t.name: t.info for t in tables}
    assert info["replay"].sampler_options.prioritized.priority_exponent == pytest.approx(0.8)
    assert info["recent"].max_times_sampled == 8
    assert info["recent"].rate_limiter_info.min_diff == -1000
    assert server_config.server_settings(config) == {
        "port": 8000,
        "checkpoint_dir": None,
        "checkpoint_every_seconds": 600.0,
        "checkpoint_keep": 2,
        "service": {"max_streams": 4096, "idle_stream_seconds": 300.0},
    }
    assert cli.EXAMPLE_CONFIG == path.read_text()
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    out = capsys.readouterr().out
    assert 'table_name: "recent"' in out and "sampler: { uniform: true }" in out


def test_config_sets_the_service_limits(tmp_path):
    cfg = tmp_path / "c.txtpb"
    cfg.write_text(
        'tables: { table_name: "q" sampler: { fifo: true } remover: { fifo: true } '
        "max_size: 10 rate_limiter: { min_size_to_sample: 1 samples_per_insert: 1 "
        "min_diff: -10 max_diff: 10 } }\n"
        "max_streams: 7\nidle_stream_seconds: 2.5\nmax_inflated_bytes: 1048576\nmax_workers: 3\n"
    )
    settings = server_config.server_settings(server_config.load_config(str(cfg)))
    assert settings["service"] == {
        "max_streams": 7,
        "idle_stream_seconds": 2.5,
        "max_inflated_bytes": 1048576,
        "max_workers": 3,
    }
    cfg.write_text(cfg.read_text().replace("max_streams: 7", "max_streams: -1"))
    with pytest.raises(server_config.ConfigError, match=r"config.max_streams \(-1\) must be >= 1"):
        server_config.server_settings(server_config.load_config(str(cfg)))

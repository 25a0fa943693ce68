"""ostinato-ingest (python -m ostinato.rlds) end to end, in a subprocess, into a server over
gRPC on localhost."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("minari")
pytest.importorskip("jax")  # Minari's DataCollector needs it

from minari_fixtures import collect

import ostinato as reverb
from ostinato.rlds import ingest_cli as cli


@pytest.fixture(scope="module")
def minari_env(tmp_path_factory):
    """An environment whose MINARI_DATASETS_PATH holds a small CartPole dataset."""
    path = tmp_path_factory.mktemp("minari")
    old = os.environ.get("MINARI_DATASETS_PATH")
    os.environ["MINARI_DATASETS_PATH"] = str(path)
    try:
        dataset, _ = collect("cartpole/cli-v0", "CartPole-v1", 3, seed=11)
    finally:
        if old is None:
            del os.environ["MINARI_DATASETS_PATH"]
        else:
            os.environ["MINARI_DATASETS_PATH"] = old
    env = dict(os.environ, MINARI_DATASETS_PATH=str(path), TF_CPP_MIN_LOG_LEVEL="3")
    return env, path, dataset.total_steps, dataset.total_episodes


def ingest(env, *args, timeout=300):
    return subprocess.run(
        [sys.executable, "-m", "ostinato.rlds", *map(str, args)],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
    )


def queue(name="t"):
    return reverb.Table.queue(name, 100_000)


def test_minari_by_id(make_server, minari_env):
    env, _, steps, episodes = minari_env
    server = make_server(queue())
    out = ingest(
        env,
        "cartpole/cli-v0",
        "--server",
        f"localhost:{server.port}",
        "--table",
        "t",
        "--no-progress",
    )
    assert out.returncode == 0, out.stderr
    assert f"wrote {steps + episodes:,} steps of cartpole/cli-v0 (minari)" in out.stdout
    # Two-step windows: one per transition.
    assert server.localhost_client().server_info()["t"].current_size == steps


def test_minari_by_path_windows_episodes_and_progress(make_server, minari_env):
    env, path, _, _ = minari_env
    server = make_server(queue("a"), queue("b"))
    out = ingest(
        env,
        path / "cartpole" / "cli-v0",
        "--server",
        f"localhost:{server.port}",
        "--table",
        "a",
        "--table",
        "b",
        "--sequence-length",
        "3",
        "--episodes",
        "1",
        "--priority",
        "2.5",
        "--progress",
    )
    assert out.returncode == 0, out.stderr
    assert "steps/s" in out.stderr and "Pushed" in out.stderr  # the progress summary
    client = server.localhost_client()
    info = client.server_info()
    assert info["a"].current_size == info["b"].current_size > 0
    sample = client.sample_batch("a", 1)
    assert np.asarray(sample.data[0]).shape == (1, 3)  # step_type of a 3-step window
    assert sample.info.priority[0] == 2.5


def test_missing_table_and_dataset_are_clear_errors(make_server, minari_env):
    env, _, _, _ = minari_env
    server = make_server(queue("other"))
    address = f"localhost:{server.port}"
    out = ingest(env, "cartpole/cli-v0", "--server", address, "--table", "t")
    assert out.returncode == 1
    assert "TableNotFoundError" in out.stderr and "'t'" in out.stderr
    assert "Traceback" not in out.stderr
    out = ingest(env, "D4RL/door/human-v2", "--server", address, "--table", "other")
    assert out.returncode == 1 and "never downloaded" in out.stderr
    assert server.localhost_client().server_info()["other"].current_size == 0


def test_token(make_server, minari_env):
    env, _, steps, _ = minari_env
    server = make_server(queue(), token="s3cret")
    address = f"localhost:{server.port}"
    env = {k: v for k, v in env.items() if k != "OSTINATO_TOKEN"}
    out = ingest(
        env, "cartpole/cli-v0", "--server", address, "--table", "t", "--connect-timeout", "2"
    )
    assert out.returncode == 1 and "Traceback" not in out.stderr
    out = ingest(
        env,
        "cartpole/cli-v0",
        "--server",
        address,
        "--table",
        "t",
        "--token",
        "s3cret",
        "--episodes",
        "1",
    )
    assert out.returncode == 0, out.stderr
    assert 0 < server.localhost_client().server_info()["t"].current_size < steps


def test_bad_arguments_exit_2(capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(["x", "--server", "h:1", "--table", "t", "--sequence-length", "0"])
    assert e.value.code == 2
    assert "--sequence-length: '0' must be > 0" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        cli.main(["x", "--server", "h:1", "--table", "t", "--tile-end-of-episodes"])
    assert e.value.code == 2


@pytest.mark.slow
def test_rlds_tfds_directory(make_server, minari_env, tmp_path):
    """An RLDS dataset written as TFDS (what RLDS datasets are published as), auto-detected."""
    tf = pytest.importorskip("tensorflow")
    tfds = pytest.importorskip("tensorflow_datasets")
    from ostinato import rlds

    features = tfds.features.FeaturesDict(
        {
            "steps": tfds.features.Dataset(
                {
                    "observation": tfds.features.Tensor(shape=(3,), dtype=np.float32),
                    "action": tfds.features.Tensor(shape=(2,), dtype=np.float32),
                    "reward": np.float32,
                    "discount": np.float32,
                    "is_first": np.bool_,
                    "is_last": np.bool_,
                    "is_terminal": np.bool_,
                }
            )
        }
    )

    def episode(n, start):
        return {
            "steps": [
                dict(
                    observation=np.full(3, start + t, np.float32),
                    action=np.full(2, t, np.float32),
                    reward=np.float32(t),
                    discount=np.float32(1.0),
                    is_first=t == 0,
                    is_last=t == n - 1,
                    is_terminal=t == n - 1,
                )
                for t in range(n)
            ]
        }

    tfds.dataset_builders.store_as_tfds_dataset(
        "toy_rlds",
        "1.0.0",
        features,
        {"train": [(0, episode(4, 0)), (1, episode(3, 100))]},
        data_dir=str(tmp_path),
        disable_shuffling=True,
    )
    directory = tmp_path / "toy_rlds"  # the newest version below it is found
    data = cli.load_rlds(str(directory), "train")
    signature = rlds.create_trajectory_data_signature(data)
    server = make_server(reverb.Table.queue("t", 1000, signature=signature))
    env, _, _, _ = minari_env
    out = ingest(env, directory, "--server", f"localhost:{server.port}", "--table", "t")
    assert out.returncode == 0, out.stderr
    assert "wrote 7 steps" in out.stdout and "(rlds)" in out.stdout
    client = server.localhost_client()
    items = [client.sample_batch("t", 1).data for _ in range(5)]
    observations = [np.asarray(i.observation)[0, :, 0].tolist() for i in items]
    assert observations == [[0, 1], [1, 2], [2, 3], [100, 101], [101, 102]]
    out = ingest(
        env, directory, "--server", f"localhost:{server.port}", "--table", "t", "--split", "test"
    )
    assert out.returncode == 1 and "has splits ['train']" in out.stderr
    del tf

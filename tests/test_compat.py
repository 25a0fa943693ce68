"""``ostinato.install_as_reverb()`` / ``python -m ostinato.as_reverb``: unmodified Reverb code
runs on Ostinato. Each case runs in a fresh interpreter (the alias lives in ``sys.modules``)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest


def _ok(code: str) -> str:
    r = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_reverb_and_its_submodules_resolve_to_ostinato_without_importing_tf():
    out = _ok("""
        import sys
        import ostinato
        ostinato.install_as_reverb()
        import reverb
        from reverb import item_selectors, rate_limiters, replay_sample
        import reverb.platform.checkpointers_lib as ckl
        from reverb.platform.default import checkpointers
        import reverb.trajectory_writer as tw
        assert reverb.Server is ostinato.Server and reverb.Table is ostinato.Table
        assert reverb.Client is ostinato.Client and reverb.selectors is ostinato.selectors
        assert item_selectors.Uniform is ostinato.selectors.Uniform
        assert rate_limiters.MinSize is ostinato.rate_limiters.MinSize
        assert replay_sample.SampleInfo is ostinato.SampleInfo
        assert reverb.replay_sample.ReplaySample is ostinato.ReplaySample
        assert ckl.DefaultCheckpointer is ostinato.checkpointers.DefaultCheckpointer
        assert checkpointers.DefaultCheckpointer is ckl.DefaultCheckpointer
        assert tw.TrajectoryWriter is ostinato.TrajectoryWriter
        assert tw.TrajectoryColumn is ostinato.TrajectoryColumn
        assert reverb.client.Writer is ostinato.Writer
        assert reverb.errors.DeadlineExceededError is ostinato.DeadlineExceededError
        assert ostinato.install_as_reverb() is reverb  # idempotent
        assert "tensorflow" not in sys.modules and "grpc" not in sys.modules
        try:
            reverb.no_such_name
        except AttributeError as e:
            assert "no_such_name" in str(e)
        else:
            raise AssertionError("no error")
        print("ok")
    """)
    assert out.strip() == "ok"


def test_reverb_quickstart_runs_unchanged():
    out = _ok("""
        import ostinato; ostinato.install_as_reverb()
        import reverb
        server = reverb.Server(tables=[reverb.Table(
            name="my_table", sampler=reverb.selectors.Prioritized(priority_exponent=0.8),
            remover=reverb.selectors.Fifo(), max_size=int(1e6),
            rate_limiter=reverb.rate_limiters.MinSize(2))])
        client = reverb.Client(f"localhost:{server.port}")
        client.insert([0, 1], priorities={"my_table": 1.0})
        client.insert([2, 3], priorities={"my_table": 0.5})
        print(len(list(client.sample("my_table", num_samples=2))))
        server.stop()
    """)
    assert out.strip() == "2"


def test_tf_modules_load_tensorflow_when_used():
    pytest.importorskip("tensorflow")
    out = _ok("""
        import sys
        import ostinato; ostinato.install_as_reverb()
        import reverb.tf_client, reverb.trajectory_dataset
        assert "tensorflow" not in sys.modules
        assert reverb.TrajectoryDataset is reverb.trajectory_dataset.TrajectoryDataset
        assert reverb.tf_client.TFClient is reverb.TFClient
        assert reverb.SampleInfo.tf_dtypes()[0].name == "uint64"
        print("ok")
    """)
    assert out.strip() == "ok"


def test_runner_runs_a_script_and_a_module(tmp_path):
    script = tmp_path / "prog.py"
    script.write_text("import sys, reverb\nprint(reverb.Server.__module__, sys.argv[1:])\n")
    r = subprocess.run(
        [sys.executable, "-m", "ostinato.as_reverb", str(script), "a", "--b"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "ostinato.server ['a', '--b']"
    (tmp_path / "progmod.py").write_text("import reverb\nprint(reverb.Table.__module__)\n")
    r = subprocess.run(
        [sys.executable, "-m", "ostinato.as_reverb", "-m", "progmod"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env={"PYTHONPATH": str(tmp_path), "PATH": ""},
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "ostinato.core.table"


def test_a_real_reverb_is_left_alone(tmp_path):
    fake = tmp_path / "reverb"
    fake.mkdir()
    (fake / "__init__.py").write_text("REAL = True\n")
    code = f"""
        import sys
        sys.path.insert(0, {str(tmp_path)!r})
        import reverb
        assert reverb.REAL  # without the call, reverb is whatever is installed
        import ostinato
        try:
            ostinato.install_as_reverb()
        except RuntimeError as e:
            assert "already imported" in str(e)
            print("refused")
    """
    assert _ok(code).strip() == "refused"

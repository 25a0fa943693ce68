"""Lint and type checks run as part of the suite, so CI keeps them green."""

import pathlib
import shutil
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_ruff_clean():
    ruff = shutil.which("ruff") or str(pathlib.Path(sys.executable).with_name("ruff"))
    if not pathlib.Path(ruff).exists():
        pytest.skip("ruff is not installed")
    out = subprocess.run([ruff, "check", "src", "tests", "benchmarks"], cwd=ROOT,
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


def test_mypy_clean_on_core():
    pytest.importorskip("mypy")
    out = subprocess.run([sys.executable, "-m", "mypy", "src/ostinato/core"], cwd=ROOT,
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr

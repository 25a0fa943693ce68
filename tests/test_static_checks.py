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


def _pyproject() -> dict:
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # tomli is a dependency on 3.10 (ostinato-server's TOML configs)
        tomllib = pytest.importorskip("tomli")
    with open(ROOT / "pyproject.toml", "rb") as f:
        return tomllib.load(f)


def test_pyproject_license_is_an_spdx_string():
    # Issue 12 item 7: a `license = {text = ...}` table and "License ::" classifiers make
    # setuptools (>= 77) print deprecation banners on every `pip install`.
    conf = _pyproject()
    project = conf["project"]
    assert project["license"] == "Apache-2.0", project["license"]
    assert not [c for c in project.get("classifiers", []) if c.startswith("License ::")]
    assert project.get("license-files") == ["LICENSE"] and (ROOT / "LICENSE").is_file()
    # SPDX license strings need setuptools >= 77 to build.
    requires = conf["build-system"]["requires"]
    setuptools_req = [r for r in requires if r.replace(" ", "").startswith("setuptools")]
    assert setuptools_req, requires
    floor = setuptools_req[0].replace(" ", "").split(">=", 1)
    assert len(floor) == 2 and int(floor[1].split(".")[0].split(",")[0]) >= 77, setuptools_req

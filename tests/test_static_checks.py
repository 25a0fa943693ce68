"""Lint and type checks run as part of the suite, so CI keeps them green."""

import os
import pathlib
import re
import shutil
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]

# The modules mypy may skip ([[tool.mypy.overrides]] with ignore_errors in pyproject.toml).
# This number may only go down: fix a module's errors and take it off the list; never add one.
MYPY_IGNORED_MODULES_MAX = 22


def _lint_required() -> bool:
    # CI (CI=true) and whoever sets OSTINATO_REQUIRE_LINT must run the checks, not skip them.
    return bool(os.environ.get("CI") or os.environ.get("OSTINATO_REQUIRE_LINT"))


def test_ruff_clean():
    ruff = shutil.which("ruff") or str(pathlib.Path(sys.executable).with_name("ruff"))
    if not pathlib.Path(ruff).exists():
        if _lint_required():
            pytest.fail(
                'ruff is not installed (pip install -e ".[test]"); CI or '
                "OSTINATO_REQUIRE_LINT is set, so the lint check may not be skipped"
            )
        pytest.skip("ruff is not installed")
    out = subprocess.run(
        [ruff, "check", "src", "tests", "benchmarks"], cwd=ROOT, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stdout + out.stderr


def test_mypy_runs_over_the_package_in_ci():
    # mypy itself runs in CI as scripts/test_lint.sh (a cold run over the package takes
    # about 65 s of CPU, too much for the test suite's budget); here: that it covers the whole
    # package and that CI calls it.
    assert _pyproject()["tool"]["mypy"]["files"] == ["src/ostinato"]
    lint = (ROOT / "scripts" / "test_lint.sh").read_text()
    assert "-m mypy" in lint and "ruff" in lint
    assert "bash scripts/test_lint.sh" in (ROOT / ".ci" / "run").read_text()


def _mypy_ignored_modules() -> list[str]:
    modules: list[str] = []
    for override in _pyproject()["tool"]["mypy"].get("overrides", []):
        if override.get("ignore_errors"):
            names = override["module"]
            modules += [names] if isinstance(names, str) else names
    return modules


def test_mypy_ignore_list_only_shrinks():
    modules = _mypy_ignored_modules()
    assert len(modules) <= MYPY_IGNORED_MODULES_MAX, (
        f"{len(modules)} modules skip mypy's errors, at most {MYPY_IGNORED_MODULES_MAX} may: "
        "fix the new module's errors instead of listing it"
    )
    assert len(set(modules)) == len(modules), modules
    # Each entry names a module that exists (a moved or removed one comes off the list).
    src = ROOT / "src"
    missing = [
        m
        for m in modules
        if "*" in m
        or not (
            (src / (m.replace(".", "/") + ".py")).is_file()
            or (src / m.replace(".", "/") / "__init__.py").is_file()
        )
    ]
    assert not missing, f"not modules of src/ (take them off the list): {missing}"


def _pins(requirements: list[str]) -> dict[str, str]:
    pins = {}
    for req in requirements:
        m = re.fullmatch(r"\s*(ruff|mypy)\s*([=<>!~]=?.*?)\s*", req)
        if m:
            pins[m.group(1)] = m.group(2)
    return pins


def test_ruff_and_mypy_pinned_alike():
    # CI installs the `test` extra, developers the `lint` extra and pre-commit its own ruff:
    # all three must run the same versions, or the hooks and CI disagree.
    extras = _pyproject()["project"]["optional-dependencies"]
    lint, test = _pins(extras["lint"]), _pins(extras["test"])
    assert set(lint) == {"ruff", "mypy"} and all(v.startswith("==") for v in lint.values()), lint
    assert test == lint, (test, lint)
    yaml = pytest.importorskip("yaml")
    conf = yaml.safe_load((ROOT / ".pre-commit-config.yaml").read_text())
    hooks = {h["id"]: h for repo in conf["repos"] for h in repo["hooks"]}
    for hook_id in ("ruff-check", "ruff-format"):
        assert f"ruff{lint['ruff']}" in hooks[hook_id].get("additional_dependencies", []), (
            hook_id,
            hooks[hook_id],
        )
    assert hooks["mypy"]["language"] == "system", hooks["mypy"]
    assert hooks["mypy"]["entry"] == "python -m mypy", hooks["mypy"]


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

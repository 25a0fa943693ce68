"""``tests/`` mirrors ``src/ostinato/``: each subpackage of ``ostinato`` has a test directory of
the same name, and each test directory is named after a subpackage, but for the allowlisted
suites below. Checked on directories only (which test goes where is the reviewer's call)."""

from __future__ import annotations

import pathlib

import ostinato

SRC = pathlib.Path(ostinato.__file__).parent
TESTS = pathlib.Path(__file__).parent

#: Test directories with no subpackage of their own: suites that run external clients of
#: Ostinato (their own frameworks, usually in a separate Python) against it.
EXTERNAL_CLIENT_SUITES = {
    "tf_agents",  # TF-Agents' replay buffer and observers on Ostinato (scripts/test_tf_agents.sh)
    "acme_support",  # DeepMind Acme (and Launchpad) agents on Ostinato (scripts/test_acme.sh)
}


def _subdirs(root: pathlib.Path) -> set[str]:
    return {p.name for p in root.iterdir() if p.is_dir() and not p.name.startswith((".", "_"))}


def _subpackages() -> set[str]:
    # Namespace packages too (ostinato.wire has no __init__.py): any directory of modules.
    return {name for name in _subdirs(SRC) if any((SRC / name).glob("*.py"))}


def test_every_subpackage_has_a_test_directory():
    assert sorted(_subpackages() - _subdirs(TESTS)) == []


def test_every_test_directory_is_named_after_a_subpackage():
    assert sorted(_subdirs(TESTS) - _subpackages() - EXTERNAL_CLIENT_SUITES) == []


def test_the_allowlist_names_existing_directories():
    assert EXTERNAL_CLIENT_SUITES <= _subdirs(TESTS)

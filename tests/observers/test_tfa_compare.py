"""Ostinato's observers and buffer against TF-Agents' own, where TF-Agents is installed.

They run only where a TF-Agents virtualenv with Ostinato installed is found:
``$OSTINATO_TFA_PYTHON``, else ``.venv-tfa`` (what ``scripts/test_tf_agents.sh`` builds, so CI
has it), else ``/opt/tfa-venv``; through ``python -m ostinato.as_reverb`` so that TF-Agents'
``import reverb`` is Ostinato.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

HERE = Path(__file__).parent
ROOT = HERE.parent.parent


def _python() -> str:
    env = os.environ.get("OSTINATO_TFA_PYTHON")
    if env:
        return env
    for candidate in (ROOT / ".venv-tfa" / "bin" / "python", Path("/opt/tfa-venv/bin/python")):
        if candidate.exists():
            return str(candidate)
    return str(ROOT / ".venv-tfa" / "bin" / "python")


PYTHON = _python()

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not os.path.exists(PYTHON), reason=f"no TF-Agents python at {PYTHON}"),
]


def _run(script: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", CUDA_VISIBLE_DEVICES="")
    return subprocess.run([PYTHON, "-m", "ostinato.as_reverb", str(HERE / script)],
                          capture_output=True, text=True, timeout=600, env=env,
                          cwd=ROOT)


def test_items_match_tf_agents_observers():
    """Thousands of observer configurations: the same items, errors and cached counts."""
    proc = _run("tfa_compare.py")
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    assert lines, proc.stdout[-2000:] + proc.stderr[-4000:]
    result = json.loads(lines[-1])
    assert result["num_failures"] == 0, result["failures"]
    assert proc.returncode == 0
    counts = result["counts"]
    assert counts["trajectory"] > 1000 and counts["episode"] > 500 and counts["batched"] >= 12


def test_tf_agents_own_tests_pass_on_ostinato():
    """TF-Agents' reverb_utils_test.py and reverb_replay_buffer_test.py on our classes."""
    proc = _run("tfa_own_tests.py")
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert " passed" in proc.stdout and "failed" not in proc.stdout

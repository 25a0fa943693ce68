"""Ostinato's observers and buffer against TF-Agents' own, where TF-Agents is installed.

They run only where a TF-Agents virtualenv with Ostinato installed is found:
``$OSTINATO_TFA_PYTHON``, else ``.venv-tfa`` (what ``scripts/test_tf_agents.sh`` builds, so CI
has it), else ``/opt/tfa-venv``; through ``python -m ostinato.as_reverb`` so that TF-Agents'
``import reverb`` is Ostinato.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from tfa_runner import MARKS, run_as_reverb

HERE = Path(__file__).parent
pytestmark = MARKS


def _run(script: str) -> subprocess.CompletedProcess:
    return run_as_reverb(HERE / script)


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

"""ostinato.rlds against TF-Agents' rlds_to_reverb, where a TF-Agents python is found.

``$OSTINATO_TFA_PYTHON``, else ``.venv-tfa`` (``scripts/test_tf_agents.sh``), else
``/opt/tfa-venv``; run through ``python -m ostinato.as_reverb`` (TF-Agents imports reverb).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tfa_runner import MARKS, run_as_reverb

HERE = Path(__file__).parent
pytestmark = MARKS


def _run(script: str) -> subprocess.CompletedProcess:
    return run_as_reverb(HERE / script)


def test_conversion_specs_errors_and_pushes_match_tf_agents():
    proc = _run("tfa_compare.py")
    lines = [json.loads(ln) for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if not lines and "No module named" in proc.stderr:
        pytest.skip(f"TF-Agents python cannot run the comparison: {proc.stderr[-300:]}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = lines[-1]["summary"]
    assert summary["cases"] >= 50 and summary["failed"] == [], [
        r for r in lines[:-1] if not r["ok"]
    ]


def test_tf_agents_own_rlds_tests_pass_on_ostinato():
    """TF-Agents' rlds_to_reverb_test.py with its functions replaced by ostinato.rlds's."""
    proc = _run("tfa_own_tests.py")
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert " passed" in proc.stdout and "failed" not in proc.stdout

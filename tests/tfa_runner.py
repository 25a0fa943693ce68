"""Finding a TF-Agents virtualenv with Ostinato installed and running a script in it with
``import reverb`` resolving to Ostinato (shared by the observer and RLDS comparisons).

The interpreter is ``$OSTINATO_TFA_PYTHON``, else ``.venv-tfa`` (what
``scripts/test_tf_agents.sh`` builds, so CI has it), else ``/opt/tfa-venv``.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent


def _python() -> str:
    env = os.environ.get("OSTINATO_TFA_PYTHON")
    if env:
        return env
    for candidate in (ROOT / ".venv-tfa" / "bin" / "python", Path("/opt/tfa-venv/bin/python")):
        if candidate.exists():
            return str(candidate)
    return str(ROOT / ".venv-tfa" / "bin" / "python")


PYTHON = _python()

#: Marks for a module of such tests: slow, and skipped where no TF-Agents python is found.
MARKS = [
    pytest.mark.slow,
    pytest.mark.skipif(not os.path.exists(PYTHON), reason=f"no TF-Agents python at {PYTHON}"),
]


def run_as_reverb(script: Path) -> subprocess.CompletedProcess:
    """Runs ``script`` with the TF-Agents python through ``python -m ostinato.as_reverb``."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", CUDA_VISIBLE_DEVICES="")
    return subprocess.run(
        [PYTHON, "-m", "ostinato.as_reverb", str(script)],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
        cwd=ROOT,
    )

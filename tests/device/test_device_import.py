"""A device backend loads its own framework only (that importing ostinato.device loads none
is checked in tests/test_import_weight.py)."""

import subprocess
import sys

FRAMEWORKS = ("torch", "jax", "jaxlib", "tensorflow", "mindspore")


def _loaded_after(code: str) -> list[str]:
    probe = f"{code}\nimport sys\nprint(','.join(m for m in {FRAMEWORKS!r} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    return [m for m in out.stdout.strip().split(",") if m]


def test_framework_loaded_only_for_its_backend():
    code = (
        "import importlib.util, ostinato.device as d\n"
        "if importlib.util.find_spec('torch'):\n"
        "    d.UniformReplayBuffer(1, 4, [()], ['float32'], backend='torch')\n"
    )
    assert "jax" not in _loaded_after(code)

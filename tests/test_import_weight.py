"""Importing Ostinato's modules loads no framework it does not need: no ML framework, no
transport (gRPC) and no optional dependency until a function that uses it runs.

One parametrised test: each case runs ``code`` in a fresh interpreter and lists the modules of
``absent`` found in ``sys.modules`` afterwards.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

ML = ("tensorflow", "torch", "jax")
TRANSPORT = ("grpc", "google.protobuf")

CASES = {
    # The package and its pure core load no transport or ML framework (test_layering.py).
    "package": ("import ostinato", TRANSPORT + ML),
    "core": ("import ostinato.core", TRANSPORT + ML),
    "datasets": ("import ostinato.datasets", ML + ("grpc",)),
    "rlds": ("import ostinato.rlds", ("tensorflow",)),
    "structured_writer": (
        "import ostinato.structured_writer, ostinato.writers.structured_writer",
        ("tensorflow",),
    ),
    "device": ("import ostinato.device", ML + ("jaxlib", "mindspore")),
    "device_names": (
        "import ostinato.device as d\n"
        "d.UniformReplayBuffer, d.PriorityReplayBuffer, d.create_buffer, d.make_specs",
        ML + ("jaxlib", "mindspore"),
    ),
    # ostinato.ray loads Ray only when one of its functions runs (no Ray needed here).
    "ray": ("import ostinato, ostinato.ray", ("ray", "grpc")),
    "ops": (
        "import ostinato, ostinato.ops, ostinato.ops.stats, ostinato.ops.metrics",
        ("prometheus_client",),
    ),
}


def _loaded_after(code: str, absent: tuple[str, ...]) -> list[str]:
    probe = f"{code}\nimport sys\nprint(','.join(m for m in {absent!r} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    return [m for m in out.stdout.strip().split(",") if m]


@pytest.mark.parametrize("case", sorted(CASES))
def test_import_loads_no_framework(case):
    code, absent = CASES[case]
    assert _loaded_after(code, absent) == []

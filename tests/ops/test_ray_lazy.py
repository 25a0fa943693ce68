"""`ostinato.ray` loads Ray only when one of its functions runs (no Ray needed here)."""

import subprocess
import sys


def test_importing_ostinato_ray_does_not_import_ray():
    code = ("import sys, ostinato, ostinato.ray\n"
            "print(','.join(m for m in ('ray', 'grpc') if m in sys.modules))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == ""

"""The core stays pure: importing it (or the package) loads no transport or ML framework."""

import subprocess
import sys

FORBIDDEN = ("grpc", "google.protobuf", "tensorflow", "torch", "jax")


def _loaded_after_import(module: str) -> list[str]:
    code = (
        f"import sys, {module}\n"
        f"bad = [m for m in {FORBIDDEN!r} if m in sys.modules]\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return [m for m in out.stdout.strip().split(",") if m]


def test_core_imports_no_framework_or_transport():
    assert _loaded_after_import("ostinato.core") == []


def test_package_import_is_light():
    assert _loaded_after_import("ostinato") == []


def test_core_sources_do_not_import_forbidden_modules():
    import pathlib

    import ostinato.core

    root = pathlib.Path(ostinato.core.__file__).parent
    for path in root.glob("*.py"):
        text = path.read_text()
        for name in ("grpc", "protobuf", "tensorflow", "torch", "jax"):
            assert f"import {name}" not in text, (path, name)
            assert f"from {name}" not in text, (path, name)

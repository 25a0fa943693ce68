#!/usr/bin/env bash
# Installs Ostinato with its test dependencies into .venv and runs the test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e ".[test]"
# The framework adapters and device buffers are tested for real on CPU: PyTorch 2.13.0 (CPU
# build), JAX (CPU) and TensorFlow (CPU). Set OSTINATO_SKIP_FRAMEWORKS=1 to skip installing them.
if [ "${OSTINATO_SKIP_FRAMEWORKS:-0}" != "1" ]; then
  # No triton here: with TensorFlow loaded, torch importing triton aborts the process.
  # scripts/test_triton.sh tests the Triton kernels in a venv of their own.
  .venv/bin/python -m pip install -q "torch==2.13.0" jax jaxlib "tensorflow-cpu>=2.18" \
    "tensorflow-datasets>=4.9" importlib_resources  # TFDS directories for ostinato-ingest
fi
exec .venv/bin/python -m pytest -q "$@"

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
  # triton: the device buffers' fused GPU kernels, tested here through Triton's interpreter
  # and compiled for sm_90 without a GPU.
  .venv/bin/python -m pip install -q "torch==2.13.0" triton jax jaxlib "tensorflow-cpu>=2.18" \
    "tensorflow-datasets>=4.9" importlib_resources  # TFDS directories for ostinato-ingest
fi
exec .venv/bin/python -m pytest -q "$@"

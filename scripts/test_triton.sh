#!/usr/bin/env bash
# The device buffers' fused Triton kernels, tested without a GPU: through Triton's interpreter
# on CPU tensors (TRITON_INTERPRET=1, set by tests/device/conftest.py) and compiled for a
# Hopper GPU (sm_90) ahead of time. In a virtualenv of its own, .venv-triton (torch CPU +
# triton, no TensorFlow): with triton installed, a process that has loaded TensorFlow aborts
# when torch later imports triton (two LLVMs), so the main test venv leaves triton out and the
# Triton tests there skip.
#
#   bash scripts/test_triton.sh            # install (first time) and run
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x .venv-triton/bin/python ]; then
  python3 -m venv .venv-triton
  .venv-triton/bin/python -m pip install -q --upgrade pip
fi
.venv-triton/bin/python -m pip install -q -e . pytest hypothesis "torch==2.13.0" triton
exec .venv-triton/bin/python -m pytest -q -p no:cacheprovider tests/device \
  -k "triton or sm90 or rows" "$@"

#!/usr/bin/env bash
# The one GPU command (issue 26): the CUDA-marked tests and every device benchmark line, each
# process bounded, in well under 5 minutes of wall time on one H100/H200.
#
#   bash benchmarks/device/gpu_check.sh            # from the repository root
#
# Writes benchmarks/device/results/<gpu>.json and .md (RESULTS=dir to write elsewhere) and the
# test log beside them. Peers (flashbax, TorchRL, cpprb) are imported from the environment; a
# folder .whl/ of wheels is installed into /tmp/site first when present (for machines without
# a package index). Exit status: the tests' (the benchmarks report what did not finish).
set -uo pipefail
cd "$(dirname "$0")/../.."
PY=${PYTHON:-python3}
RESULTS=${RESULTS:-benchmarks/device/results}
mkdir -p "$RESULTS"
started=$(date +%s)
if [ -d .whl ] && ls .whl/*.whl >/dev/null 2>&1; then
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
export PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
gpu=$($PY -c "import torch; print(torch.cuda.get_device_name().lower().replace(' ', '-'))" \
      2>/dev/null || echo cpu)
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null
echo "== CUDA tests ($gpu)"
timeout 150 $PY -m pytest -q -m cuda -p no:cacheprovider tests/device 2>&1 \
  | tee "$RESULTS/$gpu-tests.txt"
tests=${PIPESTATUS[0]}
echo "== benchmarks (tests took $(( $(date +%s) - started )) s)"
timeout 240 $PY benchmarks/device/run.py --device cuda --dtypes uint8 --repeats 5 --budget 200 \
  --timeout 50 --name "$gpu" --out "$RESULTS" \
  --atari naive-torch,ostinato-torch,ostinato-torch-graph,ostinato-torch-tree,ostinato-jax,flashbax
echo "== done in $(( $(date +%s) - started )) s; tests exit $tests"
exit "$tests"

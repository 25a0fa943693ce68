#!/usr/bin/env bash
# Acme's own code on Ostinato, unmodified: dm-acme 0.4.0's shipped tests of its Reverb adders
# (transition, sequence, episode), acme/utils/reverb_utils and acme/datasets/numpy_iterator
# (49 tests), then an end-to-end run (tests/acme_support/acme_e2e.py): a toy dm_env environment
# -> Acme's NStepTransitionAdder(n_step=3) -> an Ostinato server over gRPC -> Acme's
# make_reverb_dataset -> 200 batches, every transition checked.
#
# Runs in its own virtualenv, .venv-acme (Python 3.11: TensorFlow 2.15, jax 0.4.30; versions in
# scripts/acme_constraints.txt), with `import reverb` resolving to Ostinato
# (python -m ostinato.as_reverb / tests/acme_support/acme_plugin.py). dm-acme is installed with
# --no-deps: its pinned dependencies include dm-launchpad, which has no wheel for Python >= 3.10;
# tests/acme_support/launchpad is a test-only stand-in (not part of Ostinato) with the two
# functions single-process Acme calls.
#
#   bash scripts/test_acme.sh            # install (first time) and run everything
#   ACME_DQN=1 bash scripts/test_acme.sh # also: Acme's TF DQN agent learns CartPole
#                                        # (examples/acme_dqn.py; installs sonnet, trfl, gym)
#
# Fails on any failing test, and on tracebacks or "Exception ignored in" noise in the output.
# Without a Python 3.11 interpreter (pyenv or python3.11 on PATH) it says so and exits 0.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

py=$(bash scripts/python311.sh)
if [ -z "$py" ]; then
  echo "test_acme: skipped, no Python 3.11 here (Acme 0.4's TensorFlow 2.15 needs it)"
  exit 0
fi

start=$(date +%s)
if [ ! -x .venv-acme/bin/python ]; then
  "$py" -m venv .venv-acme
fi
# --no-warn-conflicts: dm-acme declares dm-launchpad, deliberately not installed (see above).
pip=(.venv-acme/bin/python -m pip install -q --no-warn-conflicts -c scripts/acme_constraints.txt)
"${pip[@]}" tensorflow-cpu numpy jax jaxlib dm-tree dm-env absl-py pandas pytest pytest-timeout
"${pip[@]}" --no-deps dm-acme==0.4.0
"${pip[@]}" -e .
echo "test_acme: installed in $(( $(date +%s) - start ))s"

tests=(
  acme.adders.reverb.transition_test
  acme.adders.reverb.sequence_test
  acme.adders.reverb.episode_test
  acme.utils.reverb_utils_test
  acme.datasets.numpy_iterator_test
)
export TF_CPP_MIN_LOG_LEVEL=2
export PYTHONPATH="$root/tests/acme_support"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
noise="Traceback\|Exception ignored in\|Exception in thread\|Error occurred when finalizing"
log="$work/tests.log"
# Run outside the repository so that only Acme's tests (from the installed wheel) load.
(cd "$work" && "$root/.venv-acme/bin/python" -m ostinato.as_reverb \
   -m pytest -q -p acme_plugin -p no:cacheprovider --timeout=300 -W ignore::DeprecationWarning \
   --pyargs "${tests[@]}") > "$log" 2>&1 && status=0 || status=$?
tail -n 1 "$log"
if grep -q "$noise" "$log"; then
  echo "test_acme: Acme's tests left tracebacks or 'Exception ignored' noise in their output:"
  grep -n -A8 "$noise" "$log" | head -n 60
  status=1
fi
if ! grep -q "^49 passed" "$log"; then
  echo "test_acme: expected '49 passed' (Acme 0.4.0's 49 tests):"
  tail -n 40 "$log"
  status=1
fi
[ "$status" -eq 0 ] || { echo "test_acme: Acme's tests FAILED"; exit 1; }

e2e="$work/e2e.log"
(cd "$work" && "$root/.venv-acme/bin/python" -m ostinato.as_reverb \
   "$root/tests/acme_support/acme_e2e.py" --batches 200) > "$e2e" 2>&1 && status=0 || status=$?
tail -n 1 "$e2e"
if [ "$status" -ne 0 ] || grep -q "$noise" "$e2e"; then
  tail -n 40 "$e2e"
  echo "test_acme: the end-to-end run FAILED or did not exit cleanly"
  exit 1
fi

if [ "${ACME_DQN:-0}" = "1" ]; then
  "${pip[@]}" dm-sonnet trfl tensorflow-probability gym pygame pillow
  dqn="$work/dqn.log"
  (cd "$work" && "$root/.venv-acme/bin/python" "$root/examples/acme_dqn.py" --min-return 150 \
     --max-episodes 600) > "$dqn" 2>&1 && status=0 || status=$?
  tail -n 1 "$dqn"
  if [ "$status" -ne 0 ] || grep -q "$noise" "$dqn"; then
    tail -n 40 "$dqn"
    echo "test_acme: Acme's DQN did not learn or did not exit cleanly"
    exit 1
  fi
fi
echo "test_acme: passed in $(( $(date +%s) - start ))s"

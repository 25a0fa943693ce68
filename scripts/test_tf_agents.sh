#!/usr/bin/env bash
# TF-Agents' own code on Ostinato, unmodified: its shipped unit tests for the Reverb replay
# buffer, the Reverb observers, RLDS -> Reverb, the Reverb variable container and train/utils,
# then its DQN CartPole example until it has learned. TF-Agents 0.19 pins TensorFlow 2.15 (so
# Python 3.11 and gym 0.23), so this runs in its own virtualenv, .venv-tfa, with
# `import reverb` resolving to Ostinato (python -m ostinato.as_reverb).
#
#   bash scripts/test_tf_agents.sh            # install (first time) and run everything
#   TFA_SKIP_DQN=1 bash scripts/test_tf_agents.sh
#
# Without a Python 3.11 interpreter (pyenv or python3.11 on PATH) it says so and exits 0.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

py=$(bash scripts/python311.sh)
if [ -z "$py" ]; then
  echo "test_tf_agents: skipped, no Python 3.11 here (TF-Agents 0.19 needs TensorFlow 2.15)"
  exit 0
fi

start=$(date +%s)
if [ ! -x .venv-tfa/bin/python ]; then
  "$py" -m venv .venv-tfa
fi
pip=(.venv-tfa/bin/python -m pip install -q -c scripts/tf_agents_constraints.txt)
.venv-tfa/bin/python -m pip install -q --upgrade pip
"${pip[@]}" tensorflow==2.15.1 tf-agents==0.19.0 tensorflow-probability==0.23.0 gym==0.23.0 \
  rlds tensorflow-datasets pytest mock portpicker pytest-timeout
"${pip[@]}" -e .
echo "test_tf_agents: installed in $(( $(date +%s) - start ))s"

tests=(
  tf_agents.replay_buffers.reverb_replay_buffer_test
  tf_agents.replay_buffers.reverb_utils_test
  tf_agents.replay_buffers.rlds_to_reverb_test
  tf_agents.experimental.distributed.reverb_variable_container_test
  tf_agents.train.utils.replay_buffer_utils_test
  tf_agents.train.utils.spec_utils_test
  tf_agents.train.utils.strategy_utils_test
  tf_agents.train.utils.train_utils_test
)
export TF_CPP_MIN_LOG_LEVEL=2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
log="$work/tests.log"
# Run outside the repository so that only TF-Agents' tests (and our small plugin) load.
(cd "$work" && PYTHONPATH="$root/tests/tf_agents" "$root/.venv-tfa/bin/python" -m ostinato.as_reverb \
   -m pytest -q -p tfa_plugin -p no:cacheprovider --timeout=300 -W ignore::DeprecationWarning \
   --pyargs "${tests[@]}") 2>&1 | tee "$log" | tail -n 3
status=${PIPESTATUS[0]}
if grep -q "Error occurred when finalizing\|Traceback" "$log"; then
  echo "test_tf_agents: TF-Agents' tests left errors or tracebacks in their output:"
  grep -n -A3 "Error occurred when finalizing\|Traceback" "$log" | head -n 40
  status=1
fi
[ "$status" -eq 0 ] || { echo "test_tf_agents: TF-Agents' tests FAILED"; exit "$status"; }

if [ "${TFA_SKIP_DQN:-0}" != "1" ]; then
  (cd "$work" && "$root/.venv-tfa/bin/python" -m ostinato.as_reverb \
     "$root/tests/tf_agents/dqn_learns.py" --iterations 3000 --min-return 80 --seed 0) \
     2> "$work/dqn.log" | tail -n 1 || { tail -n 30 "$work/dqn.log"; echo "test_tf_agents: DQN FAILED"; exit 1; }
  if grep -q "Error occurred when finalizing\|Traceback" "$work/dqn.log"; then
    grep -n -A3 "Error occurred when finalizing\|Traceback" "$work/dqn.log" | head -n 40
    echo "test_tf_agents: the DQN example did not exit cleanly"
    exit 1
  fi
fi
echo "test_tf_agents: passed in $(( $(date +%s) - start ))s"

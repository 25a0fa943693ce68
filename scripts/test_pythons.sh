#!/usr/bin/env bash
# Installs Ostinato into one virtualenv per Python version (.venv-pyXY) and runs the tests of the
# core, the client, the writers and the wire protocol there; no PyTorch, JAX or TensorFlow is
# installed, and the tests that need one skip.
#
#   bash scripts/test_pythons.sh                  # the oldest and the newest: 3.10 and 3.13
#   bash scripts/test_pythons.sh 3.10 3.11 3.12 3.13
#   bash scripts/test_pythons.sh /path/to/python3.12 -- -x   # after --: extra pytest arguments
#
# An interpreter is looked for in pyenv (${PYENV_ROOT:-~/.pyenv}/versions/X.Y.*, the newest
# patch release) and then as pythonX.Y on PATH. A version that is not found is skipped with a
# line saying so; it does not fail the run. Exits non-zero if any install or test run failed.
set -euo pipefail
cd "$(dirname "$0")/.."

# Core (tables, selectors, rate limiters), writers, client, server and the wire protocol; the
# server's command line (its TOML configs are read with tomli before 3.11, tomllib after) and
# string columns. None of them needs PyTorch, JAX or TensorFlow.
TESTS=(
  tests/core tests/writers tests/wire
  tests/transport tests/test_client.py tests/test_server.py
  tests/test_reverb_bugs.py tests/test_public_api.py tests/test_layering.py
  tests/test_string_columns.py tests/checkpointing/test_ckpt_cli.py
)

versions=()
pytest_args=()
while [ $# -gt 0 ]; do
  if [ "$1" = "--" ]; then shift; pytest_args=("$@"); break; fi
  versions+=("$1"); shift
done
[ ${#versions[@]} -gt 0 ] || versions=(3.10 3.13)

find_python() {  # prints the interpreter for "X.Y" (or a path), or nothing
  local want=$1 cand
  if [[ "$want" == */* ]]; then
    [ -x "$want" ] && echo "$want"
    return 0
  fi
  cand=$(ls -d "${PYENV_ROOT:-$HOME/.pyenv}/versions/$want".*/bin/python 2>/dev/null \
         | sort -V | tail -n 1 || true)
  if [ -z "$cand" ]; then
    cand=$(command -v "python$want" || true)
  fi
  [ -n "$cand" ] && echo "$cand"
  return 0
}

results=()
failed=0
for want in "${versions[@]}"; do
  py=$(find_python "$want")
  if [ -z "$py" ]; then
    if [[ "$want" == */* ]]; then
      echo "== Python $want: skipped (no such executable)"
    else
      echo "== Python $want: skipped (no interpreter found in pyenv or as python$want on PATH)"
    fi
    results+=("Python $want: skipped (not found)")
    continue
  fi
  ver=$("$py" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
  full=$("$py" -c 'import platform; print(platform.python_version())')
  venv=".venv-py${ver/./}"
  echo "== Python $full ($py) in $venv"
  start=$SECONDS
  status=passed
  if ! { "$py" -m venv "$venv" &&
         "$venv/bin/python" -m pip install -q --upgrade pip &&
         "$venv/bin/python" -m pip install -q -e ".[test]"; }; then
    status="FAILED (install)"
  elif ! "$venv/bin/python" -m pytest -q -p no:cacheprovider "${TESTS[@]}" \
         ${pytest_args[@]+"${pytest_args[@]}"}; then
    status="FAILED (tests)"
  fi
  [ "$status" = passed ] || failed=1
  results+=("Python $full: $status in $((SECONDS - start)) s")
done

echo "== test_pythons.sh summary"
printf '   %s\n' "${results[@]}"
exit $failed

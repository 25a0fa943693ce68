#!/usr/bin/env bash
# Static checks over the whole code base, with the versions pinned in pyproject.toml's `lint`
# extra (also in `test`): ruff (lint and format) over src/, tests/ and benchmarks/, and mypy
# over src/ostinato (pyproject.toml lists the modules whose errors it may still skip; the list
# only shrinks). Uses .venv (made by scripts/test.sh) when it exists, else installs the lint
# extra into .venv-lint.
#
#   bash scripts/test_lint.sh
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -x .venv/bin/python ] && .venv/bin/python -c "import mypy, ruff" 2>/dev/null; then
  py=.venv/bin/python
else
  [ -x .venv-lint/bin/python ] || python3 -m venv .venv-lint
  .venv-lint/bin/python -m pip install -q -e ".[lint]"
  py=.venv-lint/bin/python
fi
"$py" -m ruff check src tests benchmarks
"$py" -m ruff format --check src tests benchmarks
"$py" -m mypy
echo "lint: ruff and mypy passed"

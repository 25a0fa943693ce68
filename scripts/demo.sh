#!/usr/bin/env bash
# Installs Ostinato into .venv and runs the actor/learner demo on an embedded server.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e .
exec .venv/bin/ostinato-demo "$@"

#!/usr/bin/env bash
# Builds the documentation site (mkdocs.yml, docs/) with `mkdocs build --strict` in .venv-docs:
# a broken link, a missing page or an API reference (mkdocstrings) that does not resolve fails
# the build, and this script exits non-zero. The site is written to a temporary directory and
# deleted. The venv holds only mkdocs-material and mkdocstrings (griffe reads the sources
# without importing them), so no framework is installed.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x .venv-docs/bin/python ]; then
  python3 -m venv .venv-docs
  .venv-docs/bin/python -m pip install -q --upgrade pip
fi
.venv-docs/bin/python -m pip install -q -e ".[docs]"
site="$(mktemp -d)"
trap 'rm -rf "$site"' EXIT
NO_MKDOCS_2_WARNING=1 .venv-docs/bin/python -m mkdocs build --strict -d "$site"
echo "docs: mkdocs build --strict passed"

#!/usr/bin/env bash
# Prints the newest Python 3.11 interpreter here (pyenv's, else python3.11 on PATH), or nothing.
# TF-Agents 0.19 and Acme 0.4 need TensorFlow 2.15, which has no wheel for later Pythons.
py=$(ls -d "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.11.*/bin/python 2>/dev/null | sort -V | tail -n 1 || true)
[ -n "$py" ] || py=$(command -v python3.11 || true)
echo "$py"

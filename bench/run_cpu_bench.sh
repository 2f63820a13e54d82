#!/usr/bin/env bash
# Runs the CPU backend benchmarks and their peers (OpenBLAS in-process, PyTorch through
# bench/compare_cpu.py) in one run and writes bench/results/cpu.md.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
if [ ! -x build/bench-venv/bin/python ]; then
  python3 -m venv build/bench-venv
fi
build/bench-venv/bin/python -m pip install -q -r bench/requirements.txt
build/bench-venv/bin/python bench/compare_cpu.py "$@"

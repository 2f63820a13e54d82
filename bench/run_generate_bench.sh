#!/usr/bin/env bash
# luminal generate against llama.cpp on the same GGUF file with the same threads, and
# against the memory-bandwidth floor, in one run; writes bench/results/generate.md.
# The first run builds llama.cpp from source through pip (several minutes).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
model=$(bash scripts/get_model.sh | tail -1)
venv=build/bench-venv-generate
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
fi
CMAKE_ARGS="-DGGML_NATIVE=ON" "$venv/bin/python" -m pip install -q -r bench/requirements-generate.txt
"$venv/bin/python" bench/compare_generate.py --model "$model" "$@"

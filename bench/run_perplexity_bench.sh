#!/usr/bin/env bash
# The fast CPU path's fidelity: perplexity, KL divergence and top-1 agreement against
# luminal's exact run, next to llama.cpp on the same windows; writes
# bench/results/fidelity.md. Arguments go to compare_perplexity.py (default model: the
# Gemma 3 270M GGUF). The first run builds llama.cpp from source through pip.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
model=$(bash scripts/get_model.sh | tail -1)
venv=build/bench-venv-llamacpp  # shared with run_tokenizer_bench.sh
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
CMAKE_ARGS="-DGGML_NATIVE=ON" "$venv/bin/python" -m pip install -q -r bench/requirements-perplexity.txt
if [[ " $* " == *" --model "* ]]; then
  "$venv/bin/python" bench/compare_perplexity.py "$@"
else
  "$venv/bin/python" bench/compare_perplexity.py --model "$model" "$@"
fi

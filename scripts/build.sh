#!/usr/bin/env bash
# Configures and builds luminal into build/ (Release with debug info, warnings as errors).
# Extra arguments go to cmake, e.g. scripts/build.sh -DLUMINAL_BUILD_BENCH=OFF
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DLUMINAL_WERROR=ON "$@" >/dev/null
cmake --build build --parallel "$(nproc)"

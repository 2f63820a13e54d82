#!/usr/bin/env bash
# Sets up a fresh machine, builds luminal and runs the main example on the CPU.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
echo
./build/examples/hello

#!/usr/bin/env bash
# Installs the build and test dependencies from Debian's packages (skips what is present).
set -euo pipefail
packages=(g++ cmake ninja-build ccache pkg-config libgtest-dev libbenchmark-dev libopenblas-dev libicu-dev
          nlohmann-json3-dev python3-dev python3-venv)
missing=()
for p in "${packages[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "installing: ${missing[*]}"
  sudo_cmd=""
  [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq "${missing[@]}" >/dev/null
fi

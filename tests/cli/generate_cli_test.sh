#!/usr/bin/env bash
# The `luminal` program's contract: --help exits 0; usage errors and bad models print one
# line naming the problem and exit 2; a generation streams the prompt and text to stdout
# and the statistics to stderr.
#   generate_cli_test.sh LUMINAL_BINARY FIXTURE_DIR
set -uo pipefail
bin=$1
fixtures=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failures=0

# expect STATUS STDERR_PATTERN ARGS...: the exit status, and a single stderr line matching.
expect() {
  local want=$1 pattern=$2
  shift 2
  "$bin" "$@" >"$work/out" 2>"$work/err"
  local got=$?
  if [[ $got != "$want" ]]; then
    echo "FAIL: luminal $*: exit $got, expected $want"; cat "$work/err"; failures=$((failures + 1))
  elif [[ -n $pattern ]] && ! { [[ $(wc -l <"$work/err") == 1 ]] && grep -q -- "$pattern" "$work/err"; }; then
    echo "FAIL: luminal $*: stderr is not one line matching '$pattern':"; cat "$work/err"
    failures=$((failures + 1))
  fi
}

expect 0 "" --help
expect 0 "" generate --help
grep -q -- "--model PATH" "$work/out" || { echo "FAIL: generate --help does not describe --model"; failures=$((failures + 1)); }
expect 0 "" chat --help
expect 2 ""  # the usage text, on stderr
expect 2 "unknown command 'frobnicate'" frobnicate
expect 2 "generate needs --model" generate
expect 2 "unknown option '--bogus'" generate --model x.gguf --bogus
expect 2 "expects a number" generate --model x.gguf --max-tokens many
expect 2 "no CUDA backend" generate --model x.gguf --device cuda
expect 2 "--threads must be a positive integer" generate --model x.gguf --threads 0
expect 2 "--kv-cache must be f32 or f16" generate --model x.gguf --kv-cache bf16
expect 2 "no such file or folder" generate --model "$work/missing.gguf"
expect 2 "expected a .gguf file" generate --model "$fixtures/generate/expected_llama_gguf.json"
expect 2 "no tokenizer.json" generate --model "$fixtures/models/llama"
printf 'GGUF\3\0\0\0' >"$work/truncated.gguf"
expect 2 "truncated.gguf" generate --model "$work/truncated.gguf"

# A real run on the tiny Hugging Face folder model, with each KV cache type.
export LUMINAL_CACHE_DIR=$work/cache
for kv in f16 f32; do
  "$bin" generate --model "$fixtures/generate/llama_folder" --prompt "Hello" --max-tokens 4 \
    --threads 1 --kv-cache $kv >"$work/out" 2>"$work/err"
  status=$?
  if [[ $status != 0 ]] || ! grep -q "^Hello" "$work/out" || ! grep -q "decode: [0-9]* tokens" "$work/err"; then
    echo "FAIL: generate on the folder model, $kv cache (exit $status)"; cat "$work/out" "$work/err"
    failures=$((failures + 1))
  fi
done

[[ $failures == 0 ]] && echo "all CLI checks passed"
exit $((failures > 0))

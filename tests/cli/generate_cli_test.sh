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

# expect_late STATUS STDERR_PATTERN ARGS...: as expect, for errors found after progress
# lines: the last stderr line matches.
expect_late() {
  local want=$1 pattern=$2
  shift 2
  "$bin" "$@" >"$work/out" 2>"$work/err"
  local got=$?
  if [[ $got != "$want" ]] || ! tail -n 1 "$work/err" | grep -q -- "$pattern"; then
    echo "FAIL: luminal $*: exit $got (expected $want), last stderr line not matching '$pattern':"
    cat "$work/err"; failures=$((failures + 1))
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
expect 2 "unknown device 'tpu'" generate --model x.gguf --device tpu
# Without a usable GPU, --device cuda says what is missing.
if ! nvidia-smi >/dev/null 2>&1; then
  expect 2 "the CUDA backend cannot run" generate --model x.gguf --device cuda
  expect 2 "the CUDA backend cannot run" perplexity --model x.gguf --file x.txt --device cuda
fi
expect 2 "--tp must be a positive integer" generate --model x.gguf --tp 1.5
expect 2 "--tp splits the model over GPUs: it needs --device cuda" generate --model x.gguf --tp 2
expect 2 "unknown option '--tp'" chat --model x.gguf --tp 2
if ! nvidia-smi >/dev/null 2>&1; then
  expect 2 "the CUDA backend cannot run" generate --model x.gguf --device cuda --tp 2
fi
expect 2 "--threads must be a positive integer" generate --model x.gguf --threads 0
expect 2 "--kv-cache must be f32 or f16" generate --model x.gguf --kv-cache bf16
expect 2 "--search must be off, fast or full" generate --model x.gguf --search sometimes
expect 2 "--search-budget expects a number" perplexity --model x.gguf --file x.txt --search-budget soon
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

# --print-ids: greedy decoding's ids, against transformers' (the fixture's first prompt:
# its ids, then eight greedy ones, past any end-of-sequence token).
expect 2 "--temperature must be 0" generate --model x.gguf --print-ids --temperature 0.5
if "$bin" generate --model "$fixtures/generate/llama_kquant.gguf" --prompt "The quick brown fox" \
    --max-tokens 8 --threads 1 --print-ids >"$work/out" 2>"$work/err"; then
  flat=$(tr -d ' \n' <"$fixtures/generate/expected_llama_kquant_gguf.json")
  first_ids() { sed -E "s/^\[\{[^}]*\"$1\":\[([0-9,]*)\].*/\1/" <<<"$flat" | tr , ' '; }
  want=$(printf '%s\n%s' "$(first_ids prompt_ids)" "$(first_ids greedy_ids)")
  if [[ $(cat "$work/out") != "$want" ]]; then
    echo "FAIL: --print-ids gave:"; cat "$work/out"; echo "expected:"; echo "$want"
    failures=$((failures + 1))
  fi
else
  echo "FAIL: generate --print-ids"; cat "$work/err"; failures=$((failures + 1))
fi

# perplexity: its usage errors, then a base run and a comparison with it on the folder model.
expect 0 "" perplexity --help
expect 2 "perplexity needs --file" perplexity --model x.gguf
expect 2 "--ctx must be a positive integer" perplexity --model x.gguf --file x.txt --ctx 0
expect 2 "missing.txt: cannot read the text" perplexity --model "$fixtures/generate/llama_folder" --file "$work/missing.txt"
printf 'short' >"$work/short.txt"
expect_late 2 "fewer than one window" perplexity --model "$fixtures/generate/llama_folder" --file "$work/short.txt" --ctx 64
for i in $(seq 40); do echo "Line $i of a text about the quick brown fox, 12345."; done >"$work/text.txt"
expect 2 "not a base file" perplexity --model "$fixtures/generate/llama_folder" --file "$work/text.txt" --ctx 32 \
  --kl-divergence "$work/text.txt"
"$bin" perplexity --model "$fixtures/generate/llama_folder" --file "$work/text.txt" --ctx 32 --exact \
  --save-base "$work/base.bin" >"$work/out" 2>"$work/err"
if [[ $? != 0 ]] || ! grep -q "^perplexity: [0-9.]* +/- " "$work/out" || [[ ! -s $work/base.bin ]]; then
  echo "FAIL: perplexity --save-base"; cat "$work/out" "$work/err"; failures=$((failures + 1))
fi
"$bin" perplexity --model "$fixtures/generate/llama_folder" --file "$work/text.txt" --ctx 32 --exact \
  --kl-divergence "$work/base.bin" >"$work/out" 2>"$work/err"
if [[ $? != 0 ]] || ! grep -q "^top-1 agreement: 100.00%" "$work/out"; then
  echo "FAIL: perplexity --kl-divergence against its own base"; cat "$work/out" "$work/err"; failures=$((failures + 1))
fi
expect_late 2 "another text, tokenizer or --ctx" perplexity --model "$fixtures/generate/llama_folder" \
  --file "$work/text.txt" --ctx 16 --kl-divergence "$work/base.bin"

[[ $failures == 0 ]] && echo "all CLI checks passed"
exit $((failures > 0))

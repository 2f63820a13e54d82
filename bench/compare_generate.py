#!/usr/bin/env python3
"""luminal generate vs llama.cpp (llama-cpp-python) on one GGUF file, same threads, same
prompts, greedy decoding, in one run; plus the bandwidth floor: the bytes one decoded token
must read (every weight, and the f16 key and value caches so far) divided by the machine's
read bandwidth, measured between runs
(build/bench/bench_quant BM_ReadBandwidth). Writes bench/results/generate.md and adds a
line to bench/results/generate_runs.md, since on a shared machine one run is one sample.
Use bench/run_generate_bench.sh, which builds everything and installs the peer."""
import argparse
import datetime
import json
import os
import platform
import re
import statistics
import subprocess
import time

import gguf
from llama_cpp import Llama

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
SHORT = "The capital of France is"
LONG = " ".join(["The history of the city of Paris begins with a small settlement on an island "
                 "in the river."] * 10)
STATS = re.compile(r"prompt: (\d+) tokens, ([\d.]+) tokens/s \| time to first token: ([\d.]+) s \| "
                   r"decode: (\d+) tokens, ([\d.]+) tokens/s")


def cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def read_bandwidth(env, reps=5):
    out = subprocess.run([os.path.join(ROOT, "build", "bench", "bench_quant"),
                          "--benchmark_filter=BM_ReadBandwidth", "--benchmark_format=json",
                          f"--benchmark_repetitions={reps}", "--benchmark_report_aggregates_only=true"],
                         check=True, capture_output=True, text=True, env=env).stdout
    # The faster of 4 KiB and 2 MiB pages: the floor is what any reader could reach.
    medians = [b["bytes_per_second"] for b in json.loads(out)["benchmarks"]
               if b["name"].endswith("_median")]
    if not medians:
        raise RuntimeError("BM_ReadBandwidth did not report")
    return max(medians)


def kv_bytes_per_position(reader):
    """Bytes of f16 keys and values one cached position holds over all layers."""
    def value(key):
        field = reader.fields[key]
        return field.parts[field.data[0]]
    def scalar(key):
        return value(key)[0]
    arch = bytes(value("general.architecture")).decode()
    layers = int(scalar(f"{arch}.block_count"))
    kv_heads = int(scalar(f"{arch}.attention.head_count_kv"))
    key = int(scalar(f"{arch}.attention.key_length"))
    value = int(scalar(f"{arch}.attention.value_length"))
    return layers * kv_heads * (key + value) * 2


def luminal_run(model, prompt, tokens, env):
    cmd = [os.path.join(ROOT, "build", "tools", "luminal"), "generate", "--model", model,
           "--prompt", prompt, "--max-tokens", str(tokens)]
    err = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env).stderr
    m = STATS.search(err)
    if not m:
        raise RuntimeError("no statistics line from luminal:\n" + err)
    return {"prompt_tokens": int(m[1]), "prompt_tps": float(m[2]), "ttft": float(m[3]),
            "decode_tps": float(m[5])}


def llama_run(llm, prompt, tokens):
    ids = llm.tokenize(prompt.encode(), add_bos=True)
    llm.reset()
    start = time.perf_counter()
    llm.eval(ids)
    prefill = time.perf_counter() - start
    token = llm.sample(temp=0.0)
    decode_start = time.perf_counter()
    for _ in range(tokens - 1):  # as luminal counts: tokens after the first
        llm.eval([token])
        token = llm.sample(temp=0.0)
    decode = time.perf_counter() - decode_start
    return {"prompt_tokens": len(ids), "prompt_tps": len(ids) / prefill, "ttft": prefill,
            "decode_tps": (tokens - 1) / decode}


def median_of(runs, key):
    return statistics.median(r[key] for r in runs)


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--model", required=True)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    args = ap.parse_args()
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads),
           "LUMINAL_CACHE_DIR": os.path.join(ROOT, "build", "kernel-cache")}

    reader = gguf.GGUFReader(args.model)
    weight_bytes = sum(int(t.n_bytes) for t in reader.tensors)
    per_position = kv_bytes_per_position(reader)

    def floor_bytes(prompt_tokens):
        # A step attends over every cached position (these contexts stay inside Gemma 3's
        # 512-position window); on average the cache holds prompt + tokens / 2 positions.
        return weight_bytes + per_position * (prompt_tokens + args.tokens / 2)

    luminal_run(args.model, SHORT, 2, env)  # compiles (or finds) the kernels
    llm = Llama(model_path=args.model, n_threads=args.threads, n_threads_batch=args.threads,
                n_ctx=1024, verbose=False)
    prompts = (("short prompt", SHORT), ("long prompt", LONG))
    rows = [(label, [], []) for label, _ in prompts]
    # The shared machine's bandwidth drifts by tens of percent within minutes, so the
    # runs alternate with measurements of it, and each run is paired with the mean of the
    # measurements just before and just after it. Every repetition runs both programs on
    # both prompts, so that load from elsewhere hits all four alike.
    before = read_bandwidth(env, reps=2)
    for rep in range(args.reps):
        print(f"repetition {rep + 1} of {args.reps}", flush=True)
        for (label, ours, peer), (_, prompt) in zip(rows, prompts):
            for runs, run in ((ours, lambda: luminal_run(args.model, prompt, args.tokens, env)),
                              (peer, lambda: llama_run(llm, prompt, args.tokens))):
                r = run()
                after = read_bandwidth(env, reps=2)
                r["bandwidth"] = (before + after) / 2
                r["floor_fraction"] = r["decode_tps"] * floor_bytes(r["prompt_tokens"]) / r["bandwidth"]
                runs.append(r)
                before = after
    for label, ours, peer in rows:
        print(f"{label}: luminal prompt {median_of(ours, 'prompt_tps'):.1f} tok/s decode "
              f"{median_of(ours, 'decode_tps'):.2f} tok/s | llama.cpp prompt "
              f"{median_of(peer, 'prompt_tps'):.1f} decode {median_of(peer, 'decode_tps'):.2f}")

    lines = [
        "# luminal generate vs llama.cpp: Gemma 3 270M (GGUF Q4_K_M) on the CPU",
        "",
        "Command: `bash bench/run_generate_bench.sh` (builds luminal, fetches the model,",
        "builds llama-cpp-python 0.3.16 from source with `-DGGML_NATIVE=ON`, then runs",
        "`bench/compare_generate.py`).",
        "",
        f"Machine: {cpu_name()}, {os.cpu_count()} cores; {args.threads} threads for both.",
        f"Date: {datetime.date.today().isoformat()}. Greedy decoding, {args.tokens} tokens, "
        f"median of {args.reps} runs each (every repetition runs both programs on both prompts), "
        "kernels already compiled.",
        "",
        "| | prompt tokens | luminal prompt tok/s | llama.cpp prompt tok/s | ratio | "
        "luminal decode tok/s | llama.cpp decode tok/s | ratio |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for label, ours, peer in rows:
        op, pp = median_of(ours, "prompt_tps"), median_of(peer, "prompt_tps")
        od, pd = median_of(ours, "decode_tps"), median_of(peer, "decode_tps")
        lines.append(f"| {label} | {ours[0]['prompt_tokens']} | {op:.1f} | {pp:.1f} | {op / pp:.2f} | "
                     f"{od:.2f} | {pd:.2f} | {od / pd:.2f} |")
    all_runs = [r for _, ours, peer in rows for r in ours + peer]
    bandwidths = [r["bandwidth"] for r in all_runs]
    lines += [
        "",
        "Bandwidth floor for decoding: every weight is read once per token (the tied",
        "embedding table as the output projection), "
        f"{weight_bytes / 2**20:.1f} MiB, and so is the f16 key and value cache so far, "
        f"{per_position / 2**10:.0f} KiB per position: on average "
        + ", ".join(f"{per_position * (ours[0]['prompt_tokens'] + args.tokens / 2) / 2**20:.1f} MiB "
                    f"after the {label}" for label, ours, _ in rows)
        + ". Read bandwidth (bench_quant BM_ReadBandwidth, "
        f"{args.threads} threads, the faster of 4 KiB and 2 MiB pages) is measured between",
        "runs, since the shared machine's bandwidth drifts; each run's decode rate is divided",
        "by the floor at the mean of the measurements just before and after it. Bandwidth over",
        "the runs: median "
        f"{statistics.median(bandwidths) / 1e9:.1f} GB/s, from {min(bandwidths) / 1e9:.1f} to "
        f"{max(bandwidths) / 1e9:.1f}.",
        "",
        "| | luminal decode / floor | (runs from, to) | llama.cpp decode / floor | (runs from, to) |",
        "| --- | --- | --- | --- | --- |",
    ]
    def spread(runs):
        fractions = [r["floor_fraction"] for r in runs]
        return (f"{100 * median_of(runs, 'floor_fraction'):.0f}% | "
                f"{100 * min(fractions):.0f}%, {100 * max(fractions):.0f}%")
    for label, ours, peer in rows:
        lines.append(f"| {label} | {spread(ours)} | {spread(peer)} |")
    out = os.path.join(ROOT, "bench", "results", "generate.md")
    with open(out, "w") as f:
        f.write("\n".join(lines) + "\n")
    print("wrote", out)
    append_run(rows, statistics.median(bandwidths))


def commit():
    try:
        return subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], check=True,
                              capture_output=True, text=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def append_run(rows, bandwidth):
    """One line per run in generate_runs.md: the shared machine moves a run's medians by
    several points, so the spread over runs is part of the result."""
    path = os.path.join(ROOT, "bench", "results", "generate_runs.md")
    if not os.path.exists(path):
        with open(path, "w") as f:
            f.write("# Runs of bench/run_generate_bench.sh, one line each\n\n"
                    "Medians over each run's repetitions; decode / floor as in generate.md.\n\n"
                    "| date | commit | bandwidth GB/s | short: decode / floor | vs llama.cpp | "
                    "long: decode / floor | vs llama.cpp |\n"
                    "| --- | --- | --- | --- | --- | --- | --- |\n")
    cells = []
    for _, ours, peer in rows:
        ratio = median_of(ours, "decode_tps") / median_of(peer, "decode_tps")
        cells += [f"{100 * median_of(ours, 'floor_fraction'):.0f}%", f"{ratio:.2f}x"]
    with open(path, "a") as f:
        f.write(f"| {datetime.date.today().isoformat()} | {commit()} | {bandwidth / 1e9:.1f} | "
                + " | ".join(cells) + " |\n")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Fidelity of the fast CPU path: on the same GGUF file, texts and windows, in one run,
  - luminal's exact run (`luminal perplexity --exact --save-base`): f32 activations and KV
    cache, weights decoded exactly; its distributions are the base;
  - luminal's fast runs (int8 activations, f16 KV cache, as `generate` uses), with the
    activations' second int8 term (their rounding error) on none, the sensitive (the
    default) or all of the quantised products (--residual);
  - llama.cpp (llama-cpp-python, its own kernels, same windows and scoring);
each run's perplexity, and the fast runs' mean / 99th-percentile KL divergence and top-1
agreement against the base. Writes bench/results/fidelity.md. Use
bench/run_perplexity_bench.sh, which builds everything and installs the peer."""
import argparse
import datetime
import os
import re
import subprocess
import sys

import numpy as np

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
LUMINAL = os.path.join(ROOT, "build", "tools", "luminal")
TOP = 32  # BasePosition::kTop
POSITION = np.dtype([("actual", "<f4"), ("ids", "<i4", (TOP,)), ("logprobs", "<f4", (TOP,))])


def texts():
    stdlib = os.path.join("/usr/lib", f"python3.{sys.version_info.minor}")
    if not os.path.isdir(stdlib):
        stdlib = os.path.dirname(os.__file__)
    return [("English prose (GPL-3)", "/usr/share/common-licenses/GPL-3"),
            ("Python code (textwrap.py)", os.path.join(stdlib, "textwrap.py"))]


def load_base(path):
    with open(path, "rb") as f:
        assert f.read(8) == b"LUMPPLB1", path
        ctx, tokens_hash, n, top = np.frombuffer(f.read(32), "<u8")
        assert top == TOP
        return int(ctx), int(tokens_hash), np.frombuffer(f.read(), POSITION, count=int(n))


def fnv1a(ids):
    h = 0xCBF29CE484222325
    for i in ids:
        for b in int(i).to_bytes(4, "little", signed=True):
            h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def kl_against(base_pos, logprobs):
    """As luminal's kl_divergence: the base's top tokens plus one bucket for the rest."""
    p = np.exp(base_pos["logprobs"].astype(np.float64))
    q_log = logprobs[base_pos["ids"]].astype(np.float64)
    kl = float(np.sum(p * (base_pos["logprobs"] - q_log)))
    rest_p, rest_q = max(0.0, 1 - p.sum()), max(1e-30, 1 - np.exp(q_log).sum())
    if rest_p > 1e-12:
        kl += rest_p * np.log(rest_p / rest_q)
    return max(0.0, kl)


def llama_cpp_run(model, path, ctx, chunks, threads, base):
    from llama_cpp import Llama
    llm = Llama(model_path=model, n_ctx=ctx, n_batch=ctx, n_ubatch=ctx, logits_all=True, n_threads=threads,
                verbose=False)
    with open(path, "rb") as f:
        ids = llm.tokenize(f.read(), add_bos=True, special=True)
    _, tokens_hash, positions = base
    assert fnv1a(ids) == tokens_hash, "llama.cpp tokenized the text differently from luminal"
    windows = len(ids) // ctx
    if chunks:
        windows = min(windows, chunks)
    nll, kls, agree, k = [], [], 0, 0
    for w in range(windows):
        window = ids[w * ctx:(w + 1) * ctx]
        window[0] = llm.token_bos()
        llm.reset()
        llm.eval(window)
        logits = np.asarray(llm.scores[:ctx], dtype=np.float64)
        for j in range(ctx // 2, ctx - 1):
            row = logits[j]
            lp = row - (np.log(np.sum(np.exp(row - row.max()))) + row.max())
            nll.append(-lp[window[j + 1]] if j + 1 < ctx else 0)
            kls.append(kl_against(positions[k], lp))
            agree += int(np.argmax(lp) == positions[k]["ids"][0])
            k += 1
        print(f"  llama.cpp window {w + 1}/{windows}", file=sys.stderr, flush=True)
    n = len(nll)
    return {"perplexity": float(np.exp(np.mean(nll))), "mean_kl": float(np.mean(kls)),
            "kl_p99": float(np.sort(kls)[min(n - 1, int(0.99 * n))]), "top1": agree / n, "scored": n}


def luminal_run(args, path, extra):
    cmd = [LUMINAL, "perplexity", "--model", args.model, "--file", path, "--ctx", str(args.ctx),
           "--threads", str(args.threads)] + (["--chunks", str(args.chunks)] if args.chunks else []) + extra
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    def grab(label):
        m = re.search(rf"^{label}: ([0-9.]+)", out, re.M)
        return float(m.group(1)) if m else None
    return {"perplexity": grab("perplexity"), "mean_kl": grab("mean KL divergence"),
            "kl_p99": grab("99th percentile KL divergence"),
            "top1": (grab("top-1 agreement") or 0) / 100,
            "command": " ".join(os.path.relpath(c, ROOT) if c.startswith(ROOT) else c for c in cmd[1:])}


# The fast CPU path's runs: int8 activations and an f16 KV cache, with the activations'
# second int8 term on none, the sensitive (the default) or all of the quantised products.
FAST_RUNS = [
    ("luminal fast, --residual none (one int8 term)", ["--residual", "none"]),
    ("luminal fast (default: --residual sensitive)", []),
    ("luminal fast, --residual all", ["--residual", "all"]),
]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--ctx", type=int, default=512)
    ap.add_argument("--chunks", type=int, default=0, help="windows per text (0: all)")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    args = ap.parse_args()
    rows = []
    for name, path in texts():
        base_path = os.path.join(ROOT, "build", "perplexity-base-" + os.path.basename(path) + ".bin")
        print(f"{name}: exact run", file=sys.stderr, flush=True)
        exact = luminal_run(args, path, ["--exact", "--save-base", base_path])
        fast = []
        for label, flags in FAST_RUNS:
            print(f"{name}: {label}", file=sys.stderr, flush=True)
            fast.append((label, luminal_run(args, path, flags + ["--kl-divergence", base_path])))
        print(f"{name}: llama.cpp", file=sys.stderr, flush=True)
        peer = llama_cpp_run(args.model, path, args.ctx, args.chunks, args.threads, load_base(base_path))
        rows.append((name, exact, fast, peer))
        print(name, exact, fast, peer, file=sys.stderr, flush=True)
    lines = [
        "# Fidelity: the fast CPU path against the exact run, and llama.cpp on the same windows",
        "",
        f"`bash bench/run_perplexity_bench.sh --model {os.path.relpath(args.model, ROOT)}"
        f" --ctx {args.ctx}{' --chunks %d' % args.chunks if args.chunks else ''}` on"
        f" {datetime.date.today()}, {args.threads} threads. Windows of {args.ctx} tokens, the second half"
        " of each scored (as llama-perplexity). KL divergence: against luminal's exact run (f32"
        " activations and KV cache, weights decoded exactly), over its top 32 tokens plus the rest's mass.",
        "",
        "| text | run | perplexity | vs exact | mean KL | 99th pct KL | top-1 agreement |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for name, exact, fast, peer in rows:
        lines.append(f"| {name} | luminal exact | {exact['perplexity']:.4f} | 1 | 0 | 0 | 100% |")
        for label, r in fast + [("llama.cpp", peer)]:
            lines.append(f"| {name} | {label} | {r['perplexity']:.4f} | "
                         f"{r['perplexity'] / exact['perplexity'] - 1:+.2%} | {r['mean_kl']:.5f} | "
                         f"{r['kl_p99']:.5f} | {100 * r['top1']:.2f}% |")
    lines += ["", "Commands of the luminal runs:", ""]
    for _, exact, fast, _ in rows:
        lines += [f"    luminal {exact['command']}"] + [f"    luminal {r['command']}" for _, r in fast]
    with open(os.path.join(ROOT, "bench", "results", "fidelity.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""`luminal generate --device cuda` against PyTorch on the same GPU and the same weights,
and against the memory-bandwidth floor, in one run.

For each model shape (real shapes, random weights: bench/random_models.py), batch 1:
a prompt of --prompt tokens, then --new greedy tokens. Reported: decode ms/token and its
share of the floor ((weights + KV cache read per step) / device copy bandwidth measured
in the same run), time to first token (every runner has run the prompt once before, so
none pays for loading kernels), peak device memory. Peers: plain PyTorch with a
CUDA graph per decode step (bench/torch_decoder.py), and HF transformers with a static
cache and torch.compile(mode="reduce-overhead").

    python3 bench/compare_gpu_generate.py --luminal build/tools/luminal \\
        --shapes llama-3.2-1b,llama-3.1-8b,qwen3-8b,llama-3.1-8b:Q4_K [--work DIR] [--out FILE]

A shape with ":TYPE" runs a GGUF file of that block format (luminal only: PyTorch has no
kernels for it). Models are written under --work once and reused.
"""
import argparse
import os
import re
import subprocess
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import random_models  # noqa: E402
from torch_decoder import TorchDecoder  # noqa: E402


def copy_bandwidth():
    """Device copy bandwidth (read + write) in bytes/s, the median of 20 copies of 1 GiB."""
    x = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
    y = torch.empty_like(x)
    for _ in range(3):
        y.copy_(x)
    times = []
    for _ in range(20):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        y.copy_(x)
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e) / 1e3)
    del x, y
    return 2 * (1 << 30) / sorted(times)[len(times) // 2]


STATS = re.compile(r"prompt: (\d+) tokens, ([\d.]+) tokens/s \| time to first token: ([\d.]+) s \| "
                   r"decode: (\d+) tokens, ([\d.]+) tokens/s \| load ([\d.]+) s, compile ([\d.]+) s"
                   r", prepare ([\d.]+) s \| peak memory (\d+) MiB(?:, GPU (\d+) MiB)?")


STEP = re.compile(r"decode step: ([\d.]+) ms in the model's run \(([\d.]+) ms queuing GPU work, "
                  r"([\d.]+) ms of it on the device\)")


def run_luminal(exe, model, prompt, new_tokens, log):
    cmd = [exe, "generate", "--model", model, "--device", "cuda", "--prompt", prompt,
           "--max-tokens", str(new_tokens), "--ignore-eos", "--warmup"]
    start = time.perf_counter()
    # LUMINAL_LOG=info adds the decode step's breakdown (and the search's lines).
    p = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "LUMINAL_LOG": "info"})
    wall = time.perf_counter() - start
    log.write(f"$ {' '.join(cmd[:4])} ... (exit {p.returncode}, {wall:.1f} s)\n{p.stderr}\n")
    log.flush()
    m = STATS.search(p.stderr)
    if p.returncode != 0 or not m:
        raise RuntimeError(f"luminal failed (exit {p.returncode}):\n{p.stderr[-3000:]}")
    g = m.groups()
    assert int(g[0]) == len(prompt), f"prompt was {g[0]} tokens, not {len(prompt)}"
    step = STEP.search(p.stderr)
    return {"ms": 1e3 / float(g[4]), "ttft": float(g[2]), "peak": int(g[9] or 0) * 2**20,
            "compile": float(g[6]), "load": float(g[5]), "prepare": float(g[7]), "wall": wall,
            "step": step.groups() if step else None}


def run_torch_graph(cfg, folder, prompt, new_tokens):
    from safetensors.torch import load_file
    torch.cuda.reset_peak_memory_stats()
    state = load_file(os.path.join(folder, "model.safetensors"), device="cuda")
    dec = TorchDecoder(cfg, state, len(prompt) + new_tokens)
    dec.generate(prompt, 8)  # capture
    _, ttft, step = dec.generate(prompt, new_tokens)
    peak = torch.cuda.max_memory_allocated()
    del dec, state
    return {"ms": step * 1e3, "ttft": ttft, "peak": peak}


class Stamps:
    """A generate() streamer that notes when each token arrives (the first put is the
    prompt)."""

    def __init__(self):
        self.times = []

    def put(self, _):
        torch.cuda.synchronize()
        self.times.append(time.perf_counter())

    def end(self):
        pass


def run_hf_compiled(folder, prompt, new_tokens):
    from transformers import AutoModelForCausalLM, CompileConfig
    torch.cuda.reset_peak_memory_stats()
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.bfloat16, device_map="cuda")
    # generate() compiles the decode step itself where the cache is static (transformers
    # 4.48 and later; compiling model.forward by hand as well crashed under 5.17).
    model.generation_config.cache_implementation = "static"
    model.generation_config.compile_config = CompileConfig(mode="reduce-overhead", fullgraph=True)
    ids = torch.tensor([prompt], device="cuda")
    kw = dict(max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False,
              attention_mask=torch.ones_like(ids), pad_token_id=0)
    for _ in range(2):  # compiles the prompt's and the step's graphs
        model.generate(ids, **kw)
    stamps = Stamps()
    torch.cuda.synchronize()
    start = time.perf_counter()
    model.generate(ids, streamer=stamps, **kw)
    t = stamps.times
    peak = torch.cuda.max_memory_allocated()
    del model
    return {"ms": (t[-1] - t[1]) / (len(t) - 2) * 1e3, "ttft": t[1] - start, "peak": peak}


def in_child(runner, *args):
    """Runs a peer in a process of its own (its memory is returned whole, and a crash costs
    one row), returning its result or None."""
    import json
    child = subprocess.run([sys.executable, __file__, "--child", json.dumps([runner, *args])],
                           capture_output=True, text=True)
    for line in child.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    print(f"  {runner} failed (exit {child.returncode}): {child.stderr[-1500:]}", flush=True)
    return None


def child_main(spec):
    import json
    runner, *args = json.loads(spec)
    if runner == "torch":
        shape, folder, prompt, new_tokens = args
        r = run_torch_graph(random_models.config(shape), folder, prompt, new_tokens)
    else:
        r = run_hf_compiled(*args)
    print("RESULT " + json.dumps(r), flush=True)


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--child":
        return child_main(sys.argv[2])
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--luminal", required=True)
    ap.add_argument("--shapes", default="llama-3.2-1b,llama-3.1-8b,qwen3-8b,llama-3.1-8b:Q4_K")
    ap.add_argument("--work", default="models/gpu_bench")
    ap.add_argument("--prompt", type=int, default=512)
    ap.add_argument("--new", type=int, default=256)
    ap.add_argument("--peers", default="torch,hf", help="comma-separated: torch, hf (or none)")
    ap.add_argument("--out", help="also write the table here (markdown)")
    ap.add_argument("--log", default="/dev/stderr", help="luminal's output goes here")
    a = ap.parse_args()
    log = open(a.log, "a")
    peers = [p for p in a.peers.split(",") if p and p != "none"]
    os.makedirs(a.work, exist_ok=True)
    prompt_text = random_models.prompt_text(a.prompt)
    prompt_ids = random_models.prompt_ids(a.prompt)
    bandwidth = copy_bandwidth()
    lines = [f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}; "
             f"copy bandwidth {bandwidth / 1e9:.0f} GB/s; batch 1, {a.prompt}-token prompt, "
             f"{a.new} new tokens", "",
             "| model | runner | decode ms/token | floor ms | % of floor | TTFT ms | peak GiB |",
             "|---|---|---|---|---|---|---|"]
    print("\n".join(lines), flush=True)

    def row(shape, runner, r, floor_s):
        line = (f"| {shape} | {runner} | {r['ms']:.3f} | {floor_s * 1e3:.3f} | "
                f"{100 * floor_s * 1e3 / r['ms']:.0f}% | {r['ttft'] * 1e3:.1f} | "
                f"{r['peak'] / 2**30:.2f} |")
        lines.append(line)
        print(line, flush=True)

    for spec in a.shapes.split(","):
        shape, _, qtype = spec.partition(":")
        cfg = random_models.config(shape)
        if qtype:
            import gguf
            model = os.path.join(a.work, f"{shape}-{qtype}.gguf")
            if not os.path.exists(model):
                random_models.write_gguf(model + ".part", shape, qtype)
                os.rename(model + ".part", model)
            # The file is weights but for its metadata; the embedding table (stored in
            # qtype) is gathered, not read whole, so it is left out of the floor.
            block_elems, block_bytes = gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType[qtype]]
            embedding = cfg.vocab_size * cfg.hidden_size // block_elems * block_bytes
            weights = os.path.getsize(model) - embedding
            if getattr(cfg, "num_experts", None):  # a step reads only the chosen experts
                experts = (cfg.num_hidden_layers * 3 * cfg.num_experts * cfg.moe_intermediate_size *
                           cfg.hidden_size // block_elems * block_bytes)
                weights -= experts * (1 - cfg.num_experts_per_tok / cfg.num_experts)
        else:
            model = os.path.join(a.work, shape)
            if not os.path.exists(os.path.join(model, "tokenizer.json")):
                random_models.write_hf_folder(model, shape)
                torch.cuda.empty_cache()
            weights = random_models.weight_bytes(cfg)
        kv = random_models.kv_bytes_per_position(cfg) * (a.prompt + a.new / 2)
        floor_s = (weights + kv) / bandwidth
        for attempt in ("cold", "warm"):
            r = run_luminal(a.luminal, model, prompt_text, a.new, log)
            print(f"  luminal {attempt}: load {r['load']:.1f} s, compile {r['compile']:.1f} s, "
                  f"prepare (weights to the GPU) {r['prepare']:.1f} s, process {r['wall']:.1f} s",
                  flush=True)
        if r["step"]:
            queuing, device = float(r["step"][1]), float(r["step"][2])
            pace = "the GPU waits on the host" if queuing > 0.8 * device else "the GPU sets the pace"
            print(f"  luminal decode step: {queuing} ms queuing GPU work, {device} ms on the "
                  f"device ({pace})", flush=True)
        row(spec, "luminal", r, floor_s)
        if qtype:
            continue
        if "torch" in peers and (r := in_child("torch", shape, model, prompt_ids, a.new)):
            row(spec, "PyTorch + CUDA graph", r, floor_s)
        if "hf" in peers and (r := in_child("hf", model, prompt_ids, a.new)):
            row(spec, "HF static cache + torch.compile", r, floor_s)
    if a.out:
        with open(a.out, "w") as f:
            f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()

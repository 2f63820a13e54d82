#!/usr/bin/env python3
"""A GPT-2-small-shaped training step on the GPU: luminal (bench_cuda train_gpt2_small,
nn::Gpt) against PyTorch eager and torch.compile on the same architecture, in the same
run: batch 8 x 1024 random tokens, bf16 products and activations with f32 master
weights (torch.autocast), AdamW. Tokens a second, peak memory and compile time.

    python3 bench/train_gpt2_bench.py build/bench/bench_cuda
"""
import os
import re
import subprocess
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tools", "fixtures"))
from compare_cuda import bench  # noqa: E402
from make_training import Gpt  # noqa: E402

BATCH, SEQ, VOCAB = 8, 1024, 50257


def time_step(step, runs=10):
    """The first step's seconds (compiling included), then after two more the median of
    `runs` steps' milliseconds by CUDA events."""
    torch.cuda.synchronize()
    start = time.perf_counter()
    step()
    torch.cuda.synchronize()
    first = time.perf_counter() - start
    torch.cuda.reset_peak_memory_stats()
    return bench(step, warmup=2, runs=runs), first


def adamw_step(model, batch, seq, compiled):
    """One AdamW step of `model` (tools/fixtures' Gpt, or a wrapper of it) on a batch of
    random tokens, bf16 autocast over f32 master weights, the forward pass and the loss
    under torch.compile where `compiled`."""
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    ids = torch.randint(0, VOCAB, (batch, seq), device="cuda")
    targets = torch.randint(0, VOCAB, (batch, seq), device="cuda")

    def loss_of(ids, targets):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = model(ids)
        return torch.nn.functional.cross_entropy(logits.float().reshape(-1, VOCAB), targets.reshape(-1))

    forward = torch.compile(loss_of) if compiled else loss_of

    def step():
        loss = forward(ids, targets)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss

    return step


def torch_step(compiled):
    torch.manual_seed(0)
    model = Gpt(VOCAB, SEQ, 12, 12, 768).cuda()
    ms, first = time_step(adamw_step(model, BATCH, SEQ, compiled))
    return ms, torch.cuda.max_memory_allocated() / 2**20, first


def main():
    out = subprocess.run([sys.argv[1], "train_gpt2_small"], capture_output=True, text=True)
    print(out.stdout + out.stderr[-2000:])
    got = dict(re.findall(r"^(train_gpt2_small_bf16_\w+) ([0-9.e+-]+)$", out.stdout, re.M))
    rows = []
    if got:
        ms = float(got["train_gpt2_small_bf16_ms"])
        rows.append(("luminal", ms, float(got["train_gpt2_small_bf16_peak_mib"]),
                     float(got["train_gpt2_small_bf16_compile_s"])))
    for name, compiled in (("PyTorch eager", False), ("torch.compile", True)):
        ms, peak, first = torch_step(compiled)
        rows.append((name, ms, peak, first))
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}")
    print("| | ms a step | tokens/s | peak memory, MiB | first step (compile), s |")
    print("|---|---|---|---|---|")
    for name, ms, peak, first in rows:
        print(f"| {name} | {ms:.1f} | {BATCH * SEQ / ms * 1e3:.0f} | {peak:.0f} | {first:.1f} |")
    if got:
        compiled_ms = rows[-1][1]
        print(f"\nluminal / torch.compile speed: {compiled_ms / rows[0][1]:.2f}x "
              "(luminal's peak counts intermediates only; PyTorch's, every allocation)")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""The character-level GPT of examples/train_lm against the same model trained by
PyTorch with the same settings (architecture, GPT-2 initialisation, AdamW with weight
decay 0.1, clipping at 1.0, warm-up over a tenth of the steps then cosine decay to a
tenth of the rate, batches of random windows of the text), in the same run: the two
loss curves side by side and the time a step takes.

    python3 bench/train_lm_compare.py build/examples/train_lm docs/architecture.md [--steps 300]
        [--device cuda]

The two draw their batches and initial weights from different random generators, so
the curves agree in trend and level, not digit for digit (tests/train/gpt_training_test.cpp
checks the arithmetic exactly on shared weights and batches).
"""
import argparse
import math
import os
import re
import subprocess
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tools", "fixtures"))
from make_training import Gpt  # noqa: E402


def torch_curve(text, a, device):
    chars = sorted(set(text))
    ids = torch.tensor([chars.index(c) for c in text], dtype=torch.long)
    torch.manual_seed(a.seed)
    model = Gpt(len(chars), a.context, a.layers, a.heads, a.dim).to(device)
    for name, p in model.named_parameters():
        with torch.no_grad():
            if "ln_" in name:
                continue
            if name.endswith("bias"):
                p.zero_()
            else:
                std = 0.02 / math.sqrt(2 * a.layers) if name.endswith("c_proj.weight") else 0.02
                p.normal_(0, std)
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, weight_decay=0.1)
    warmup, low = max(1, a.steps // 10), a.lr / 10

    def rate(step):
        if step < warmup:
            return a.lr * (step + 1) / warmup
        done = (step - warmup) / (a.steps - warmup)
        return low + 0.5 * (a.lr - low) * (1 + math.cos(math.pi * done))

    curve, recent = [], 0.0
    start = time.perf_counter()
    for step in range(a.steps):
        at = torch.randint(0, len(ids) - a.context - 1, (a.batch,))
        x = torch.stack([ids[i:i + a.context] for i in at]).to(device)
        y = torch.stack([ids[i + 1:i + a.context + 1] for i in at]).to(device)
        for group in opt.param_groups:
            group["lr"] = rate(step)
        loss = torch.nn.functional.cross_entropy(model(x).reshape(-1, len(chars)), y.reshape(-1))
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        recent += loss.item()
        if (step + 1) % a.log_every == 0:
            curve.append(recent / a.log_every)
            recent = 0.0
    return curve, (time.perf_counter() - start) / a.steps


def main():
    p = argparse.ArgumentParser()
    p.add_argument("binary")
    p.add_argument("text")
    for name, default in [("steps", 300), ("batch", 16), ("context", 64), ("layers", 2),
                          ("heads", 4), ("dim", 64), ("log_every", 50), ("seed", 0)]:
        p.add_argument("--" + name.replace("_", "-"), type=int, default=default)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--device", default="cpu")
    a = p.parse_args()
    text = open(a.text, encoding="latin-1").read()
    args = [a.binary, a.text, "--sample", "0", "--device", a.device]
    for name in ("steps", "batch", "context", "layers", "heads", "dim", "log_every", "seed"):
        args += ["--" + name.replace("_", "-"), str(getattr(a, name))]
    args += ["--lr", str(a.lr)]
    start = time.perf_counter()
    out = subprocess.run(args, capture_output=True, text=True, check=True)
    ours_total = time.perf_counter() - start
    ours = [float(x) for x in re.findall(r"step [0-9]+: loss ([0-9.]+)", out.stdout)]
    compiled = float(re.search(r"compiled in ([0-9.]+) s", out.stderr).group(1))
    theirs, torch_step = torch_curve(text, a, a.device)
    ours_step = (ours_total - compiled) / a.steps  # includes loading and sampling setup
    print(f"torch {torch.__version__}, device {a.device}, {torch.get_num_threads()} threads")
    print("| step | luminal loss | PyTorch loss |")
    print("|---|---|---|")
    for i, (x, y) in enumerate(zip(ours, theirs)):
        print(f"| {(i + 1) * a.log_every} | {x:.3f} | {y:.3f} |")
    print(f"\nms a step: luminal {ours_step * 1e3:.1f} (compile {compiled:.1f} s excluded), "
          f"PyTorch eager {torch_step * 1e3:.1f}; luminal / PyTorch speed {torch_step / ours_step:.2f}x")


if __name__ == "__main__":
    main()

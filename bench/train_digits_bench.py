#!/usr/bin/env python3
"""The digits MLP's training step on the CPU: luminal (examples/train_digits) against
PyTorch eager with the same model, batch and optimizer, in the same run.

    python3 bench/train_digits_bench.py build/examples/train_digits build/data/digits.safetensors

luminal's rate is the example's own (its progress line: samples a second over the whole
run, 30 epochs of 22 steps of 64 images, compile excluded); PyTorch's is timed the same
way over the same number of steps (forward, backward, Adam step), after 20 warm-up steps.
"""
import re
import subprocess
import sys
import time

import torch


def luminal_rate(binary, data, model):
    out = subprocess.run([binary, data, "--model", model], capture_output=True, text=True, check=True)
    rates = re.findall(r"([0-9]+) samples/s", out.stderr)
    accuracy = re.search(r"test accuracy: ([0-9.]+)", out.stdout).group(1)
    return float(rates[-1]), accuracy


def torch_rate(model, steps=660, batch=64):
    torch.manual_seed(0)
    if model == "mlp":
        net = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
        shape = (batch, 64)
    else:
        net = torch.nn.Sequential(
            torch.nn.Conv2d(1, 16, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
            torch.nn.Conv2d(16, 32, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
            torch.nn.Flatten(), torch.nn.Linear(128, 10))
        shape = (batch, 1, 8, 8)
        steps = 440
    opt = torch.optim.Adam(net.parameters(), lr=3e-3)
    x, y = torch.rand(*shape), torch.randint(0, 10, (batch,))

    def step():
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(net(x), y)
        loss.backward()
        opt.step()
        return loss.item()

    for _ in range(20):
        step()
    start = time.perf_counter()
    for _ in range(steps):
        step()
    return steps * batch / (time.perf_counter() - start)


def main():
    binary, data = sys.argv[1], sys.argv[2]
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    print("| model | luminal samples/s | test accuracy | PyTorch eager samples/s | luminal / PyTorch |")
    print("|---|---|---|---|---|")
    for model in ("mlp", "cnn"):
        ours, accuracy = luminal_rate(binary, data, model)
        theirs = torch_rate(model)
        print(f"| {model} | {ours:.0f} | {accuracy} | {theirs:.0f} | {ours / theirs:.2f}x |")


if __name__ == "__main__":
    main()

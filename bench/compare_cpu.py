#!/usr/bin/env python3
"""Runs build/bench/bench_cpu and the PyTorch peer in the same run; writes
bench/results/cpu.md with the ratios. Use bench/run_cpu_bench.sh, which installs torch."""
import datetime
import json
import os
import platform
import subprocess
import sys
import time

import torch

ROOT = os.path.join(os.path.dirname(__file__), "..")
THREADS = os.cpu_count()


def luminal_results():
    out = subprocess.run([os.path.join(ROOT, "build", "bench", "bench_cpu"), "--benchmark_format=json"],
                         check=True, capture_output=True, text=True,
                         env={**os.environ, "LUMINAL_CACHE_DIR": os.path.join(ROOT, "build", "kernel-cache")}).stdout
    return {b["name"]: b for b in json.loads(out)["benchmarks"]}


def torch_ms(fn, reps=15):
    fn()
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    times.sort()
    return times[len(times) // 2] * 1e3


def main():
    torch.set_num_threads(THREADS)
    r = luminal_results()
    n = 4096
    x = (torch.arange(n * n, dtype=torch.float32) % 1000 * 1e-3).reshape(n, n)
    t_softmax = torch_ms(lambda: torch.softmax(x, -1))
    t_layer_norm = torch_ms(lambda: torch.nn.functional.layer_norm(x, (n,)))
    image = (torch.arange(8 * 64 * 112 * 112, dtype=torch.float32) % 1000 * 1e-3).reshape(8, 64, 112, 112)
    t_max_pool = torch_ms(lambda: torch.nn.functional.max_pool2d(image, 3, 2, 1))

    def ms(name):
        return r[name]["real_time"]

    copy_bw = r["BM_Copy/real_time"]["bytes_per_second"]
    fused_bw = r["BM_Chain/1/real_time"]["bytes_per_second"]
    rows = [
        ("8-op elementwise chain, 64M f32, fused", f"{ms('BM_Chain/1/real_time'):.1f} ms",
         f"{fused_bw / copy_bw:.0%} of copy bandwidth ({copy_bw / 1e9:.1f} GB/s)"),
        ("same chain, fusion off", f"{ms('BM_Chain/0/real_time'):.1f} ms",
         f"fused is {ms('BM_Chain/0/real_time') / ms('BM_Chain/1/real_time'):.1f}x faster"),
    ]
    for size in (1024, 4096):
        ours = r[f"BM_SgemmLuminal/{size}/real_time"]["GFLOPS"] / 1e9
        blas = r[f"BM_SgemmOpenBlas/{size}/real_time"]["GFLOPS"] / 1e9
        rows.append((f"SGEMM {size}^3", f"{ours:.0f} GFLOP/s", f"{ours / blas:.0%} of OpenBLAS ({blas:.0f} GFLOP/s)"))
    for label, name, peer in (("softmax [4096, 4096]", "BM_Norm/0/real_time", t_softmax),
                              ("layer_norm [4096, 4096]", "BM_Norm/1/real_time", t_layer_norm),
                              ("max_pool2d 3x3/2 [8, 64, 112, 112]", "BM_MaxPool/real_time", t_max_pool)):
        rows.append((label, f"{ms(name):.1f} ms", f"{ms(name) / peer:.2f}x PyTorch's time ({peer:.1f} ms)"))
    rows.append(("compile 2-layer MLP, cold", f"{ms('BM_CompileMlp/0/min_time:2.000/real_time'):.0f} ms", ""))
    rows.append(("compile 2-layer MLP, warm (cache hit)",
                 f"{ms('BM_CompileMlp/1/min_time:2.000/real_time'):.2f} ms", "target < 100 ms"))

    lines = [
        "# CPU backend benchmark",
        "",
        "Command: `bash bench/run_cpu_bench.sh` (builds, installs the pinned peers from",
        "bench/requirements.txt into build/bench-venv, runs build/bench/bench_cpu and PyTorch",
        "in the same run, and writes this file).",
        "",
        f"Machine: {platform.processor() or platform.machine()}, {THREADS} threads; "
        f"torch {torch.__version__}; {datetime.date.today()}.",
        "",
        "| benchmark | luminal | against the peer |",
        "| --- | --- | --- |",
    ] + [f"| {a} | {b} | {c} |" for a, b, c in rows]
    text = "\n".join(lines) + "\n"
    with open(os.path.join(ROOT, "bench", "results", "cpu.md"), "w") as f:
        f.write(text)
    sys.stdout.write(text)


if __name__ == "__main__":
    main()

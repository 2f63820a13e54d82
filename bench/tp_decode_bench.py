"""Tensor-parallel decode on several GPUs: `luminal generate --tp N` for each N and each way
of summing the ranks' partial results (small all-reduces over peer memory, the default, or
NCCL alone), alternated in rounds, as one markdown table (bench/results/multigpu.md).

Models of real shapes with random weights (bench/random_models.py): by default the
Llama-3.1-8B shape written as a Hugging Face folder, and with --shape llama-3.1-70b the
70B shape (or any shape, with --random-weights) as config.json and tokenizer.json alone,
its weights drawn at load (`luminal generate --random-weights`: 141 GB of bf16 need not
fit on disk). Each run: a 512-token prompt,
--new tokens after `--warmup --ignore-eos`; the columns are luminal's own report
(`LUMINAL_LOG=info`): the model's run of a decode step, its kernels' device time, a token
in all, and the time to first token. Greedy ids of the first 64 tokens are compared
between every configuration and the first (`--print-ids`).

    python3 bench/tp_decode_bench.py --luminal build/tools/luminal [--shape llama-3.1-8b]
        [--gpus 1,2,4,8] [--ways peers,nccl] [--rounds 2] [--new 256] [--work /tmp/tp]
        [--random-weights]
"""
import argparse
import os
import re
import subprocess
import sys

import random_models

STEP = re.compile(r"decode step: ([0-9.]+) ms in the model's run .* ([0-9.]+) ms of it on the "
                  r"device\), ([0-9.]+) ms per token in all")
FIRST = re.compile(r"time to first token: ([0-9.]+) s")


def model_folder(shape, work, random_weights):
    folder = os.path.join(work, shape)
    if random_weights or shape == "llama-3.1-70b":
        if not os.path.exists(os.path.join(folder, "config.json")):
            random_models.write_config_folder(folder, shape)
        return folder, ["--random-weights"]
    if not os.path.exists(os.path.join(folder, "model.safetensors")):
        random_models.write_hf_folder(folder, shape)
    return folder, []


def generate(binary, folder, extra, gpus, way, flags, log=False):
    """luminal generate's stdout and stderr for the 512-token prompt on `gpus` GPUs."""
    env = dict(os.environ, LUMINAL_CUDA_ALL_REDUCE=way, **({"LUMINAL_LOG": "info"} if log else {}))
    out = subprocess.run([binary, "generate", "--model", folder, *extra, "--device", "cuda",
                          "--tp", str(gpus), "--prompt", random_models.prompt_text(512),
                          "--ignore-eos", *flags], capture_output=True, text=True, env=env)
    if out.returncode != 0:
        sys.exit(f"luminal failed ({out.returncode}) on {gpus} GPUs, {way}:\n{out.stderr[-2000:]}")
    return out.stdout, out.stderr


def run(binary, folder, extra, gpus, way, new):
    _, err = generate(binary, folder, extra, gpus, way, ["--max-tokens", str(new), "--warmup"],
                      log=True)
    step, first = STEP.search(err), FIRST.search(err)
    if not step or not first:
        sys.exit(f"no decode report in luminal's output:\n{err[-2000:]}")
    return [float(v) for v in step.groups()] + [float(first.group(1)) * 1e3]


def greedy_ids(binary, folder, extra, gpus, way):
    out, _ = generate(binary, folder, extra, gpus, way, ["--max-tokens", "64", "--print-ids"])
    return out.strip().splitlines()[-1]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--luminal", required=True, help="the luminal binary")
    p.add_argument("--shape", default="llama-3.1-8b", choices=sorted(random_models.SHAPES))
    p.add_argument("--gpus", default="1,2", help="GPU counts, comma-separated")
    p.add_argument("--ways", default="peers,nccl",
                   help="all-reduce ways on several GPUs: peers (default), nccl")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--new", type=int, default=256, help="tokens generated a run")
    p.add_argument("--work", default="/tmp/tp_decode", help="where the model is written")
    p.add_argument("--random-weights", action="store_true",
                   help="draw the weights at load (always for the 70B shape), no folder of them")
    args = p.parse_args()
    folder, extra = model_folder(args.shape, args.work, args.random_weights)
    configs = []
    for n in (int(g) for g in args.gpus.split(",")):
        for way in (args.ways.split(",") if n > 1 else ["peers"]):
            configs.append((n, way))
    times = {c: [] for c in configs}
    for _ in range(args.rounds):
        for c in configs:
            times[c].append(run(args.luminal, folder, extra, c[0], c[1], args.new))
    print(f"{args.shape}, {args.new} tokens after a 512-token prompt, {args.rounds} rounds")
    print("| GPUs | all-reduce | model run ms | device ms | in all ms | first token ms "
          "| over one GPU (model run) | greedy ids as the first |")
    print("|---|---|---|---|---|---|---|---|")
    base = min(t[0] for t in times[configs[0]])
    ids = {c: greedy_ids(args.luminal, folder, extra, c[0], c[1]) for c in configs}
    for c in configs:
        cols = [" / ".join(f"{t[k]:.3f}" for t in times[c]) for k in range(4)]
        best = min(t[0] for t in times[c])
        way = "-" if c[0] == 1 else ("peer memory" if c[1] == "peers" else "NCCL alone")
        print(f"| {c[0]} | {way} | {' | '.join(cols)} | {base / best:.2f}x "
              f"| {'yes' if ids[c] == ids[configs[0]] else 'no'} |")


if __name__ == "__main__":
    main()

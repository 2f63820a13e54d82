#!/usr/bin/env python3
"""luminal generate vs llama.cpp (llama-cpp-python, as bench/compare_generate.py runs it) on
a mixture-of-experts GGUF file on the CPU: the Qwen3-30B-A3B shape's first four layers
(real layer sizes: 128 experts of 768 units, 8 a token; random Q4_K blocks, written by
bench/random_models.py without torch), the long prompt of compare_generate.py, 64 greedy
tokens, alternating the two programs. Prints each run's prompt and decode rates and the
ratios of the medians.

    bash scripts/build.sh
    build/bench-venv-generate/bin/python -m pip install transformers==4.57.1   # the config
    build/bench-venv-generate/bin/python bench/compare_moe_cpu.py [--reps 5] [--threads N]
(the venv as bench/run_generate_bench.sh makes it)."""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import compare_generate as c  # noqa: E402
import random_models  # noqa: E402
from llama_cpp import Llama  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--tokens", type=int, default=64)
    a = ap.parse_args()
    model = os.path.join(c.ROOT, "models", "qwen3-30b-a3b-4l-Q4_K.gguf")
    if not os.path.exists(model):
        os.makedirs(os.path.dirname(model), exist_ok=True)
        random_models.write_gguf(model + ".part", "qwen3-30b-a3b", "Q4_K", layers=4)
        os.rename(model + ".part", model)
    env = {**os.environ, "OMP_NUM_THREADS": str(a.threads),
           "LUMINAL_CACHE_DIR": os.path.join(c.ROOT, "build", "kernel-cache")}
    c.luminal_run(model, c.SHORT, 2, env)  # compiles (or finds) the kernels
    llm = Llama(model_path=model, n_threads=a.threads, n_threads_batch=a.threads, n_ctx=1024,
                verbose=False)
    ours, peer = [], []
    for _ in range(a.reps):
        ours.append(c.luminal_run(model, c.LONG, a.tokens, env))
        peer.append(c.llama_run(llm, c.LONG, a.tokens))
    for name, runs in (("luminal", ours), ("llama.cpp", peer)):
        print(f"{name}: {runs[0]['prompt_tokens']}-token prompt, prompt tok/s "
              f"{sorted(round(r['prompt_tps'], 1) for r in runs)}, decode tok/s "
              f"{sorted(round(r['decode_tps'], 2) for r in runs)}")
    for key in ("prompt_tps", "decode_tps"):
        print(f"median {key}: luminal / llama.cpp = "
              f"{c.median_of(ours, key) / c.median_of(peer, key):.2f}")


if __name__ == "__main__":
    main()

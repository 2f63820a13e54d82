"""PyTorch's tensor parallelism as the peer of `luminal generate --tp N`: Hugging Face
transformers' model split by its own tensor-parallel plan (tp_plan="auto": DTensor over
NCCL, one process a GPU), bf16, greedy decode through its KV cache, eager (no CUDA graph).

    torchrun --nproc-per-node N bench/torch_tp_decode.py --model DIR [--prompt 512] [--new 128]

Rank 0 prints one line: ranks, prompt tokens, time to first token and decode ms/token.
With one process the model is loaded whole (no plan).
"""
import argparse
import os
import time

import torch
import torch.distributed as dist

import random_models


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--prompt", type=int, default=512)
    ap.add_argument("--new", type=int, default=128)
    a = ap.parse_args()
    from transformers import AutoModelForCausalLM

    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    torch.cuda.set_device(rank)
    if world > 1:
        dist.init_process_group("nccl")
        model = AutoModelForCausalLM.from_pretrained(a.model, dtype=torch.bfloat16, tp_plan="auto")
    else:
        model = AutoModelForCausalLM.from_pretrained(a.model, dtype=torch.bfloat16).cuda()
    model.eval()
    ids = torch.tensor([random_models.prompt_ids(a.prompt)], device="cuda")

    def run(steps):
        torch.cuda.synchronize()
        start = time.perf_counter()
        out = model(ids, use_cache=True)
        cache, token = out.past_key_values, out.logits[:, -1:].argmax(-1)
        torch.cuda.synchronize()
        ttft = time.perf_counter() - start
        start = time.perf_counter()
        for _ in range(steps):
            out = model(token, past_key_values=cache, use_cache=True)
            cache, token = out.past_key_values, out.logits[:, -1:].argmax(-1)
        torch.cuda.synchronize()
        return ttft, (time.perf_counter() - start) / max(steps, 1)

    with torch.no_grad():
        run(8)  # warm-up
        ttft, step = run(a.new)
    if rank == 0:
        print(f"torch tp{world}: prompt {a.prompt} tokens, time to first token {ttft * 1e3:.1f} ms, "
              f"decode {step * 1e3:.3f} ms/token", flush=True)
    if world > 1:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()

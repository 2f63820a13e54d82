#!/usr/bin/env python3
"""The peer of bench_train_ranks: the same GPT-2-small-shaped model (tools/fixtures'
Gpt) trained data-parallel by PyTorch's DistributedDataParallel over NCCL (buckets of
25 MB, all-reduced while the backward pass runs), one process a GPU, the forward pass
under torch.compile (or eager with --eager), bf16 autocast over f32 master weights,
AdamW; batch 8 x 1024 tokens a GPU.

    torchrun --nproc-per-node N bench/torch_ddp_train.py [--eager]

Rank 0 prints the median step's milliseconds and tokens a second over all GPUs.
"""
import argparse
import os
import sys

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tools", "fixtures"))
sys.path.insert(0, os.path.dirname(__file__))
from make_training import Gpt  # noqa: E402
from train_gpt2_bench import VOCAB, adamw_step, time_step  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--eager", action="store_true")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=10)
    args = ap.parse_args()
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(rank)
    torch.manual_seed(0)
    model = Gpt(VOCAB, args.seq, 12, 12, 768).cuda()
    ddp = torch.nn.parallel.DistributedDataParallel(model, device_ids=[rank])
    ms, first = time_step(adamw_step(ddp, args.batch, args.seq, not args.eager), args.steps)
    if rank == 0:
        mode = "eager" if args.eager else "torch.compile"
        print(f"torch DDP {mode} ranks {world}: median step {ms:.2f} ms, "
              f"{world * args.batch * args.seq / (ms / 1e3):.0f} tokens/s, first step {first:.1f} s",
              flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

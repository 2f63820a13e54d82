"""torch.compile(backend="luminal") against backend="inductor" in the same run: compile
time (the first call) and steady-state time per forward, on the GPU in bf16 (random
weights; nothing is downloaded).

    python3 bench/torch_compile_bench.py [--models block,resnet18,llama-tiny,llama-1b]
                                         [--batches 1,32] [--iters 50]

Prints one line per model, batch and backend (with the second call's time too: luminal
times the graph's other programs there), and a Markdown table at the end. Two
steady-state times: the median of calls each waited for (a call's latency, the host's
work before the GPU starts included), and calls queued back to back, waited for once
(where the host prepares the next call while the GPU runs this one).
"""
import argparse
import pathlib
import statistics
import sys
import time
import traceback

import torch

sys.path.insert(0, str(pathlib.Path(__file__).parents[1] / "python" / "tests"))
from torch_models import Block  # noqa: E402  (the transformer block the tests run)


def llama(hidden, layers, heads, kv_heads, inter, vocab):
    from transformers import LlamaConfig, LlamaForCausalLM
    return LlamaForCausalLM(LlamaConfig(
        vocab_size=vocab, hidden_size=hidden, intermediate_size=inter, num_hidden_layers=layers,
        num_attention_heads=heads, num_key_value_heads=kv_heads, max_position_embeddings=4096))


def model_and_input(name, batch):
    if name == "block":
        return Block(dim=1024, heads=16), torch.randn(batch, 256, 1024)
    if name == "resnet18":
        import torchvision
        return torchvision.models.resnet18(), torch.randn(batch, 3, 224, 224)
    if name == "llama-tiny":
        return llama(256, 4, 8, 4, 704, 32000), torch.randint(0, 32000, (batch, 128))
    if name == "llama-1b":  # Llama-3.2-1B's shape
        return llama(2048, 16, 32, 8, 8192, 128256), torch.randint(0, 128256, (batch, 128))
    raise SystemExit(f"unknown model {name}")


def timed(fn, x, iters):
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    with torch.no_grad():
        out = fn(x)
    torch.cuda.synchronize()
    first = time.perf_counter() - t0
    for i in range(3):
        t0 = time.perf_counter()
        with torch.no_grad():
            fn(x)
        torch.cuda.synchronize()
        if i == 0:  # (luminal times other programs of the graph at its second call)
            second = time.perf_counter() - t0
    times = []
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for _ in range(iters):
        start.record()
        with torch.no_grad():
            fn(x)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    start.record()
    with torch.no_grad():
        for _ in range(iters):
            fn(x)
    end.record()
    end.synchronize()
    return first, second, statistics.median(times), start.elapsed_time(end) / iters, out


def logits(out):
    return out.logits if hasattr(out, "logits") else out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--models", default="block,resnet18,llama-tiny,llama-1b")
    ap.add_argument("--batches", default="1,32")
    ap.add_argument("--iters", type=int, default=50)
    args = ap.parse_args()
    torch.manual_seed(0)
    rows = []
    for name in args.models.split(","):
        for batch in [int(b) for b in args.batches.split(",")]:
            if name == "llama-1b" and batch > 1:
                continue  # one prompt of 128 tokens: 1B's forward is already compute-bound
            model, x = model_and_input(name, batch)
            model = model.to("cuda", torch.bfloat16).eval()
            x = x.to("cuda")
            x = x.to(torch.bfloat16) if x.is_floating_point() else x
            results = {}
            for backend in ("eager", "inductor", "luminal"):
                torch._dynamo.reset()
                fn = model if backend == "eager" else torch.compile(model, backend=backend)
                try:
                    first, second, ms, queued, out = timed(fn, x, args.iters)
                except Exception:
                    print(f"{name} b{batch} {backend}: FAILED\n{traceback.format_exc()[-3000:]}",
                          flush=True)
                    continue
                results[backend] = (first, ms, logits(out).float(), queued)
                err = ""
                if "eager" in results and backend != "eager":
                    ref = results["eager"][2]
                    err = f"  max|diff|/max|eager| {((logits(out).float() - ref).abs().max() / ref.abs().max()).item():.3g}"
                print(f"{name} b{batch} {backend}: first call {first:.2f} s, second "
                      f"{second:.2f} s, {ms:.3f} ms, "
                      f"{queued:.3f} ms queued{err}", flush=True)
            rows.append((name, batch, results))
    print("\n| model | batch | eager ms | inductor ms (compile s) | luminal ms (compile s) "
          "| luminal speed / inductor's | queued: inductor ms, luminal ms, speed |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for name, batch, r in rows:
        def cell(b):
            return f"{r[b][1]:.3f} ({r[b][0]:.1f})" if b in r else "failed"
        both = "inductor" in r and "luminal" in r
        ratio = f"{r['inductor'][1] / r['luminal'][1]:.2f}x" if both else "-"
        queued = (f"{r['inductor'][3]:.3f}, {r['luminal'][3]:.3f}, "
                  f"{r['inductor'][3] / r['luminal'][3]:.2f}x") if both else "-"
        eager = f"{r['eager'][1]:.3f}" if "eager" in r else "-"
        print(f"| {name} | {batch} | {eager} | {cell('inductor')} | {cell('luminal')} | {ratio} "
              f"| {queued} |")


if __name__ == "__main__":
    main()

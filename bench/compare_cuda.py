#!/usr/bin/env python3
"""luminal's CUDA backend against PyTorch on the same GPU, in one run.

Measures the floors first (device copy bandwidth, torch's GEMM rate), then each case
of bench_cuda beside its PyTorch peer (eager, and torch.compile where it fuses), and
prints a table of times and ratios (peer time / luminal time: above 1 is faster).
Usage: compare_cuda.py path/to/bench_cuda [case filter]
(the filter, a substring of case names, is passed to bench_cuda and limits the peers)
"""
import subprocess
import sys

import torch


def bench(fn, warmup=3, runs=20, alone=False):
    """Median ms of `runs` calls of fn between CUDA events, after `warmup`. Called from
    Python, the events hold its dispatch (10 us and more, which a short kernel's time
    holds). `alone`: the device's time alone, a spinning kernel keeping the GPU busy
    while the host queues the start event, fn's work and the stop event. (bench_cuda's
    times of luminal hold one thing of the host's: the launch of the run's CUDA graph.)"""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(runs):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        if alone:
            torch.cuda._sleep(2_000_000)  # about a millisecond
        s.record()
        fn()
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e))
    times.sort()
    return times[len(times) // 2]


def chain(x):
    return ((((x * 1.5 + 0.25).sin() * x) + 2.0) * 0.5).reciprocal() * x


def rmsnorm(x):
    return x * torch.rsqrt((x * x).mean(1, keepdim=True) + 1e-6)


def main():
    exe = sys.argv[1]
    only = sys.argv[2] if len(sys.argv) > 2 else ""

    def want(case):
        return only in case
    dev = torch.device("cuda")
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}", flush=True)
    peers = {}
    n = 256 << 20
    x = torch.rand(n, device=dev) * 2 - 1
    y = torch.empty_like(x)
    copy_ms = bench(lambda: y.copy_(x))
    copy_gbs = 2 * n * 4 / copy_ms / 1e6
    print(f"floor: device copy {copy_gbs:.0f} GB/s (read + write of 1 GiB in {copy_ms:.3f} ms)")
    one = torch.zeros(1, device=dev)
    print(f"floor: one kernel writing 4 bytes between two events: {bench(lambda: one.zero_()) * 1e3:.1f} us "
          f"eager, {bench(lambda: one.zero_(), alone=True) * 1e3:.1f} us on the device alone")
    del one
    if want("chain8_f32_256M"):
        peers["chain8_f32_256M"] = {"eager": bench(lambda: chain(x)),
                                    "compile": bench(lambda c=torch.compile(chain): c(x))}
    a = torch.rand(4096, 4096, device=dev)
    b = torch.rand(4096, 4096, device=dev)
    peers["gemm_f32_4096"] = {"matmul": bench(lambda: a @ b)}
    ab, bb = a.bfloat16(), b.bfloat16()
    peers["gemm_bf16_4096"] = {"matmul": bench(lambda: ab @ bb)}
    bf16_ms = peers["gemm_bf16_4096"]["matmul"]
    print(f"floor: torch bf16 GEMM 4096^3 {2 * 4096**3 / bf16_ms / 1e9:.0f} TFLOP/s, "
          f"f32 {2 * 4096**3 / peers['gemm_f32_4096']['matmul'] / 1e9:.1f} TFLOP/s")
    del a, b, ab, bb
    if want("gemm_bf16_8192"):
        a8 = torch.rand(8192, 8192, device=dev, dtype=torch.bfloat16)
        b8 = torch.rand(8192, 8192, device=dev, dtype=torch.bfloat16)
        peers["gemm_bf16_8192"] = {"matmul": bench(lambda: a8 @ b8)}
        del a8, b8
    bytes_moved = {"chain8_f32_256M": 2 * n * 4}
    flops = {}
    # A linear layer's output added to the residual stream (a block's down projection
    # over 8192 tokens), bf16.
    case = "linear_residual_bf16_8192x4096x1024"
    if want(case):
        h = torch.rand(8192, 4096, device=dev, dtype=torch.bfloat16)
        w = torch.rand(1024, 4096, device=dev, dtype=torch.bfloat16)
        bias = torch.rand(1024, device=dev, dtype=torch.bfloat16)
        res = torch.rand(8192, 1024, device=dev, dtype=torch.bfloat16)

        def linear_residual(h, w, bias, res):
            return res + torch.nn.functional.linear(h, w, bias)
        compiled = torch.compile(linear_residual)
        peers[case] = {"eager": bench(lambda: linear_residual(h, w, bias, res)),
                       "compile": bench(lambda: compiled(h, w, bias, res))}
        flops[case] = 2 * 8192 * 4096 * 1024
        del h, w, bias, res
    # ResNet's 3x3 convolution at batch 32 (64 channels, 56x56, padding 1) and a ReLU,
    # bf16, NCHW: torch calls cuDNN.
    case = "conv3x3_relu_bf16_32x64x56x56"
    if want(case):
        xc = torch.rand(32, 64, 56, 56, device=dev, dtype=torch.bfloat16)
        wc = torch.rand(64, 64, 3, 3, device=dev, dtype=torch.bfloat16)

        def conv_relu(x, w):
            return torch.relu(torch.nn.functional.conv2d(x, w, padding=1))
        compiled = torch.compile(conv_relu)
        peers[case] = {"eager": bench(lambda: conv_relu(xc, wc)),
                       "compile": bench(lambda: compiled(xc, wc))}
        flops[case] = 2 * 32 * 64 * 56 * 56 * 64 * 9
        del xc, wc
    # One row against bf16 weights; the qgemv cases are luminal's f32 activations over a
    # bf16 checkpoint's stored weights, against the same bf16 F.linear.
    for k, nn in [(4096, 14336), (14336, 4096)]:
        cases = [c for c in (f"gemv_bf16_{k}x{nn}", f"qgemv_bf16_{k}x{nn}") if want(c)]
        if not cases:
            continue
        xv = torch.rand(1, k, device=dev, dtype=torch.bfloat16)
        w = torch.rand(nn, k, device=dev, dtype=torch.bfloat16)
        linear = lambda: torch.nn.functional.linear(xv, w)
        times = {"linear": bench(linear, runs=50), "linear, device alone": bench(linear, runs=50, alone=True)}
        for case in cases:
            peers[case] = dict(times)
            bytes_moved[case] = w.numel() * 2
        del xv, w
    # The same products one after another, eight pairs of up (4096 -> 14336) and down
    # projections over weights of their own, as a decode step runs them (the time a
    # product): F.linear's chain on the device alone.
    case = "gemv_bf16_16_layers"
    if want(case):
        h = torch.rand(1, 4096, device=dev, dtype=torch.bfloat16)
        ws = [torch.rand(*shape, device=dev, dtype=torch.bfloat16) - 0.5
              for _ in range(8) for shape in ((14336, 4096), (4096, 14336))]

        def chain_of_linears():
            t = h
            for w in ws:
                t = torch.nn.functional.linear(t, w)
            return t
        peers[case] = {"16 linears, device alone": bench(chain_of_linears, runs=50, alone=True) / 16}
        bytes_moved[case] = 4096 * 14336 * 2
        del h, ws
    # Weights in ggml block formats under f32 activations: no torch peer; the share of
    # copy bandwidth the blocks' bytes take.
    for fmt, block_bytes, block_elems in [("q4k", 144, 256), ("q5k", 176, 256), ("q6k", 210, 256),
                                          ("q8_0", 34, 32)]:
        for k, nn in [(4096, 14336), (14336, 4096)]:
            bytes_moved[f"qgemv_{fmt}_{k}x{nn}"] = nn * k // block_elems * block_bytes
    # A sampled token's candidates over a 128k vocabulary (torch.topk, sorted).
    for k in (1024, 40):
        case = f"top_k_{k}_128256"
        if want(case):
            logits = torch.rand(1, 128256, device=dev)
            top = lambda: torch.topk(logits, k)
            peers[case] = {"topk": bench(top, runs=50), "topk, device alone": bench(top, runs=50, alone=True)}
            del logits
    # Attention: 32 query heads over 8 key heads of 128 dims; luminal's cache is f16 and
    # its queries f32 (or all bf16, the _bf16 case), torch's SDPA all f16 (or bf16): its
    # fast path. Decode: one query against 4k and 32k cached positions, measured against
    # the cache's bytes; prefill: 4096 tokens, causal, measured in TFLOP/s (the products'
    # multiply-adds over the kept half of the scores).
    sdpa = torch.nn.functional.scaled_dot_product_attention
    for case, seq, total, dtype in [
            ("attention_decode_4k", 1, 4096, torch.float16),
            ("attention_decode_32k", 1, 32768, torch.float16),
            ("attention_decode_32k_bf16", 1, 32768, torch.bfloat16),
            ("attention_prefill_4k", 4096, 4096, torch.float16),
            ("attention_prefill_4k_bf16", 4096, 4096, torch.bfloat16)]:
        if not want(case):
            continue
        q = torch.rand(1, 32, seq, 128, device=dev, dtype=dtype)
        kc = torch.rand(1, 8, total, 128, device=dev, dtype=dtype)
        vc = torch.rand(1, 8, total, 128, device=dev, dtype=dtype)
        causal = seq > 1
        attend = lambda: sdpa(q, kc, vc, is_causal=causal, enable_gqa=True)
        peers[case] = {"sdpa": bench(attend)}
        if causal:
            flops[case] = 2 * 2 * 32 * 128 * seq * (seq + 1) / 2
        else:
            bytes_moved[case] = 2 * kc.numel() * 2
            # Decoding's kernels are short: eager timing holds Python's dispatch. On the
            # device alone too; and torch's sum of the cache's bytes, a kernel that only
            # reads them (not the floor: bench/read_floor.cu reads them faster).
            peers[case]["sdpa, device alone"] = bench(attend, alone=True)
            kv = torch.stack([kc, vc])
            peers[case]["sum of the cache, device alone"] = bench(lambda: kv.sum(dtype=torch.float32), alone=True)
            del kv
        del q, kc, vc
    # The same decoding, 16 layers' attentions one after another in one replayed program
    # (the time a layer): no peer, the share of copy bandwidth a layer's cache takes.
    for past in (4096, 32768):
        bytes_moved[f"attention_decode_{past // 1024}k_bf16_16_layers"] = 2 * 2 * 8 * (past + 1) * 128
    # (And eight sequences of 4k a layer: the bytes of one of 32k.)
    bytes_moved["attention_decode_4k_bf16_batch8_16_layers"] = 8 * 2 * 2 * 8 * 4097 * 128
    # Many short prompts, as the transformer block of torch_compile_bench.py at batch 32:
    # 32 x 16 heads of 64 dims over 256 tokens, causal, bf16.
    case = "attention_prefill_32x256_bf16"
    if want(case):
        q, kc, vc = (torch.rand(32, 16, 256, 64, device=dev, dtype=torch.bfloat16) for _ in range(3))
        attend = lambda: sdpa(q, kc, vc, is_causal=True)
        peers[case] = {"sdpa": bench(attend), "sdpa, device alone": bench(attend, alone=True)}
        flops[case] = 2 * 2 * 32 * 16 * 64 * 256 * 257 / 2
        del q, kc, vc
    row_ops = {"softmax": lambda t: torch.softmax(t, 1), "rmsnorm": rmsnorm,
               "layernorm": lambda t: torch.nn.functional.layer_norm(t, (t.shape[1],), eps=1e-5)}
    for dtype, name in [(torch.float32, "f32"), (torch.bfloat16, "bf16")]:
        r = (torch.rand(8192, 8192, device=dev) * 2 - 1).to(dtype)
        for op, fn in row_ops.items():
            case = f"{op}_{name}_8192x8192"
            if not want(case):
                continue
            peers[case] = {"eager": bench(lambda: fn(r)),
                           "compile": bench(lambda c=torch.compile(fn): c(r))}
            bytes_moved[case] = 2 * r.numel() * r.element_size()
        del r
    # The sum of every element of 16M f32 (a loss's or a gradient norm's total).
    case = "sum_all_f32_16M"
    if want(case):
        t = torch.rand(16 << 20, device=dev)
        peers[case] = {"sum": bench(lambda: t.sum())}
        bytes_moved[case] = t.numel() * t.element_size()
        del t
    # Each of 64 rows of 1M f32 summed.
    case = "sum_rows_f32_64x1M"
    if want(case):
        t = torch.rand(64, 1 << 20, device=dev)
        peers[case] = {"sum": bench(lambda: t.sum(1))}
        bytes_moved[case] = t.numel() * t.element_size()
        del t
    # The GELU of a transformer block's up projection at batch 32 (8192 tokens x 4096),
    # bf16 computed in f32 as PyTorch does.
    case = "gelu_bf16_8192x4096"
    if want(case):
        g = (torch.rand(8192, 4096, device=dev) * 8 - 4).bfloat16()
        gelu = torch.nn.functional.gelu
        peers[case] = {"eager": bench(lambda: gelu(g)),
                       "compile": bench(lambda c=torch.compile(gelu): c(g))}
        bytes_moved[case] = 2 * g.numel() * g.element_size()
        del g
    # A gated MLP's activation over a 4096-token prompt, SiLU(gate) * up, bf16.
    case = "swiglu_bf16_4096x14336"
    if want(case):
        gate = torch.randn(4096, 14336, device=dev).bfloat16()
        up = torch.randn(4096, 14336, device=dev).bfloat16()

        def swiglu(a, b):
            return torch.nn.functional.silu(a) * b
        peers[case] = {"eager": bench(lambda: swiglu(gate, up)),
                       "compile": bench(lambda c=torch.compile(swiglu): c(gate, up))}
        bytes_moved[case] = 3 * gate.numel() * gate.element_size()
        del gate, up
    del x, y
    torch.cuda.empty_cache()
    out = subprocess.run([exe] + ([only] if only else []), capture_output=True, text=True)
    sys.stderr.write(out.stderr)
    ours = {}
    for line in out.stdout.splitlines():
        name, ms = line.split()
        ours[name] = float(ms)
    print(f"\n| case | luminal ms | % of copy bandwidth | peer | peer ms | peer / luminal |")
    print("|---|---|---|---|---|---|")
    for name, ms in ours.items():
        if name.startswith("gemm"):
            n3 = int(name.rsplit("_", 1)[1]) ** 3
            for peer, pms in peers.get(name, {}).items():
                print(f"| {name} | {ms:.3f} | {2 * n3 / ms / 1e9:.0f} TFLOP/s | {peer} | {pms:.3f} | {pms / ms:.2f}x |")
            continue
        if name.startswith("mlp2_compile") or name.startswith("launch_us"):
            print(f"| {name} | {ms:.1f} | - | - | - | - |")
            continue
        bw = bytes_moved.get(name)
        pct = f"{100 * bw / ms / 1e6 / copy_gbs:.0f}%" if bw else "-"
        if name in flops:
            pct = f"{flops[name] / ms / 1e9:.0f} TFLOP/s"
        for peer, pms in peers.get(name, {}).items():
            if bw and name not in flops:
                peer += f" ({100 * bw / pms / 1e6 / copy_gbs:.0f}% of copy)"
            print(f"| {name} | {ms:.3f} | {pct} | {peer} | {pms:.3f} | {pms / ms:.2f}x |")
        if name not in peers:
            print(f"| {name} | {ms:.3f} | {pct} | - | - | - |")
    if out.returncode != 0:
        sys.exit(f"bench_cuda failed with exit code {out.returncode}")


if __name__ == "__main__":
    main()

"""Where a torch.compile call's time goes, for luminal and Inductor: the GPU's busy time
and kernels a call (torch.profiler's trace of the GPU, CUDA graphs' kernels included),
against the call's wall time queued back to back and waited for one by one.

A call whose wall time is above its GPU's busy time is bound by the host (Python, the
dispatch, the launches); one near it, by its kernels, which the list of each run's
costliest kernels then names. Models and inputs as bench/torch_compile_bench.py's.

    python3 bench/torch_compile_timeline.py --runs block:32,llama-tiny:32,resnet18:32

Writes each run's Chrome trace (--traces DIR, default: none).
"""
import argparse
import os
import pathlib
import sys
import time

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from torch_compile_bench import model_and_input  # noqa: E402


def busy_and_gaps(intervals):
    """The union of the kernels' intervals (us), and the gaps between its pieces."""
    busy, gaps, start, end = 0.0, [], None, None
    for s, e in sorted(intervals):
        if end is None or s > end:
            if end is not None:
                busy += end - start
                gaps.append(s - end)
            start, end = s, e
        else:
            end = max(end, e)
    if end is not None:
        busy += end - start
    return busy, gaps


def report(prof, calls, label, top, traces):
    kernels = [(e.time_range.start, e.time_range.end, e.name) for e in prof.events()
               if e.device_type == torch.autograd.DeviceType.CUDA]
    busy, gaps = busy_and_gaps([(s, e) for s, e, _ in kernels])
    span = max(e for _, e, _ in kernels) - min(s for s, _, _ in kernels) if kernels else 0.0
    print(f"{label}: {len(kernels) / calls:.0f} kernels a call, GPU busy "
          f"{busy / calls / 1e3:.3f} ms a call over a span of {span / calls / 1e3:.3f} ms "
          f"(gaps over 5 us: "
          f"{sum(g for g in gaps if g > 5) / calls / 1e3:.3f} ms a call)", flush=True)
    by_name = {}
    for s, e, name in kernels:
        t = by_name.setdefault(name[:100], [0.0, 0])
        t[0] += e - s
        t[1] += 1
    for name, (t, n) in sorted(by_name.items(), key=lambda kv: -kv[1][0])[:top]:
        print(f"    {t / calls / 1e3:.4f} ms  x{n / calls:.0f}  {name}")
    if traces:
        prof.export_chrome_trace(os.path.join(traces, f"{label}.json"))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--runs", default="block:32,llama-tiny:32,resnet18:32",
                    help="model:batch pairs, comma-separated")
    ap.add_argument("--calls", type=int, default=50, help="calls timed a way (default 50)")
    ap.add_argument("--profiled", type=int, default=20, help="calls traced (default 20)")
    ap.add_argument("--top", type=int, default=12, help="kernels listed a run (default 12)")
    ap.add_argument("--traces", help="a folder for the Chrome traces")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("torch_compile_timeline: no CUDA device")
    for run in args.runs.split(","):
        name, batch = run.split(":")
        torch.manual_seed(0)
        model, x = model_and_input(name, int(batch))
        model = model.to("cuda", torch.bfloat16).eval()
        x = x.to("cuda")
        x = x.to(torch.bfloat16) if x.is_floating_point() else x
        for backend in ("inductor", "luminal"):
            torch._dynamo.reset()
            fn = torch.compile(model, backend=backend)
            with torch.no_grad():
                for _ in range(5):
                    fn(x)
                torch.cuda.synchronize()
                t = time.perf_counter()
                for _ in range(args.calls):
                    fn(x)
                torch.cuda.synchronize()
                queued = (time.perf_counter() - t) / args.calls * 1e3
                t = time.perf_counter()
                for _ in range(args.calls):
                    fn(x)
                    torch.cuda.synchronize()
                waited = (time.perf_counter() - t) / args.calls * 1e3
                with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
                    for _ in range(args.profiled):
                        fn(x)
                    torch.cuda.synchronize()
            print(f"== {name} b{batch} {backend}: {queued:.3f} ms a call queued, "
                  f"{waited:.3f} ms waited for", flush=True)
            report(prof, args.profiled, f"{name}_b{batch}_{backend}", args.top, args.traces)


if __name__ == "__main__":
    main()

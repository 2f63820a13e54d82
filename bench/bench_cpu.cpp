// CPU backend throughput, each against its peer in the same run.
//   BM_Copy:            memcpy of 64M floats: the machine's copy bandwidth (the floor)
//   BM_Chain/fused|unfused: 8 elementwise ops over 64M floats, fusion on and off
//   BM_Sgemm/luminal|openblas: n x n x n single-precision GEMM
//   BM_Softmax, BM_LayerNorm: over [4096, 4096] (PyTorch in bench/compare_torch.py)
//   BM_MaxPool: 3x3 max pooling, stride 2, padding 1, over [8, 64, 112, 112]
//   BM_CompileMlp/cold|warm: compile a 2-layer MLP with an empty and a warm cache
// Bytes per second count the bytes that must move (input read + output written).
#include <benchmark/benchmark.h>

#include <cblas.h>
#include <omp.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <vector>

#include "luminal/luminal.hpp"

namespace {

using namespace luminal;

constexpr int64_t kChain = 64 << 20;  // 64M floats

std::vector<float> ramp(size_t n) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<float>(i % 1000) * 1e-3f;
  return v;
}

void BM_Copy(benchmark::State& state) {
  std::vector<float> src = ramp(kChain), dst(kChain);
  for (auto _ : state) {
    std::memcpy(dst.data(), src.data(), kChain * sizeof(float));
    benchmark::DoNotOptimize(dst.data());
  }
  state.SetBytesProcessed(state.iterations() * kChain * 8);
}
BENCHMARK(BM_Copy)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_Chain(benchmark::State& state) {
  Graph cx;
  Tensor x = cx.named_tensor("x", {kChain});
  x.set(ramp(kChain));
  Tensor y = x;
  for (int i = 0; i < 3; ++i) y = y * 1.0001 + 0.5;  // 6 ops
  y = y.sqrt() * 0.75;                               // 8 ops
  y.retrieve();
  cx.compile(cpu(CpuOptions{.fuse = state.range(0) == 1}));
  cx.execute();  // warm-up: first-touch page faults and buffer allocation
  for (auto _ : state) cx.execute();
  state.SetBytesProcessed(state.iterations() * kChain * 8);
  state.SetLabel(state.range(0) ? "fused" : "unfused");
}
BENCHMARK(BM_Chain)->Arg(1)->Arg(0)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_SgemmLuminal(benchmark::State& state) {
  const int64_t n = state.range(0);
  Graph cx;
  Tensor a = cx.named_tensor("a", {n, n}), b = cx.named_tensor("b", {n, n});
  a.set(ramp(n * n));
  b.set(ramp(n * n));
  a.matmul(b).retrieve();
  cx.compile(cpu());
  cx.execute();  // warm-up: first-touch page faults and buffer allocation
  for (auto _ : state) cx.execute();
  state.counters["GFLOPS"] = benchmark::Counter(
      2.0 * n * n * n, benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1000);
}
BENCHMARK(BM_SgemmLuminal)->Arg(1024)->Arg(4096)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_SgemmOpenBlas(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0));
  std::vector<float> a = ramp(static_cast<size_t>(n) * n), b = a, c(a.size());
  // The CPU backend keeps OpenBLAS single-threaded (it threads through OpenMP); the peer
  // gets OpenBLAS's own threading on every core.
  openblas_set_num_threads(omp_get_max_threads());
  for (auto _ : state)
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a.data(), n, b.data(), n,
                0.0f, c.data(), n);
  state.counters["GFLOPS"] = benchmark::Counter(
      2.0 * n * n * n, benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1000);
}
BENCHMARK(BM_SgemmOpenBlas)->Arg(1024)->Arg(4096)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_Norm(benchmark::State& state) {
  const int64_t n = 4096;
  Graph cx;
  Tensor x = cx.named_tensor("x", {n, n});
  x.set(ramp(n * n));
  (state.range(0) == 0 ? x.softmax(-1) : x.layer_norm({-1}, 1e-5)).retrieve();
  cx.compile(cpu());
  cx.execute();  // warm-up: first-touch page faults and buffer allocation
  for (auto _ : state) cx.execute();
  state.SetBytesProcessed(state.iterations() * n * n * 8);
  state.SetLabel(state.range(0) == 0 ? "softmax" : "layer_norm");
}
BENCHMARK(BM_Norm)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond)->UseRealTime();

// resnet's max pooling: 3x3 windows, stride 2, padding 1 (with -inf), over [8, 64, 112,
// 112] f32.
void BM_MaxPool(benchmark::State& state) {
  Graph cx;
  Tensor x = cx.named_tensor("x", {8, 64, 112, 112});
  x.set(ramp(8 * 64 * 112 * 112));
  max_pool2d(x, {.kernel = 3, .stride = 2, .padding = 1}).retrieve();
  cx.compile(cpu());
  cx.execute();  // warm-up: first-touch page faults and buffer allocation
  for (auto _ : state) cx.execute();
  state.SetBytesProcessed(state.iterations() * 8 * 64 * (112 * 112 + 56 * 56) * 4);
}
BENCHMARK(BM_MaxPool)->Unit(benchmark::kMillisecond)->UseRealTime();

void build_mlp(Graph& cx) {
  Tensor x = cx.named_tensor("x", {"batch", 256});
  Tensor w1 = cx.named_tensor("w1", {256, 512}), b1 = cx.named_tensor("b1", {512});
  Tensor w2 = cx.named_tensor("w2", {512, 128}), b2 = cx.named_tensor("b2", {128});
  ((x.matmul(w1) + b1).relu().matmul(w2) + b2).retrieve();
}

void BM_CompileMlp(benchmark::State& state) {
  const bool warm = state.range(0) == 1;
  const auto dir = std::filesystem::temp_directory_path() / "luminal-bench-cache";
  setenv("LUMINAL_CACHE_DIR", dir.c_str(), 1);
  if (warm) {
    Graph g;
    build_mlp(g);
    g.compile(cpu());  // fill the cache once
  }
  for (auto _ : state) {
    if (!warm) {
      state.PauseTiming();
      std::filesystem::remove_all(dir);
      state.ResumeTiming();
    }
    Graph g;
    build_mlp(g);
    g.compile(cpu());
  }
  state.SetLabel(warm ? "warm (cache hit)" : "cold");
  unsetenv("LUMINAL_CACHE_DIR");
}
BENCHMARK(BM_CompileMlp)
    ->Arg(0)
    ->Arg(1)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->MinTime(2.0);

}  // namespace

BENCHMARK_MAIN();

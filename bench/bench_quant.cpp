// Quantised matrix-vector products (decode-time QMatMul) against the machine's read
// bandwidth, in one run.
//   BM_ReadBandwidth:  an OpenMP sum over 256 MiB of floats: what any kernel streaming
//                      weights can reach at best
//   BM_QMatVec/type:<ggml type>/mib:<size>: y = x W^T, x [1, 2048], W [N, 2048] in a
//                      ggml format (about `size` MiB of blocks), compiled through the
//                      graph API; 128 MiB streams from memory, 4 MiB stays in the L3 cache
//   BM_QMatMul/<type>: 128 MiB of weights against 64 activation rows (prompt processing)
//   BM_DecodeLayers/layers:<n>: one activation row through n layers of Gemma 3 270M's
//                      shapes and formats (3.6-3.8 MiB each): many small products one after
//                      another, where each kernel's start-up and the threads' hand-offs
//                      count; 18 layers (the model, 65 MiB) stream from memory, one layer
//                      stays in the L3 cache and so measures the kernels' own speed
//   BM_DecodeAttention/past:<past>/cold:<0|1>: one query row's attention against
//                      18 layers' f16 key and value caches of `past` positions, laid out as
//                      nn::Attention keeps them, with the caches warm or (cold) evicted before
//                      each run as a decode step's weight traffic does; bytes_per_second
//                      counts the cache bytes read. Warm flatters on a shared machine:
//                      3 ms of both cores idling, memory untouched, already cost about
//                      half the gap to cold (other tenants share the L3 cache)
// bytes_per_second counts the weight bytes read, so QMatVec / ReadBandwidth is the
// kernel's fraction of the bandwidth floor. The quantised kernels ask for weights as far
// ahead as the distances remembered in the kernel cache directory, or tune them on their
// first single-row products; set LUMINAL_CPU_PREFETCH to compare distances.
#include <benchmark/benchmark.h>

#include <immintrin.h>
#include <omp.h>

#include <sys/mman.h>

#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <span>
#include <vector>

#include "luminal/luminal.hpp"
#include "luminal/nn/attention.hpp"
#include "random_blocks.hpp"

namespace {

using namespace luminal;

constexpr int64_t kK = 2048;
constexpr size_t kMiB = 1u << 20;

// Sums a range with four independent vector accumulators: enough loads in flight that
// memory, not the add latency, is the limit.
__attribute__((target("avx2"))) float sum_avx2(const float* p, size_t n) {
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    a0 = _mm256_add_ps(a0, _mm256_loadu_ps(p + i));
    a1 = _mm256_add_ps(a1, _mm256_loadu_ps(p + i + 8));
    a2 = _mm256_add_ps(a2, _mm256_loadu_ps(p + i + 16));
    a3 = _mm256_add_ps(a3, _mm256_loadu_ps(p + i + 24));
  }
  float out[8];
  _mm256_storeu_ps(out, _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
  float total = 0;
  for (float v : out) total += v;
  for (; i < n; ++i) total += p[i];
  return total;
}

void BM_ReadBandwidth(benchmark::State& state) {
  const size_t n = (256u << 20) / sizeof(float);
  // 2 MiB pages where the kernel grants them (as the CPU backend asks for its weights):
  // with 4 KiB pages the page walks cost several GB/s.
  const size_t bytes = n * sizeof(float), huge = 2u << 20;
  float* raw = static_cast<float*>(std::aligned_alloc(huge, bytes));
  if (state.range(0) == 1) madvise(raw, bytes, MADV_HUGEPAGE);
  std::unique_ptr<float, decltype(&std::free)> owner(raw, &std::free);
  std::span<float> v(raw, n);
  std::fill(v.begin(), v.end(), 1.0f);
  for (auto _ : state) {
    float total = 0;
#pragma omp parallel reduction(+ : total)
    {
      const size_t t = static_cast<size_t>(omp_get_thread_num());
      const size_t count = static_cast<size_t>(omp_get_num_threads());
      const size_t begin = n * t / count, end = n * (t + 1) / count;
      total += sum_avx2(v.data() + begin, end - begin);
    }
    benchmark::DoNotOptimize(total);
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * n * sizeof(float)));
  state.counters["threads"] = omp_get_max_threads();
}
BENCHMARK(BM_ReadBandwidth)
    ->Arg(0)
    ->Arg(1)
    ->ArgName("huge_pages")
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

void run(benchmark::State& state, uint32_t type, int64_t m, size_t target_bytes) {
  size_t elems = 0, bytes = 0;
  ggml_block_layout(type, elems, bytes);
  // A multiple of 64 rows, as model weights are (the CPU interleaves rows in eights).
  const int64_t n =
      static_cast<int64_t>(target_bytes / (static_cast<size_t>(kK) / elems * bytes)) / 64 * 64;
  Graph cx;
  Tensor x = cx.named_tensor("x", {m, kK});
  Tensor w = cx.named_tensor("w", {n, kK});
  Tensor y = x.matmul(w.transpose(0, 1)).retrieve();
  Buffer raw = bench::random_blocks(type, n, kK, 1);
  const size_t weight_bytes = raw.numel();
  w.set_quantized(type, std::move(raw));
  x.set(std::vector<float>(static_cast<size_t>(m * kK), 0.5f));
  cx.compile(cpu());
  cx.execute();  // warm up: pages faulted in, buffers allocated
  for (auto _ : state) cx.execute();
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * weight_bytes));
  state.counters["rows"] = static_cast<double>(n);
  (void)y;
}

void BM_QMatVec(benchmark::State& state) {
  run(state, static_cast<uint32_t>(state.range(0)), 1, state.range(1) * kMiB);
  state.SetLabel(ggml_type_name(static_cast<uint32_t>(state.range(0))));
}
void BM_QMatMul(benchmark::State& state) {
  run(state, static_cast<uint32_t>(state.range(0)), 64, 128 * kMiB);
  state.SetLabel(ggml_type_name(static_cast<uint32_t>(state.range(0))));
}
void BM_DecodeLayers(benchmark::State& state) {
  constexpr int64_t kHidden = 640;
  const int64_t layers = state.range(0);
  Graph cx;
  Tensor x = cx.named_tensor("x", {1, kHidden});
  size_t weight_bytes = 0;
  auto project = [&](const Tensor& in, int64_t n, uint32_t type) {
    const int64_t k = *in.shape().back().as_const();
    Tensor w = cx.named_tensor("w", {n, k});
    Buffer raw = bench::random_blocks(type, n, k, 1);
    weight_bytes += raw.numel();
    w.set_quantized(type, std::move(raw));
    return in.matmul(w.transpose(0, 1));
  };
  // Q5_0 where a row of 640 cannot hold 256-value K-quant blocks, as Q4_K_M files do.
  constexpr uint32_t kQ5_0 = 6, kQ8_0 = 8, kQ4_K = 12, kQ6_K = 14;
  Tensor h = x;
  for (int64_t layer = 0; layer < layers; ++layer) {
    const bool six = layer % 2 == 0;  // Q4_K_M keeps half the V and down weights in 6 bits
    Tensor q = project(h, 1024, kQ5_0);
    project(h, 256, kQ5_0).retrieve();
    project(h, 256, six ? kQ8_0 : kQ5_0).retrieve();
    h = h + project(q, kHidden, kQ4_K);
    h = h +
        project(project(h, 2048, kQ5_0) * project(h, 2048, kQ5_0), kHidden, six ? kQ6_K : kQ4_K);
  }
  h.retrieve();
  x.set(std::vector<float>(kHidden, 0.01f));
  cx.compile(cpu());
  cx.execute();
  for (auto _ : state) cx.execute();
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * weight_bytes));
}
BENCHMARK(BM_DecodeLayers)
    ->Arg(18)
    ->Arg(1)
    ->ArgName("layers")
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

void BM_DecodeAttention(benchmark::State& state) {
  constexpr int64_t kLayers = 18, kGroup = 4, kHeadDim = 256;
  const int64_t past = state.range(0);
  Graph cx;
  std::mt19937 rng(2);
  std::uniform_real_distribution<double> value(-1.0, 1.0);
  auto random = [&](size_t n) {
    std::vector<double> v(n);
    for (double& x : v) x = value(rng);
    return v;
  };
  const size_t cache = static_cast<size_t>(past * kHeadDim);
  for (int64_t layer = 0; layer < kLayers; ++layer) {
    // [kv = 1, group, seq = 1, d] queries; [past, kv = 1, d] caches, as nn::Attention.
    Tensor q = cx.named_tensor("q", {1, kGroup, 1, kHeadDim});
    Tensor k = cx.named_tensor("k", {past, 1, kHeadDim}, DType::F16);
    Tensor v = cx.named_tensor("v", {past, 1, kHeadDim}, DType::F16);
    q.set_buffer(Buffer::from_doubles(random(kGroup * kHeadDim), DType::F32));
    k.set_buffer(Buffer::from_doubles(random(cache), DType::F16));
    v.set_buffer(Buffer::from_doubles(random(cache), DType::F16));
    const Tensor keys = k.cast(DType::F32).permute({1, 0, 2});
    const Tensor values = v.cast(DType::F32).permute({1, 0, 2});
    Tensor scores = q.matmul(keys.unsqueeze(1).transpose(-1, -2)) * (1.0 / kHeadDim);
    // The newest of `past` positions queries them all, as in nn::Attention.
    scores =
        where(nn::causal_mask(cx, 1, past - 1), scores, -std::numeric_limits<double>::infinity());
    scores.softmax(-1).matmul(values.unsqueeze(1)).retrieve();
  }
  cx.compile(cpu());
  cx.execute();
  // cold: as in a decode step, where the weights streamed since the last step have
  // evicted the caches from every cache level, 64 MiB are read before each run (untimed).
  std::vector<float> evict(state.range(1) ? (64u << 20) / sizeof(float) : 0, 1.0f);
  for (auto _ : state) {
    if (!evict.empty()) {
      state.PauseTiming();
      benchmark::DoNotOptimize(sum_avx2(evict.data(), evict.size()));
      state.ResumeTiming();
    }
    cx.execute();
  }
  state.SetBytesProcessed(
      static_cast<int64_t>(state.iterations() * kLayers * 2 * cache * sizeof(uint16_t)));
}
BENCHMARK(BM_DecodeAttention)
    ->ArgsProduct({{256, 2048}, {0, 1}})
    ->ArgNames({"past", "cold"})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// ggml types: Q8_0 8, Q5_0 6, Q4_0 2, Q4_K 12, Q5_K 13, Q6_K 14, F16 1.
BENCHMARK(BM_QMatVec)
    ->ArgsProduct({{8, 6, 2, 12, 13, 14, 1}, {128, 4}})
    ->ArgNames({"type", "mib"})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(BM_QMatMul)->Arg(8)->Arg(12)->Arg(14)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();

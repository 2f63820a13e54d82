// What one kernel reading N bytes, and nothing else, takes on this GPU: the floor under a
// bandwidth-bound kernel such as decoding's attention, which reads its cache once. Each
// case is timed on the device alone (a spinning kernel keeps the GPU busy while the host
// queues the events and the kernel), the median of 50 runs, against the copy rate of a
// device-to-device cudaMemcpy of 1 GiB (bytes read plus written).
//
//     nvcc -O3 -arch=sm_90 bench/read_floor.cu -o /tmp/read_floor && /tmp/read_floor
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <type_traits>
#include <vector>

#define CHECK(x)                                          \
  do {                                                    \
    cudaError_t e = (x);                                  \
    if (e != cudaSuccess) {                               \
      std::printf("%s: %s\n", #x, cudaGetErrorString(e)); \
      return 1;                                           \
    }                                                     \
  } while (0)

__global__ void spin(long long ns) {
  unsigned long long start, now;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  do asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  while (now - start < (unsigned long long)ns);
}

// The piece a head-major walk takes i-th in a cache laid out [position][8 heads][16
// pieces] (a head's 256-byte rows 2 KiB apart), or the i-th piece where `interleaved` is
// off (the bytes front to back).
template <bool interleaved>
__device__ __forceinline__ long long at(long long i, long long n) {
  if (!interleaved) return i;
  const long long per_head = n / 8, h = i / per_head, r = i % per_head;
  return (r / 16 * 8 + h) * 16 + r % 16;
}

// Reads `n` 16-byte pieces, `unroll` of them in flight a thread, grid-strided; the sum
// goes out only where it could not be known (never, in practice) so the loads stay.
template <int unroll, bool interleaved>
__global__ void __launch_bounds__(256) read(const int4* p, long long n, int* sink) {
  int acc = 0;
  const long long stride = (long long)gridDim.x * blockDim.x;
  long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  for (; i + (unroll - 1) * stride < n; i += unroll * stride) {
    int4 v[unroll];
#pragma unroll
    for (int u = 0; u < unroll; ++u)
      asm volatile("ld.global.nc.L1::no_allocate.v4.s32 {%0,%1,%2,%3}, [%4];"
                   : "=r"(v[u].x), "=r"(v[u].y), "=r"(v[u].z), "=r"(v[u].w)
                   : "l"(p + at<interleaved>(i + u * stride, n)));
#pragma unroll
    for (int u = 0; u < unroll; ++u) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
  }
  for (; i < n; i += stride) acc ^= p[at<interleaved>(i, n)].x;
  if (acc == 0x7fffffff) *sink = acc;
}

// Median of `runs` timings of `op(r)` (run r) after three warm-ups; `alone`: on the
// device alone, a kernel spinning for 50 us before the start event.
template <class Op>
float median_ms(cudaStream_t s, cudaEvent_t a, cudaEvent_t b, int runs, bool alone, Op op) {
  std::vector<float> t;
  for (int r = 0; r < runs + 3; ++r) {
    if (alone) spin<<<1, 1, 0, s>>>(50000);
    cudaEventRecord(a, s);
    op(r);
    cudaEventRecord(b, s);
    cudaEventSynchronize(b);
    float ms = 0;
    cudaEventElapsedTime(&ms, a, b);
    if (r >= 3) t.push_back(ms);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

// `slices`: how many n-piece slices of p the runs take in turn (1: the same bytes every
// run, as a benchmark repeating one decode step reads them).
template <int unroll, bool interleaved>
float time_read(const int4* p, long long n, int slices, int blocks, int* sink, cudaStream_t s,
                cudaEvent_t a, cudaEvent_t b) {
  return median_ms(s, a, b, 50, true, [&](int r) {
    read<unroll, interleaved><<<blocks, 256, 0, s>>>(p + (r % slices) * n, n, sink);
  });
}

int main() {
  cudaDeviceProp prop{};
  CHECK(cudaGetDeviceProperties(&prop, 0));
  const int sms = prop.multiProcessorCount;
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&b));
  const size_t big = size_t{1} << 30;
  char *src, *dst;
  int* sink;
  CHECK(cudaMalloc(&src, big));
  CHECK(cudaMalloc(&dst, big));
  CHECK(cudaMalloc(&sink, 4));
  CHECK(cudaMemset(src, 1, big));
  const float copy_ms = median_ms(s, a, b, 10, false, [&](int) {
    cudaMemcpyAsync(dst, src, big, cudaMemcpyDeviceToDevice, s);
  });
  const double copy = 2.0 * big / (copy_ms * 1e-3);
  std::printf("%s, %d SMs: copy %.0f GB/s (1 GiB, read + written)\n", prop.name, sms, copy / 1e9);
  // The decode cases' keys and values: 4k and 32k positions of 8 heads of 128, 2 bytes.
  // Read again and again, as the benchmarks' repeated decode steps read them (the 4k
  // cache, 16.8 MB, then stays in the L2), and cold: each run a different slice of the
  // 1 GiB, so that none is in the L2.
  for (long long positions : {4096ll, 32768ll})
    for (bool interleaved : {false, true})
      for (bool cold : {false, true}) {
        const long long bytes = 2 * positions * 8 * 128 * 2, n = bytes / 16;
        const int slices = cold ? (int)std::min<long long>(big / bytes, 53) : 1;
        for (int per_sm : {1, 2, 4, 8, 16}) {
          const int blocks = sms * per_sm;
          float best = 1e9;
          int best_unroll = 0;
          auto consider = [&](float ms, int u) {
            if (ms < best) best = ms, best_unroll = u;
          };
          auto time = [&](auto unroll) {
            const int4* p = (const int4*)src;
            const float ms = interleaved
                                 ? time_read<unroll(), true>(p, n, slices, blocks, sink, s, a, b)
                                 : time_read<unroll(), false>(p, n, slices, blocks, sink, s, a, b);
            consider(ms, unroll());
          };
          time(std::integral_constant<int, 1>());
          time(std::integral_constant<int, 2>());
          time(std::integral_constant<int, 4>());
          time(std::integral_constant<int, 8>());
          std::printf(
              "%6lld positions, %7.1f MB, %s, %s, %4d blocks of 256: %.4f ms (unroll %d), %.0f%% "
              "of copy\n",
              positions, bytes / 1e6, interleaved ? "heads interleaved" : "front to back",
              cold ? "cold" : "again", blocks, best, best_unroll,
              100.0 * bytes / (best * 1e-3) / copy);
        }
      }
  CHECK(cudaDeviceSynchronize());
  return 0;
}

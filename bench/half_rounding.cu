// Throughput of the ways a CUDA kernel can round an f32 to bf16 (and widen it back), the
// step luminal's generated kernels take after every half-precision op. Each thread runs
// eight independent chains of a multiply-add and a rounding; a first pass checks every
// f32 bit pattern against cvt.rn.bf16.f32.
//
//     nvcc -O3 -arch=sm_90 bench/half_rounding.cu -o /tmp/half_rounding && /tmp/half_rounding
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>

__device__ __forceinline__ float single(float f) {  // F2F, luminal's rounding before
  unsigned short h;
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(f));
  return __uint_as_float(static_cast<uint32_t>(h) << 16);
}
__device__ __forceinline__ float pair(float f) {  // F2FP, the other half dropped: now
  uint32_t p;
  asm("cvt.rn.bf16x2.f32 %0, %1, %1;" : "=r"(p) : "f"(f));
  return __uint_as_float(p << 16);
}
__device__ __forceinline__ float integer(float f) {  // round to nearest even by hand
  const uint32_t x = __float_as_uint(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return __uint_as_float(x | 0x400000u);  // NaN
  return __uint_as_float((x + 0x7fffu + ((x >> 16) & 1u)) & 0xffff0000u);
}
__device__ __forceinline__ float none(float f) { return f; }

template <float (*Round)(float)>
__global__ void chains(float* out, float a, float b, int steps) {
  float v[8];
  for (int i = 0; i < 8; ++i) v[i] = threadIdx.x * 0.001f + i;
  for (int s = 0; s < steps; ++s)
#pragma unroll
    for (int i = 0; i < 8; ++i) v[i] = Round(v[i] * a + b);
  float sum = 0;
  for (int i = 0; i < 8; ++i) sum += v[i];
  out[blockIdx.x * blockDim.x + threadIdx.x] = sum;
}

__global__ void compare(unsigned long long* differ) {
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  for (uint64_t x = blockIdx.x * blockDim.x + threadIdx.x; x < (1ull << 32); x += stride) {
    const float f = __uint_as_float(static_cast<uint32_t>(x));
    const uint32_t want = __float_as_uint(single(f));
    if (__float_as_uint(pair(f)) != want) atomicAdd(differ, 1ull);
    const uint32_t got = __float_as_uint(integer(f));
    const bool nan = (want & 0x7fffffffu) > 0x7f800000u;
    if (nan ? (got & 0x7fffffffu) <= 0x7f800000u : got != want) atomicAdd(differ + 1, 1ull);
  }
}

int main() {
  int sms = 0;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  const int blocks = sms * 8, threads = 256, steps = 4096;
  float* out = nullptr;
  unsigned long long* differ = nullptr;
  cudaMalloc(&out, sizeof(float) * blocks * threads);
  cudaMalloc(&differ, 2 * sizeof(unsigned long long));
  cudaMemset(differ, 0, 2 * sizeof(unsigned long long));
  compare<<<1024, 256>>>(differ);
  unsigned long long host[2];
  cudaMemcpy(host, differ, sizeof host, cudaMemcpyDeviceToHost);
  std::printf("f32 patterns rounded otherwise than cvt.rn.bf16.f32: pair %llu, integer %llu\n",
              host[0], host[1]);
  struct Way {
    const char* name;
    void (*kernel)(float*, float, float, int);
  } ways[] = {{"cvt.rn.bf16.f32 (F2F)", chains<single>},
              {"cvt.rn.bf16x2.f32, half dropped (F2FP)", chains<pair>},
              {"integer, NaN kept", chains<integer>},
              {"none (the multiply-add alone)", chains<none>}};
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  for (int round = 0; round < 2; ++round)  // (the first warms up)
    for (const Way& w : ways) {
      cudaEventRecord(start);
      w.kernel<<<blocks, threads>>>(out, 1.0001f, 0.5f, steps);
      cudaEventRecord(stop);
      cudaEventSynchronize(stop);
      float ms = 0;
      cudaEventElapsedTime(&ms, start, stop);
      if (round == 1)
        std::printf("%-40s %.3f ms, %.0f G roundings a second\n", w.name, ms,
                    static_cast<double>(blocks) * threads * steps * 8 / ms / 1e6);
    }
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}

#include "backends/cpu/simd.hpp"

#include <atomic>
#include <cstdlib>
#include <cstring>

#include "luminal/dtype.hpp"

namespace luminal::cpugen {

namespace {

enum class SimdEnv { Default, Off, Avx2 };  // LUMINAL_CPU_SIMD unset or other, "off", "avx2"

SimdEnv read_simd_env() {
  const char* env = std::getenv("LUMINAL_CPU_SIMD");
  if (env && std::strcmp(env, "off") == 0) return SimdEnv::Off;
  if (env && std::strcmp(env, "avx2") == 0) return SimdEnv::Avx2;
  return SimdEnv::Default;
}

std::atomic<SimdEnv>& simd_env() {
  static std::atomic<SimdEnv> env{read_simd_env()};
  return env;
}

}  // namespace

void reread_simd_env() {
  simd_env().store(read_simd_env(), std::memory_order_relaxed);
}

bool use_avx2() {
#if defined(__x86_64__)
  static const bool cpu = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                          __builtin_cpu_supports("f16c");
  return cpu && simd_env().load(std::memory_order_relaxed) != SimdEnv::Off;
#else
  return false;
#endif
}

bool use_avx512() {
#if defined(__x86_64__)
  static const bool cpu = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                          __builtin_cpu_supports("avx512vl") &&
                          __builtin_cpu_supports("avx512vnni");
  return cpu && use_avx2() && simd_env().load(std::memory_order_relaxed) != SimdEnv::Avx2;
#else
  return false;
#endif
}

namespace {

enum class Bits { F32, F16, BF16 };  // what an operand's 16 or 32 bits per value hold

template <Bits kBits, class X>
float load1(const X* p) {
  if constexpr (kBits == Bits::F16) return f16_bits_to_float(*p);
  if constexpr (kBits == Bits::BF16) return bf16_bits_to_float(*p);
  if constexpr (kBits == Bits::F32) return *p;
}

#if defined(__x86_64__)
template <Bits kBits, class X>
LUM_AVX2 inline __m256 load8(const X* p) {
  if constexpr (kBits == Bits::F32) return _mm256_loadu_ps(p);
  if constexpr (kBits == Bits::F16) return load8_f16(p);
  if constexpr (kBits == Bits::BF16) return load8_bf16(p);
}

// sum_i x[i] * y[i], x's elements widened as they are loaded.
template <Bits kBits, class X>
LUM_AVX2 float dot_avx2(const X* x, const float* y, int64_t n) {
  // Four accumulators: enough independent FMAs in flight to hide their latency.
  __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                   _mm256_setzero_ps()};
  int64_t i = 0;
  for (; i + 32 <= n; i += 32)
    for (int u = 0; u < 4; ++u)
      acc[u] = _mm256_fmadd_ps(load8<kBits>(x + i + 8 * u), _mm256_loadu_ps(y + i + 8 * u), acc[u]);
  for (; i + 8 <= n; i += 8)
    acc[0] = _mm256_fmadd_ps(load8<kBits>(x + i), _mm256_loadu_ps(y + i), acc[0]);
  float sum = hsum(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3])));
  for (; i < n; ++i) sum += load1<kBits>(x + i) * y[i];
  return sum;
}

template <Bits kBits>
LUM_AVX2 void widen_avx2(const uint16_t* p, int64_t n, float* out) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, load8<kBits>(p + i));
  for (; i < n; ++i) out[i] = load1<kBits>(p + i);
}
#endif

template <Bits kBits, class X>
float dot(const X* x, const float* y, int64_t n, bool avx2) {
#if defined(__x86_64__)
  if (avx2) return dot_avx2<kBits>(x, y, n);
#endif
  (void)avx2;
  float sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += load1<kBits>(x + i) * y[i];
  return sum;
}

template <Bits kBits>
void widen(const uint16_t* p, int64_t n, float* out, bool avx2) {
#if defined(__x86_64__)
  if (avx2) return widen_avx2<kBits>(p, n, out);
#endif
  (void)avx2;
  for (int64_t i = 0; i < n; ++i) out[i] = load1<kBits>(p + i);
}

#if defined(__x86_64__)
LUM_AVX2 void axpy_avx2(float alpha, const float* x, float* y, int64_t n) {
  const __m256 va = _mm256_set1_ps(alpha);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
  for (; i < n; ++i) y[i] += alpha * x[i];
}
#endif

}  // namespace

void axpy(float alpha, const float* x, float* y, int64_t n, bool avx2) {
#if defined(__x86_64__)
  if (avx2) return axpy_avx2(alpha, x, y, n);
#endif
  (void)avx2;
  for (int64_t i = 0; i < n; ++i) y[i] += alpha * x[i];
}

float dot_f32(const float* x, const float* y, int64_t n, bool avx2) {
  return dot<Bits::F32>(x, y, n, avx2);
}
float dot_f16(const uint16_t* w, const float* y, int64_t n, bool avx2) {
  return dot<Bits::F16>(w, y, n, avx2);
}
float dot_bf16(const uint16_t* w, const float* y, int64_t n, bool avx2) {
  return dot<Bits::BF16>(w, y, n, avx2);
}
void widen_f16(const uint16_t* p, int64_t n, float* out, bool avx2) {
  widen<Bits::F16>(p, n, out, avx2);
}
void widen_bf16(const uint16_t* p, int64_t n, float* out, bool avx2) {
  widen<Bits::BF16>(p, n, out, avx2);
}

}  // namespace luminal::cpugen

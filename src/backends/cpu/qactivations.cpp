#include "backends/cpu/qactivations.hpp"

#include <omp.h>

#include <algorithm>
#include <cmath>

#include "backends/cpu/simd.hpp"
#include "backends/cpu/team.hpp"

namespace luminal::cpugen {
namespace {

// One 32-element block: q = round-to-nearest-even(x / d) with d = max|x| / 127, and
// d * sum(q) for each half.
void quantize_block(const float* x, int8_t* q, float& d_out, float* sum16) {
  float amax = 0;
  for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[j]));
  const float d = amax / 127.0f, inv = d > 0 ? 1.0f / d : 0.0f;
  int s0 = 0, s1 = 0;
  for (int j = 0; j < 32; ++j) {
    q[j] = static_cast<int8_t>(std::nearbyint(x[j] * inv));
    (j < 16 ? s0 : s1) += q[j];
  }
  d_out = d;
  sum16[0] = d * static_cast<float>(s0);
  sum16[1] = d * static_cast<float>(s1);
}

#if defined(__x86_64__)
LUM_AVX2 inline int32_t sum_epi32(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
  return _mm_cvtsi128_si32(s);
}

// The same, eight lanes at a time: the same float products, and cvtps rounds to nearest
// even as nearbyint does in the default rounding mode, so the result is identical.
LUM_AVX2 void quantize_block_avx2(const float* x, int8_t* q, float& d_out, float* sum16) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  __m256 v[4];
  __m256 amax = _mm256_setzero_ps();
  for (int i = 0; i < 4; ++i) {
    v[i] = _mm256_loadu_ps(x + 8 * i);
    amax = _mm256_max_ps(amax, _mm256_andnot_ps(sign, v[i]));
  }
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(amax), _mm256_extractf128_ps(amax, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_movehdup_ps(m));
  const float d = _mm_cvtss_f32(m) / 127.0f, inv = d > 0 ? 1.0f / d : 0.0f;
  __m256i r[4];
  for (int i = 0; i < 4; ++i) r[i] = _mm256_cvtps_epi32(_mm256_mul_ps(v[i], _mm256_set1_ps(inv)));
  // Packing interleaves 128-bit lanes; the permute puts the 32 bytes back in order.
  const __m256i packed =
      _mm256_packs_epi16(_mm256_packs_epi32(r[0], r[1]), _mm256_packs_epi32(r[2], r[3]));
  const __m256i ordered =
      _mm256_permutevar8x32_epi32(packed, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(q), ordered);
  d_out = d;
  sum16[0] = d * static_cast<float>(sum_epi32(_mm256_add_epi32(r[0], r[1])));
  sum16[1] = d * static_cast<float>(sum_epi32(_mm256_add_epi32(r[2], r[3])));
}
#endif

void quantize_row(const float* x, size_t k, bool avx2, int8_t* q, float* d, float* sum16) {
  for (size_t c = 0; c < k / 32; ++c) {
#if defined(__x86_64__)
    if (avx2) {
      quantize_block_avx2(x + 32 * c, q + 32 * c, d[c], sum16 + 2 * c);
      continue;
    }
#endif
    quantize_block(x + 32 * c, q + 32 * c, d[c], sum16 + 2 * c);
  }
}

}  // namespace

void quantize_rows(const std::vector<const float*>& rows, int64_t k, QuantizedRows& out) {
  const size_t nr = rows.size(), kk = static_cast<size_t>(k);
  out.q.resize(nr * kk);
  out.d.resize(nr * kk / 32);
  out.sum16.resize(nr * kk / 16);
  const bool avx2 = use_avx2();
  auto row = [&](size_t r) {
    quantize_row(rows[r], kk, avx2, out.q.data() + r * kk, out.d.data() + r * kk / 32,
                 out.sum16.data() + r * kk / 16);
  };
  // A decode step's single row is done before a thread team could be woken.
  if (nr * kk <= 65536) {
    for (size_t r = 0; r < nr; ++r) row(r);
    return;
  }
  run_parallel_for(omp_get_max_threads(), static_cast<int64_t>(nr),
                   [&](int64_t begin, int64_t end) {
                     for (int64_t r = begin; r < end; ++r) row(static_cast<size_t>(r));
                   });
}

std::vector<const float*> activation_rows(const ConcreteView& a, const float* data) {
  const size_t r = a.dims.size();
  int64_t batch = 1;
  for (size_t d = 0; d + 3 < r; ++d) batch *= a.dims[d];
  const int64_t m = a.dims[r - 3];
  std::vector<const float*> rows;
  rows.reserve(static_cast<size_t>(batch * m));
  std::vector<int64_t> idx(r - 3, 0);
  for (int64_t b = 0; b < batch; ++b) {
    int64_t off = a.offset;
    for (size_t d = 0; d < idx.size(); ++d) off += idx[d] * a.strides[d];
    for (int64_t i = 0; i < m; ++i) rows.push_back(data + off + i * a.strides[r - 3]);
    for (size_t d = idx.size(); d-- > 0;) {
      if (++idx[d] < a.dims[d]) break;
      idx[d] = 0;
    }
  }
  return rows;
}

}  // namespace luminal::cpugen

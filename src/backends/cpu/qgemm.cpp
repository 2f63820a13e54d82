// QMatMul on the CPU. Every block format decodes, one weight row at a time, into a
// common intermediate form — int8 values with a float scale and offset per 16 elements
// (w = s * q + b) — so one integer dot product serves all formats. The row is decoded
// once and reused for every activation row; threads split the weight rows.
#include "backends/cpu/qgemm.hpp"

#include "backends/cpu/gemm.hpp"

#include <omp.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "luminal/dtype.hpp"
#include "luminal/error.hpp"
#include "luminal/quant.hpp"

namespace luminal::cpugen {
namespace {

// ggml type numbers (quant.cpp's table).
enum : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kBF16 = 30
};

// f16 -> f32 by bit assembly, inlined into the kernels (subnormal scales are rare but
// handled exactly).
inline float half(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16, exp = (h >> 10) & 0x1f,
                 man = h & 0x3ff;
  uint32_t bits;
  if (exp == 0) {
    bits = std::bit_cast<uint32_t>(static_cast<float>(man) * 0x1p-24f) | sign;
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | (man << 13);
  } else {
    bits = sign | ((exp + 112) << 23) | (man << 13);
  }
  return std::bit_cast<float>(bits);
}

// The 6-bit scale and min of sub-block j of a K-quant (as quant.cpp).
inline void scale_min_k4(int j, const uint8_t* s, int& sc, int& m) {
  if (j < 4) {
    sc = s[j] & 63;
    m = s[j + 4] & 63;
  } else {
    sc = (s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4);
    m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
}

// Each format decodes one block into q (kElems int8 values) and, per 16 elements, a
// scale s and offset b: w = s * q + b. kOffset says whether b can be non-zero.
struct Q8_0 {
  static constexpr size_t kElems = 32, kBytes = 34;
  static constexpr bool kOffset = false, kScalePer32 = true;
  static void decode(const uint8_t* blk, int8_t* q, float* s, float*) {
    std::memcpy(q, blk + 2, 32);
    s[0] = s[1] = half(blk);
  }
};

template <bool kWithMin>
struct Q4 {  // Q4_0 (value - 8) and Q4_1 (value * d + m)
  static constexpr size_t kElems = 32, kBytes = kWithMin ? 20 : 18;
  static constexpr bool kOffset = kWithMin, kScalePer32 = true;
  static void decode(const uint8_t* blk, int8_t* q, float* s, float* b) {
    const uint8_t* qs = blk + (kWithMin ? 4 : 2);
    const int bias = kWithMin ? 0 : 8;
    for (int j = 0; j < 16; ++j) {
      q[j] = static_cast<int8_t>((qs[j] & 0xF) - bias);
      q[j + 16] = static_cast<int8_t>((qs[j] >> 4) - bias);
    }
    s[0] = s[1] = half(blk);
    if (kWithMin) b[0] = b[1] = half(blk + 2);
  }
};

template <bool kWithMin>
struct Q5 {  // Q5_0 (value - 16) and Q5_1 (value * d + m)
  static constexpr size_t kElems = 32, kBytes = kWithMin ? 24 : 22;
  static constexpr bool kOffset = kWithMin, kScalePer32 = true;
  static void decode(const uint8_t* blk, int8_t* q, float* s, float* b) {
    uint32_t qh;
    std::memcpy(&qh, blk + (kWithMin ? 4 : 2), 4);
    const uint8_t* qs = blk + (kWithMin ? 8 : 6);
    const int bias = kWithMin ? 0 : 16;
    for (int j = 0; j < 16; ++j) {
      q[j] = static_cast<int8_t>(((qs[j] & 0xF) | (((qh >> j) & 1) << 4)) - bias);
      q[j + 16] = static_cast<int8_t>(((qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4)) - bias);
    }
    s[0] = s[1] = half(blk);
    if (kWithMin) b[0] = b[1] = half(blk + 2);
  }
};

template <bool kFive>
struct QK {  // Q4_K and Q5_K: 8 sub-blocks of 32 with 6-bit scales and mins
  static constexpr size_t kElems = 256, kBytes = kFive ? 176 : 144;
  static constexpr bool kOffset = true, kScalePer32 = true;
  static void decode(const uint8_t* blk, int8_t* q, float* s, float* b) {
    const float d = half(blk), dmin = half(blk + 2);
    const uint8_t* scales = blk + 4;
    const uint8_t* qh = blk + 16;
    const uint8_t* qs = blk + (kFive ? 48 : 16);
    for (int c = 0; c < 4; ++c) {
      for (int l = 0; l < 32; ++l) {
        const uint8_t v = qs[32 * c + l];
        int lo = v & 0xF, hi = v >> 4;
        if (kFive) {
          lo += ((qh[l] >> (2 * c)) & 1) << 4;
          hi += ((qh[l] >> (2 * c + 1)) & 1) << 4;
        }
        q[64 * c + l] = static_cast<int8_t>(lo);
        q[64 * c + 32 + l] = static_cast<int8_t>(hi);
      }
    }
    for (int sub = 0; sub < 8; ++sub) {
      int sc, m;
      scale_min_k4(sub, scales, sc, m);
      s[2 * sub] = s[2 * sub + 1] = d * static_cast<float>(sc);
      b[2 * sub] = b[2 * sub + 1] = -(dmin * static_cast<float>(m));
    }
  }
};

struct Q6_K {  // 16 sub-blocks of 16 with int8 scales; values - 32
  static constexpr size_t kElems = 256, kBytes = 210;
  static constexpr bool kOffset = false, kScalePer32 = false;
  static void decode(const uint8_t* blk, int8_t* q, float* s, float*) {
    const float d = half(blk + 208);
    for (int h = 0; h < 2; ++h) {
      const uint8_t* ql = blk + 64 * h;
      const uint8_t* qh = blk + 128 + 32 * h;
      int8_t* out = q + 128 * h;
      for (int l = 0; l < 32; ++l) {
        const int hb = qh[l];
        out[l] = static_cast<int8_t>(((ql[l] & 0xF) | ((hb & 3) << 4)) - 32);
        out[32 + l] = static_cast<int8_t>(((ql[l + 32] & 0xF) | (((hb >> 2) & 3) << 4)) - 32);
        out[64 + l] = static_cast<int8_t>(((ql[l] >> 4) | (((hb >> 4) & 3) << 4)) - 32);
        out[96 + l] = static_cast<int8_t>(((ql[l + 32] >> 4) | (((hb >> 6) & 3) << 4)) - 32);
      }
    }
    const auto* sc = reinterpret_cast<const int8_t*>(blk + 192);
    for (int g = 0; g < 16; ++g) s[g] = d * static_cast<float>(sc[g]);
  }
};

#if defined(__x86_64__)
// AVX2 versions of the decoders whose scalar loops dominate (the nibble and high-bit
// unpacking); the others are already a copy plus a few scalars.
#define LUM_AVX2 __attribute__((target("avx2,fma,f16c")))

LUM_AVX2 inline float half_f16c(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}

LUM_AVX2 inline void store32(int8_t* q, __m256i v) {
  _mm256_store_si256(reinterpret_cast<__m256i*>(q), v);
}

// 32 bits -> 32 bytes, byte j = 0xFF where bit j is set.
LUM_AVX2 inline __m256i bits_to_bytes(uint32_t bits) {
  const __m256i spread = _mm256_shuffle_epi8(
      _mm256_set1_epi32(static_cast<int>(bits)),
      _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3,
                       3, 3, 3, 3, 3, 3, 3));
  const __m256i select = _mm256_set1_epi64x(static_cast<long long>(0x8040201008040201ull));
  return _mm256_cmpeq_epi8(_mm256_and_si256(spread, select), select);
}

// 16 bytes of packed nibbles -> 32 bytes: low nibbles first, then high nibbles.
LUM_AVX2 inline __m256i nibbles16(const uint8_t* p) {
  const __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  const __m128i m = _mm_set1_epi8(0xF);
  return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(x, 4), m), _mm_and_si128(x, m));
}

template <bool kWithMin>
LUM_AVX2 const int8_t* decode_avx2(Q4<kWithMin>, const uint8_t* blk, int8_t* q, float* s,
                                   float* b) {
  __m256i v = nibbles16(blk + (kWithMin ? 4 : 2));
  if (!kWithMin) v = _mm256_sub_epi8(v, _mm256_set1_epi8(8));
  store32(q, v);
  s[0] = s[1] = half_f16c(blk);
  if (kWithMin) b[0] = b[1] = half_f16c(blk + 2);
  return q;
}

template <bool kWithMin>
LUM_AVX2 const int8_t* decode_avx2(Q5<kWithMin>, const uint8_t* blk, int8_t* q, float* s,
                                   float* b) {
  uint32_t qh;
  std::memcpy(&qh, blk + (kWithMin ? 4 : 2), 4);
  __m256i v = _mm256_or_si256(nibbles16(blk + (kWithMin ? 8 : 6)),
                              _mm256_and_si256(bits_to_bytes(qh), _mm256_set1_epi8(0x10)));
  if (!kWithMin) v = _mm256_sub_epi8(v, _mm256_set1_epi8(16));
  store32(q, v);
  s[0] = s[1] = half_f16c(blk);
  if (kWithMin) b[0] = b[1] = half_f16c(blk + 2);
  return q;
}

template <bool kFive>
LUM_AVX2 const int8_t* decode_avx2(QK<kFive>, const uint8_t* blk, int8_t* q, float* s,
                                   float* b) {
  const __m256i m4 = _mm256_set1_epi8(0xF), bit = _mm256_set1_epi8(1);
  const uint8_t* qs = blk + (kFive ? 48 : 16);
  const __m256i hb = kFive ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 16))
                           : _mm256_setzero_si256();
  for (int c = 0; c < 4; ++c) {
    const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + 32 * c));
    __m256i lo = _mm256_and_si256(x, m4), hi = _mm256_and_si256(_mm256_srli_epi16(x, 4), m4);
    if (kFive) {
      const __m128i shift_lo = _mm_cvtsi32_si128(2 * c), shift_hi = _mm_cvtsi32_si128(2 * c + 1);
      lo = _mm256_or_si256(lo, _mm256_slli_epi16(_mm256_and_si256(_mm256_srl_epi16(hb, shift_lo), bit), 4));
      hi = _mm256_or_si256(hi, _mm256_slli_epi16(_mm256_and_si256(_mm256_srl_epi16(hb, shift_hi), bit), 4));
    }
    store32(q + 64 * c, lo);
    store32(q + 64 * c + 32, hi);
  }
  const float d = half_f16c(blk), dmin = half_f16c(blk + 2);
  for (int sub = 0; sub < 8; ++sub) {
    int sc, m;
    scale_min_k4(sub, blk + 4, sc, m);
    s[2 * sub] = s[2 * sub + 1] = d * static_cast<float>(sc);
    b[2 * sub] = b[2 * sub + 1] = -(dmin * static_cast<float>(m));
  }
  return q;
}

LUM_AVX2 const int8_t* decode_avx2(Q6_K, const uint8_t* blk, int8_t* q, float* s, float*) {
  const __m256i m4 = _mm256_set1_epi8(0xF), m2 = _mm256_set1_epi8(3), bias = _mm256_set1_epi8(32);
  for (int h = 0; h < 2; ++h) {
    const __m256i ql0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 64 * h));
    const __m256i ql1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 64 * h + 32));
    const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 128 + 32 * h));
    const __m256i lows[4] = {_mm256_and_si256(ql0, m4), _mm256_and_si256(ql1, m4),
                             _mm256_and_si256(_mm256_srli_epi16(ql0, 4), m4),
                             _mm256_and_si256(_mm256_srli_epi16(ql1, 4), m4)};
    for (int i = 0; i < 4; ++i) {
      const __m256i high = _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(2 * i)), m2);
      store32(q + 128 * h + 32 * i,
              _mm256_sub_epi8(_mm256_or_si256(lows[i], _mm256_slli_epi16(high, 4)), bias));
    }
  }
  const float d = half_f16c(blk + 208);
  const auto* sc = reinterpret_cast<const int8_t*>(blk + 192);
  for (int g = 0; g < 16; ++g) s[g] = d * static_cast<float>(sc[g]);
  return q;
}

// Q8_0 values are used in place.
LUM_AVX2 inline const int8_t* decode_avx2(Q8_0, const uint8_t* blk, int8_t*, float* s, float*) {
  s[0] = half_f16c(blk);
  return reinterpret_cast<const int8_t*>(blk + 2);
}
#endif

// An activation row quantised in 32-element blocks: x ~ d * q, plus d * sum(q) per 16.
struct QuantizedRows {
  std::vector<int8_t> q;
  std::vector<float> d, sum16;
};

void quantize_rows(const std::vector<const float*>& rows, int64_t k, QuantizedRows& out) {
  const size_t nr = rows.size(), kk = static_cast<size_t>(k);
  out.q.resize(nr * kk);
  out.d.resize(nr * kk / 32);
  out.sum16.resize(nr * kk / 16);
#pragma omp parallel for schedule(static) if (nr * kk > 65536)
  for (size_t r = 0; r < nr; ++r) {
    const float* x = rows[r];
    for (size_t c = 0; c < kk / 32; ++c) {
      float amax = 0;
      for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[32 * c + j]));
      const float d = amax / 127.0f, inv = d > 0 ? 1.0f / d : 0.0f;
      int8_t* q = out.q.data() + r * kk + 32 * c;
      int s0 = 0, s1 = 0;
      for (int j = 0; j < 32; ++j) {
        q[j] = static_cast<int8_t>(std::nearbyint(x[32 * c + j] * inv));
        (j < 16 ? s0 : s1) += q[j];
      }
      out.d[r * kk / 32 + c] = d;
      out.sum16[r * kk / 16 + 2 * c] = d * static_cast<float>(s0);
      out.sum16[r * kk / 16 + 2 * c + 1] = d * static_cast<float>(s1);
    }
  }
}

// Activation rows handled together: each decoded weight block is reused this many times
// before the next is decoded.
constexpr int64_t kRowTile = 4;

struct RowTile {
  const int8_t* q[kRowTile];
  const float* d[kRowTile];
  const float* sum16[kRowTile];
  int64_t count = 0;
};

RowTile tile_at(const QuantizedRows& x, int64_t first, int64_t rows, int64_t k) {
  RowTile t;
  t.count = std::min(kRowTile, rows - first);
  for (int64_t r = 0; r < t.count; ++r) {
    t.q[r] = x.q.data() + (first + r) * k;
    t.d[r] = x.d.data() + (first + r) * k / 32;
    t.sum16[r] = x.sum16.data() + (first + r) * k / 16;
  }
  return t;
}

// out[i * n + j] for the tile's rows and weight rows [j0, j1).
template <class F>
void rows_portable(const uint8_t* w, int64_t j0, int64_t j1, int64_t n, int64_t k,
                   const RowTile& t, int64_t first, float* out) {
  int8_t q[F::kElems];
  float s[F::kElems / 16], b[F::kElems / 16] = {};
  const int64_t blocks = k / static_cast<int64_t>(F::kElems);
  for (int64_t j = j0; j < j1; ++j) {
    float acc[kRowTile] = {};
    const uint8_t* row = w + j * blocks * static_cast<int64_t>(F::kBytes);
    for (int64_t blk = 0; blk < blocks; ++blk) {
      F::decode(row + blk * static_cast<int64_t>(F::kBytes), q, s, b);
      const int64_t base = blk * static_cast<int64_t>(F::kElems);
      for (int64_t r = 0; r < t.count; ++r) {
        const int8_t* qa = t.q[r] + base;
        for (size_t c = 0; c < F::kElems / 32; ++c) {
          int32_t s0 = 0, s1 = 0;
          for (int e = 0; e < 16; ++e) s0 += q[32 * c + e] * qa[32 * c + e];
          for (int e = 16; e < 32; ++e) s1 += q[32 * c + e] * qa[32 * c + e];
          acc[r] += (static_cast<float>(s0) * s[2 * c] + static_cast<float>(s1) * s[2 * c + 1]) *
                    t.d[r][base / 32 + static_cast<int64_t>(c)];
        }
        if (F::kOffset)
          for (size_t g = 0; g < F::kElems / 16; ++g)
            acc[r] += b[g] * t.sum16[r][base / 16 + static_cast<int64_t>(g)];
      }
    }
    for (int64_t r = 0; r < t.count; ++r) out[(first + r) * n + j] = acc[r];
  }
}

#if defined(__x86_64__)
LUM_AVX2 inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// kTile activation rows (a compile-time count, so the accumulators stay in registers).
// A weight row decoded once (the common form) and reused by every tile of activation
// rows: prompt processing, where there are many.
struct PredecodedRow {
  std::vector<int8_t> q;
  std::vector<float> s, b;
};

template <class F>
LUM_AVX2 void predecode_avx2(const uint8_t* row, int64_t k, PredecodedRow& out) {
  alignas(32) int8_t scratch[F::kElems];
  const int64_t blocks = k / static_cast<int64_t>(F::kElems);
  for (int64_t blk = 0; blk < blocks; ++blk) {
    const int64_t base = blk * static_cast<int64_t>(F::kElems);
    const int8_t* q = decode_avx2(F{}, row + blk * static_cast<int64_t>(F::kBytes), scratch,
                                  out.s.data() + base / 16, out.b.data() + base / 16);
    std::memcpy(out.q.data() + base, q, F::kElems);
  }
}

// kPredecoded: `pre` holds weight row j0 (and j1 == j0 + 1) already decoded.
template <class F, int kTile, bool kPredecoded = false>
LUM_AVX2 void rows_avx2(const uint8_t* w, int64_t j0, int64_t j1, int64_t n, int64_t k,
                        const RowTile& t, int64_t first, float* out,
                        const PredecodedRow* pre = nullptr) {
  alignas(32) int8_t scratch[F::kElems];
  float s_local[F::kElems / 16], b_local[F::kElems / 16] = {};
  const int64_t blocks = k / static_cast<int64_t>(F::kElems);
  const __m256i ones = _mm256_set1_epi16(1);
  for (int64_t j = j0; j < j1; ++j) {
    __m256 acc[kTile];
    float offset[kTile] = {};
    for (auto& a : acc) a = _mm256_setzero_ps();
    const uint8_t* row = w + j * blocks * static_cast<int64_t>(F::kBytes);
    for (int64_t blk = 0; blk < blocks; ++blk) {
      const int64_t base = blk * static_cast<int64_t>(F::kElems);
      const int8_t* q;
      const float *s = s_local, *b = b_local;
      if constexpr (kPredecoded) {
        q = pre->q.data() + base;
        s = pre->s.data() + base / 16;
        b = pre->b.data() + base / 16;
      } else {
        q = decode_avx2(F{}, row + blk * static_cast<int64_t>(F::kBytes), scratch, s_local,
                        b_local);
      }
      for (size_t c = 0; c < F::kElems / 32; ++c) {
        const __m256i wv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + 32 * c));
        const __m256i wabs = _mm256_sign_epi8(wv, wv);
        const float* da = &t.d[0][base / 32 + static_cast<int64_t>(c)];
        for (int r = 0; r < kTile; ++r) {
          const __m256i xv =
              _mm256_loadu_si256(reinterpret_cast<const __m256i*>(t.q[r] + base + 32 * c));
          // |w| * (x with w's sign): the unsigned-by-signed product maddubs needs.
          const __m256i p16 = _mm256_maddubs_epi16(wabs, _mm256_sign_epi8(xv, wv));
          const __m256i p32 = _mm256_madd_epi16(p16, ones);  // lanes 0-3: elements 0-15
          const float dr = r == 0 ? *da : t.d[r][base / 32 + static_cast<int64_t>(c)];
          const __m256 scale =
              F::kScalePer32
                  ? _mm256_set1_ps(s[2 * c] * dr)
                  : _mm256_set_m128(_mm_set1_ps(s[2 * c + 1] * dr), _mm_set1_ps(s[2 * c] * dr));
          acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p32), scale, acc[r]);
        }
      }
      if (F::kOffset)
        for (int r = 0; r < kTile; ++r)
          for (size_t g = 0; g < F::kElems / 16; g += 2)  // b is per 32 where it exists
            offset[r] += b[g] * (t.sum16[r][base / 16 + static_cast<int64_t>(g)] +
                                 t.sum16[r][base / 16 + static_cast<int64_t>(g) + 1]);
    }
    for (int r = 0; r < kTile; ++r) out[(first + r) * n + j] = hsum(acc[r]) + offset[r];
  }
}

LUM_AVX2 float dot_f32_avx2(const float* w, const float* x, int64_t k) {
  __m256 acc = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= k; i += 8)
    acc = _mm256_fmadd_ps(_mm256_loadu_ps(w + i), _mm256_loadu_ps(x + i), acc);
  float total = hsum(acc);
  for (; i < k; ++i) total += w[i] * x[i];
  return total;
}

// LUMINAL_CPU_SIMD=off selects the portable kernels (for testing and comparison).
bool has_avx2() {
  static const bool cpu = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                          __builtin_cpu_supports("f16c");
  const char* env = std::getenv("LUMINAL_CPU_SIMD");
  return cpu && !(env && std::strcmp(env, "off") == 0);
}
#else
bool has_avx2() {
  return false;
}
#endif

float dot_f32(const float* w, const float* x, int64_t k) {
#if defined(__x86_64__)
  if (has_avx2()) return dot_f32_avx2(w, x, k);
#endif
  float total = 0;
  for (int64_t i = 0; i < k; ++i) total += w[i] * x[i];
  return total;
}

// All activation rows against all weight rows for one block format; threads split the
// weight rows.
template <class F>
void run_format(const uint8_t* w, int64_t n, int64_t k, const QuantizedRows& x, int64_t rows,
                float* out) {
  const bool avx2 = has_avx2();
#pragma omp parallel
  {
    const int threads = omp_get_num_threads(), me = omp_get_thread_num();
    const int64_t j0 = n * me / threads, j1 = n * (me + 1) / threads;
    for (int64_t first = 0; first < rows; first += kRowTile) {
      const RowTile t = tile_at(x, first, rows, k);
#if defined(__x86_64__)
      if (avx2 && rows > kRowTile) {  // many activation rows: decode each weight row once
        PredecodedRow pre{std::vector<int8_t>(static_cast<size_t>(k)),
                          std::vector<float>(static_cast<size_t>(k / 16)),
                          std::vector<float>(static_cast<size_t>(k / 16))};
        const int64_t row_bytes = k / static_cast<int64_t>(F::kElems) * static_cast<int64_t>(F::kBytes);
        for (int64_t j = j0; j < j1; ++j) {
          predecode_avx2<F>(w + j * row_bytes, k, pre);
          for (int64_t f = 0; f < rows; f += kRowTile) {
            const RowTile tile = tile_at(x, f, rows, k);
            if (tile.count == kRowTile) {
              rows_avx2<F, kRowTile, true>(w, j, j + 1, n, k, tile, f, out, &pre);
            } else {
              for (int64_t r = 0; r < tile.count; ++r)
                rows_avx2<F, 1, true>(w, j, j + 1, n, k, tile_at(x, f + r, f + r + 1, k), f + r,
                                      out, &pre);
            }
          }
        }
        break;
      }
      if (avx2) {
        if (t.count == kRowTile) {
          rows_avx2<F, kRowTile>(w, j0, j1, n, k, t, first, out);
        } else {
          for (int64_t r = 0; r < t.count; ++r)
            rows_avx2<F, 1>(w, j0, j1, n, k, tile_at(x, first + r, first + r + 1, k), first + r,
                            out);
        }
        continue;
      }
#endif
      (void)avx2;
      rows_portable<F>(w, j0, j1, n, k, t, first, out);
    }
  }
}

// From this many activation rows on (prompt processing), weights are decoded to f32 a
// panel at a time and multiplied with BLAS: sgemm's register tiling outruns the int8
// dot products once the decode is shared by enough rows, and activations stay f32.
constexpr int64_t kBlasRows = 32;

void dequantized_sgemm(const std::vector<const float*>& rows, uint32_t format, const uint8_t* w,
                       int64_t n, int64_t k, size_t row_bytes, float* out) {
  const auto m = static_cast<int64_t>(rows.size());
  std::vector<float> a(static_cast<size_t>(m * k));
  for (int64_t i = 0; i < m; ++i) std::memcpy(a.data() + i * k, rows[static_cast<size_t>(i)], static_cast<size_t>(k) * 4);
  constexpr int64_t kPanel = 256;  // weight rows per decoded panel (~2 MB at K = 2048)
  std::vector<float> panel(static_cast<size_t>(std::min(n, kPanel) * k));
  for (int64_t j0 = 0; j0 < n; j0 += kPanel) {
    const int64_t p = std::min(kPanel, n - j0);
#pragma omp parallel for schedule(static)
    for (int64_t j = 0; j < p; ++j)
      dequantize(format, reinterpret_cast<const std::byte*>(w + (j0 + j) * static_cast<int64_t>(row_bytes)),
                 static_cast<size_t>(k), panel.data() + j * k);
    sgemm_columns(CblasNoTrans, CblasTrans, m, p, k, a.data(), k, panel.data(), k, k, out + j0, n);
  }
}

// Pointers to the K-contiguous activation rows, in output row order.
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

}  // namespace

void qmatmul(const ConcreteView& a, const float* a_data, uint32_t format, const uint8_t* w,
             int64_t n, int64_t k, float* out, bool int8_activations) {
  size_t block_elems = 0, block_bytes = 0;
  LUM_CHECK(ggml_block_layout(format, block_elems, block_bytes))
      << "QMatMul: unsupported weight format " << ggml_type_name(format);
  const std::vector<const float*> rows = activation_rows(a, a_data);
  const auto nr = static_cast<int64_t>(rows.size());
  const size_t row_bytes = static_cast<size_t>(k) / block_elems * block_bytes;
  if (nr == 0 || n == 0) return;
  if (block_elems == 1 || !int8_activations) {  // decode each row exactly, f32 dot products
#pragma omp parallel
    {
      std::vector<float> wrow(static_cast<size_t>(k));
#pragma omp for schedule(static)
      for (int64_t j = 0; j < n; ++j) {
        dequantize(format, reinterpret_cast<const std::byte*>(w + j * row_bytes),
                   static_cast<size_t>(k), wrow.data());
        for (int64_t i = 0; i < nr; ++i) out[i * n + j] = dot_f32(wrow.data(), rows[i], k);
      }
    }
    return;
  }
  if (nr >= kBlasRows) return dequantized_sgemm(rows, format, w, n, k, row_bytes, out);
  LUM_CHECK(k % 32 == 0) << "QMatMul: K = " << k << " is not a multiple of 32";
  QuantizedRows x;
  quantize_rows(rows, k, x);
  switch (format) {
    case kQ8_0:
      return run_format<Q8_0>(w, n, k, x, nr, out);
    case kQ4_0:
      return run_format<Q4<false>>(w, n, k, x, nr, out);
    case kQ4_1:
      return run_format<Q4<true>>(w, n, k, x, nr, out);
    case kQ5_0:
      return run_format<Q5<false>>(w, n, k, x, nr, out);
    case kQ5_1:
      return run_format<Q5<true>>(w, n, k, x, nr, out);
    case kQ4_K:
      return run_format<QK<false>>(w, n, k, x, nr, out);
    case kQ5_K:
      return run_format<QK<true>>(w, n, k, x, nr, out);
    case kQ6_K:
      return run_format<Q6_K>(w, n, k, x, nr, out);
    default:
      LUM_FAIL() << "QMatMul: no kernel for " << ggml_type_name(format);
  }
}

}  // namespace luminal::cpugen

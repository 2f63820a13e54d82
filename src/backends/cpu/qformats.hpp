// Weight block decoders for QMatMul (private to src/backends/cpu): each ggml format
// decodes a block into the common form the integer kernels use, int8 values q with a
// float scale s and offset b per 16 elements (w = s * q + b). Scalar versions, and AVX2
// versions of those whose unpacking dominates.
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "backends/cpu/simd.hpp"
#include "luminal/dtype.hpp"
#include "luminal/quant.hpp"

namespace luminal::cpugen::qformats {

// f16 scale fields, decoded inline in the kernels.
inline float half(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return f16_bits_to_float(h);
}

// Each format decodes one block into q (kElems int8 values) and, per 16 elements, a
// scale s and offset b: w = s * q + b. kOffset says whether b can be non-zero.
// kUnsigned: the values lie in [0, 32) (formats with a min instead of a zero point), so
// they go straight into maddubs, which takes its first operand unsigned.
struct Q8_0 {
  static constexpr size_t kElems = 32, kBytes = 34;
  static constexpr bool kOffset = false, kScalePer32 = true, kUnsigned = false;
  static void decode(const uint8_t* blk, int8_t* q, float* s, float*) {
    std::memcpy(q, blk + 2, 32);
    s[0] = s[1] = half(blk);
  }
};

template <bool kWithMin>
struct Q4 {  // Q4_0 (value - 8) and Q4_1 (value * d + m)
  static constexpr size_t kElems = 32, kBytes = kWithMin ? 20 : 18;
  static constexpr bool kOffset = kWithMin, kScalePer32 = true, kUnsigned = kWithMin;
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
  static constexpr bool kOffset = kWithMin, kScalePer32 = true, kUnsigned = kWithMin;
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
  static constexpr bool kOffset = true, kScalePer32 = true, kUnsigned = true;
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
      ggml_k4_scale_min(sub, scales, sc, m);
      s[2 * sub] = s[2 * sub + 1] = d * static_cast<float>(sc);
      b[2 * sub] = b[2 * sub + 1] = -(dmin * static_cast<float>(m));
    }
  }
};

struct Q6_K {  // 16 sub-blocks of 16 with int8 scales; values - 32
  static constexpr size_t kElems = 256, kBytes = 210;
  static constexpr bool kOffset = false, kScalePer32 = false, kUnsigned = false;
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
  const __m256i spread =
      _mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int>(bits)),
                          _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2,
                                           2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3));
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
LUM_AVX2 const int8_t* decode_avx2(QK<kFive>, const uint8_t* blk, int8_t* q, float* s, float* b) {
  const __m256i m4 = _mm256_set1_epi8(0xF), bit = _mm256_set1_epi8(1);
  const uint8_t* qs = blk + (kFive ? 48 : 16);
  const __m256i hb = kFive ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 16))
                           : _mm256_setzero_si256();
  for (int c = 0; c < 4; ++c) {
    const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + 32 * c));
    __m256i lo = _mm256_and_si256(x, m4), hi = _mm256_and_si256(_mm256_srli_epi16(x, 4), m4);
    if (kFive) {
      const __m128i shift_lo = _mm_cvtsi32_si128(2 * c), shift_hi = _mm_cvtsi32_si128(2 * c + 1);
      lo = _mm256_or_si256(
          lo, _mm256_slli_epi16(_mm256_and_si256(_mm256_srl_epi16(hb, shift_lo), bit), 4));
      hi = _mm256_or_si256(
          hi, _mm256_slli_epi16(_mm256_and_si256(_mm256_srl_epi16(hb, shift_hi), bit), 4));
    }
    store32(q + 64 * c, lo);
    store32(q + 64 * c + 32, hi);
  }
  const float d = half_f16c(blk), dmin = half_f16c(blk + 2);
  for (int sub = 0; sub < 8; ++sub) {
    int sc, m;
    ggml_k4_scale_min(sub, blk + 4, sc, m);
    s[2 * sub] = s[2 * sub + 1] = d * static_cast<float>(sc);
    b[2 * sub] = b[2 * sub + 1] = -(dmin * static_cast<float>(m));
  }
  return q;
}

LUM_AVX2 inline const int8_t* decode_avx2(Q6_K, const uint8_t* blk, int8_t* q, float* s, float*) {
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

}  // namespace luminal::cpugen::qformats

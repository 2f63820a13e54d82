// Interleaved QMatMul weights and their AVX2 kernels (see qinterleaved.hpp).
//
// A tile is eight weight rows by one block. In every layout "vector v" means 32 bytes
// whose byte i is value 4v + i % 4 of row i / 4 (within the 32-value group), so after
// `maddubs` with four broadcast activation bytes and `madd` with ones, int32 lane r is
// row r's partial sum.
//
//   Q4_0 (144 bytes):  8 f16 scales | 4 x 32 bytes of nibbles, low nibbles vector 2p and
//       high nibbles vector 2p + 1 of the p-th 32 bytes. Values are unsigned (0..15); the
//       zero point 8 comes off as 8 x activation block sum.
//   Q5_0 (176 bytes):  8 f16 scales | 5 x 32 bytes s0..s4 of unsigned 5-bit values
//       (0..31, zero point 16). Bits 0-4 of s_k hold vector k; the spare top three bits
//       hold vectors 5-7: vector 5 is bits 5-7 of s0 then bits 5-6 of s1, vector 6 the
//       same from s2 and s3, vector 7 bits 5-7 of s4 then bit 7 of s1 and bit 7 of s3.
//       Unpacking takes 23 operations per tile where four nibble vectors and a vector of
//       fifth bits took 35.
//   Q8_0 (272 bytes):  8 f16 scales | 8 vectors of int8 values.
//   Q4_K (1184 bytes per 256 columns):  8 f16 d | 8 f16 dmin | then per 32-value
//       sub-block: the rows' 6-bit scales, their 6-bit mins, 4 x 32 bytes of nibbles.
//       Sub-block scales multiply the int16 pair sums inside `madd`, so the float work is
//       once per sub-block for all eight rows.
//   Q6_K (1680 bytes per 256 columns):  8 f16 d | then per 32-value group: the rows'
//       int8 scales of its two 16-value sub-blocks, 6 x 32 bytes s0..s5 of unsigned
//       6-bit values (0..63; the zero point 32 comes off with the activation sums). Bits
//       0-5 of s_k hold vector k; the spare top two bits of s0, s1, s2 hold bits 0-1,
//       2-3, 4-5 of vector 6, those of s3, s4, s5 vector 7 (22 operations to unpack a
//       group where nibbles and a separate two bits per value took 34).
// Each tile's bytes are read front to back, which the hardware prefetchers follow.
#include "backends/cpu/qinterleaved.hpp"

#include <omp.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "backends/cpu/prefetch_tuning.hpp"
#include "backends/cpu/qactivations.hpp"
#include "backends/cpu/qformats.hpp"
#include "backends/cpu/simd.hpp"
#include "backends/cpu/team.hpp"
#include "luminal/error.hpp"
#include "luminal/quant.hpp"

namespace luminal::cpugen {
namespace {

using namespace qformats;

constexpr int64_t kRows = 8;  // weight rows per tile
// How much of a run each thread asks for before it starts reading. How far ahead of the
// bytes being read the kernels ask for the rest is tuned on the machine
// (prefetch_tuning.hpp): on a Zen 2 EPYC machine 1 KiB ahead took a decode step of Gemma
// 3 270M from 11.2-11.5 to 10.1-10.4 ms against the 4 KiB that suits a Xeon.
constexpr int64_t kPrefetchStart = 4096;

struct Layout {
  int64_t block_elems = 0, src_bytes = 0, tile_bytes = 0;  // all 0: no interleaved layout
};

constexpr Layout layout_of(GgmlType type) {
  switch (type) {
    case GgmlType::Q4_0:
      return {32, 18, 144};
    case GgmlType::Q5_0:
      return {32, 22, 176};
    case GgmlType::Q8_0:
      return {32, 34, 272};
    case GgmlType::Q4_K:
      return {256, 144, 1184};
    case GgmlType::Q6_K:
      return {256, 210, 1680};
    default:
      return {};
  }
}

Layout layout_of(uint32_t format) {
  return layout_of(static_cast<GgmlType>(format));
}

// Byte i of vector v: value 4v + i % 4 of row i / 4 in a group of 32 values per row.
template <class Value>
uint8_t vector_byte(Value&& value, int v, int i) {
  return value(i / 4, 4 * v + i % 4);
}

// Writes the 4 x 32 bytes of nibbles for a 32-value group; value(r, j) in 0..15.
template <class Value>
void put_nibbles(uint8_t* out, Value&& value) {
  for (int p = 0; p < 4; ++p)
    for (int i = 0; i < 32; ++i)
      out[32 * p + i] = static_cast<uint8_t>((vector_byte(value, 2 * p, i) & 0xF) |
                                             (vector_byte(value, 2 * p + 1, i) & 0xF) << 4);
}

// One tile of Q4_0 / Q5_0 / Q8_0: `src[r]` is row r's block.
void interleave_32(GgmlType type, const uint8_t* const src[kRows], uint8_t* tile) {
  int8_t q[kRows][32];
  float s[2], b[2];
  for (int r = 0; r < kRows; ++r) {
    if (type == GgmlType::Q4_0) Q4<false>::decode(src[r], q[r], s, b);
    if (type == GgmlType::Q5_0) Q5<false>::decode(src[r], q[r], s, b);
    if (type == GgmlType::Q8_0) Q8_0::decode(src[r], q[r], s, b);
    std::memcpy(tile + 2 * r, src[r], 2);  // the f16 scale leads every one of these blocks
  }
  uint8_t* body = tile + 16;
  if (type == GgmlType::Q8_0) {
    for (int v = 0; v < 8; ++v)
      for (int i = 0; i < 32; ++i)
        body[32 * v + i] =
            static_cast<uint8_t>(vector_byte([&](int r, int j) { return q[r][j]; }, v, i));
    return;
  }
  const int zero = type == GgmlType::Q5_0 ? 16 : 8;
  auto value = [&](int r, int j) { return q[r][j] + zero; };  // unsigned
  if (type == GgmlType::Q4_0) return put_nibbles(body, value);
  for (int i = 0; i < 32; ++i) {
    int v[8];
    for (int k = 0; k < 8; ++k) v[k] = vector_byte(value, k, i);
    const int s[5] = {v[0] | (v[5] & 7) << 5, v[1] | (v[5] >> 3) << 5 | (v[7] >> 3 & 1) << 7,
                      v[2] | (v[6] & 7) << 5, v[3] | (v[6] >> 3) << 5 | (v[7] >> 4) << 7,
                      v[4] | (v[7] & 7) << 5};
    for (int k = 0; k < 5; ++k) body[32 * k + i] = static_cast<uint8_t>(s[k]);
  }
}

void interleave_q4_k(const uint8_t* const src[kRows], uint8_t* tile) {
  int8_t q[kRows][256];
  float s[16], b[16];
  for (int r = 0; r < kRows; ++r) {
    QK<false>::decode(src[r], q[r], s, b);
    std::memcpy(tile + 2 * r, src[r], 2);           // d
    std::memcpy(tile + 16 + 2 * r, src[r] + 2, 2);  // dmin
    for (int sub = 0; sub < 8; ++sub) {
      int sc, m;
      ggml_k4_scale_min(sub, src[r] + 4, sc, m);
      tile[32 + 144 * sub + r] = static_cast<uint8_t>(sc);
      tile[40 + 144 * sub + r] = static_cast<uint8_t>(m);
    }
  }
  for (int sub = 0; sub < 8; ++sub)
    put_nibbles(tile + 48 + 144 * sub, [&](int r, int j) { return q[r][32 * sub + j]; });
}

void interleave_q6_k(const uint8_t* const src[kRows], uint8_t* tile) {
  int8_t q[kRows][256];
  float s[16];
  for (int r = 0; r < kRows; ++r) {
    Q6_K::decode(src[r], q[r], s, nullptr);
    std::memcpy(tile + 2 * r, src[r] + 208, 2);  // d
    for (int sub = 0; sub < 16; ++sub)
      tile[16 + 208 * (sub / 2) + 8 * (sub % 2) + r] = src[r][192 + sub];
  }
  for (int g = 0; g < 8; ++g) {
    auto value = [&](int r, int j) { return q[r][32 * g + j] + 32; };  // unsigned
    uint8_t* body = tile + 32 + 208 * g;
    for (int i = 0; i < 32; ++i) {
      int v[8];
      for (int k = 0; k < 8; ++k) v[k] = vector_byte(value, k, i);
      for (int k = 0; k < 6; ++k)
        body[32 * k + i] = static_cast<uint8_t>(v[k] | (v[6 + k / 3] >> (2 * (k % 3)) & 3) << 6);
    }
  }
}

#if defined(__x86_64__)
LUM_AVX2 inline __m256i broadcast4(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm256_set1_epi32(v);
}

// Asks for the cache lines `ahead` bytes past the `bytes` about to be read. The hardware
// prefetchers alone fall behind on these streams, most of all in the first kilobytes of a
// product, and decode runs a hundred small products back to back.
inline void prefetch_ahead(const uint8_t* p, int64_t bytes, int64_t ahead) {
  for (int64_t line = 0; line < bytes; line += 64)
    _mm_prefetch(reinterpret_cast<const char*>(p + ahead + line), _MM_HINT_T0);
}

// Asks for the first `kPrefetchStart` bytes of a run about to be read, which
// prefetch_ahead inside the kernels does not cover.
inline void prefetch_start(const uint8_t* p, int64_t bytes) {
  for (int64_t line = 0; line < std::min(bytes, kPrefetchStart); line += 64)
    _mm_prefetch(reinterpret_cast<const char*>(p + line), _MM_HINT_T0);
}

LUM_AVX2 inline __m256i load32(const uint8_t* p) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}

LUM_AVX2 inline __m256 load_f16x8(const uint8_t* p) {
  return load8_f16(reinterpret_cast<const uint16_t*>(p));
}

// The eight vectors of a 32-value group from its 4 x 32 bytes of nibbles.
LUM_AVX2 inline void unpack_nibbles(const uint8_t* p, __m256i q[8]) {
  const __m256i m4 = _mm256_set1_epi8(0xF);
#pragma GCC unroll 8
  for (int i = 0; i < 4; ++i) {
    const __m256i x = load32(p + 32 * i);
    q[2 * i] = _mm256_and_si256(x, m4);
    q[2 * i + 1] = _mm256_and_si256(_mm256_srli_epi16(x, 4), m4);
  }
}

// The eight vectors of a Q5_0 tile from its 5 x 32 bytes (see the layout above).
LUM_AVX2 inline void unpack_five(const uint8_t* p, __m256i q[8]) {
  const __m256i low5 = _mm256_set1_epi8(0x1F), low3 = _mm256_set1_epi8(0x07);
  __m256i s[5];
#pragma GCC unroll 5
  for (int k = 0; k < 5; ++k) {
    s[k] = load32(p + 32 * k);
    q[k] = _mm256_and_si256(s[k], low5);
  }
  // Bits 5-7 of s_k to bits 0-2 of vectors 5-7; bits 5-6 of s1 and s3 to bits 3-4 of
  // vectors 5 and 6; bit 7 of s1 and s3 to bits 3 and 4 of vector 7.
  __m256i top3[3];
#pragma GCC unroll 3
  for (int k = 0; k < 3; ++k) top3[k] = _mm256_and_si256(_mm256_srli_epi16(s[2 * k], 5), low3);
  const __m256i two = _mm256_set1_epi8(0x18);
  q[5] = _mm256_or_si256(top3[0], _mm256_and_si256(_mm256_srli_epi16(s[1], 2), two));
  q[6] = _mm256_or_si256(top3[1], _mm256_and_si256(_mm256_srli_epi16(s[3], 2), two));
  q[7] = _mm256_or_si256(
      top3[2],
      _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(s[1], 4), _mm256_set1_epi8(0x08)),
                      _mm256_and_si256(_mm256_srli_epi16(s[3], 3), _mm256_set1_epi8(0x10))));
}

// The eight vectors of a Q6_K group from its 6 x 32 bytes (see the layout above).
LUM_AVX2 inline void unpack_six(const uint8_t* p, __m256i q[8]) {
  const __m256i low6 = _mm256_set1_epi8(0x3F);
  __m256i s[6];
#pragma GCC unroll 6
  for (int k = 0; k < 6; ++k) {
    s[k] = load32(p + 32 * k);
    q[k] = _mm256_and_si256(s[k], low6);
  }
#pragma GCC unroll 2
  for (int u = 0; u < 2; ++u) {
    const __m256i* t = s + 3 * u;
    q[6 + u] = _mm256_or_si256(
        _mm256_and_si256(_mm256_srli_epi16(t[0], 6), _mm256_set1_epi8(0x03)),
        _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(t[1], 4), _mm256_set1_epi8(0x0C)),
                        _mm256_and_si256(_mm256_srli_epi16(t[2], 2), _mm256_set1_epi8(0x30))));
  }
}

// Sum over the group of maddubs(q[v], activations 4v..4v+3), as int16 pairs. Unsigned
// values below 16 keep eight products of at most 2 * 15 * 127 within int16; below 32
// (kFive), four.
template <bool kFive>
LUM_AVX2 inline __m256i group_dot(const __m256i q[8], const int8_t* y) {
  __m256i p[8];
#pragma GCC unroll 8
  for (int v = 0; v < 8; ++v) p[v] = _mm256_maddubs_epi16(q[v], broadcast4(y + 4 * v));
  const __m256i lo = _mm256_add_epi16(_mm256_add_epi16(p[0], p[1]), _mm256_add_epi16(p[2], p[3]));
  const __m256i hi = _mm256_add_epi16(_mm256_add_epi16(p[4], p[5]), _mm256_add_epi16(p[6], p[7]));
  const __m256i ones = _mm256_set1_epi16(1);
  if (kFive) return _mm256_add_epi32(_mm256_madd_epi16(lo, ones), _mm256_madd_epi16(hi, ones));
  return _mm256_madd_epi16(_mm256_add_epi16(lo, hi), ones);
}

// Eight rows' sub-block scale bytes as int16, each twice: `madd` multiplies int16 pair r
// (lanes 2r, 2r + 1) by row r's scale.
template <bool kSigned>
LUM_AVX2 inline __m256i scale_pairs(const uint8_t* p) {
  const __m128i twice = _mm_setr_epi8(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);
  const __m128i bytes =
      _mm_shuffle_epi8(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)), twice);
  return kSigned ? _mm256_cvtepi8_epi16(bytes) : _mm256_cvtepu8_epi16(bytes);
}

// Per activation row: its int8 values; per 32-block, the scale d and d * sum(q); per
// 16 elements, d * sum(q).
struct Row {
  const int8_t* q;
  const float* d;
  const float* sum;
  const float* sum16;
};

// Q4_0 / Q5_0 / Q8_0 tiles against kM activation rows; writes 8 outputs per row.
template <GgmlType kType, int kM>
LUM_AVX2 void tiles_32(const uint8_t* tiles, int64_t blocks, int64_t ahead, const Row* rows,
                       float* const* out) {
  constexpr int64_t kTile = layout_of(kType).tile_bytes;
  const float zero = kType == GgmlType::Q5_0 ? 16.0f : 8.0f;
  __m256 acc[kM];
  for (auto& a : acc) a = _mm256_setzero_ps();
  for (int64_t b = 0; b < blocks; ++b) {
    const uint8_t* t = tiles + b * kTile;
    prefetch_ahead(t, kTile, ahead);
    __m256i q[8];
    if constexpr (kType == GgmlType::Q8_0) {
      const __m256 dw = load_f16x8(t);
#pragma GCC unroll 8
      for (int v = 0; v < 8; ++v) q[v] = load32(t + 16 + 32 * v);
      __m256i mag[8];
#pragma GCC unroll 8
      for (int v = 0; v < 8; ++v) mag[v] = _mm256_sign_epi8(q[v], q[v]);
      const __m256i ones = _mm256_set1_epi16(1);
#pragma GCC unroll 8
      for (int m = 0; m < kM; ++m) {
        const int8_t* y = rows[m].q + 32 * b;
        __m256i sum = _mm256_setzero_si256();
#pragma GCC unroll 8
        for (int v = 0; v < 8; ++v) {
          // maddubs takes its first operand unsigned: |w| against y given w's sign.
          const __m256i p =
              _mm256_maddubs_epi16(mag[v], _mm256_sign_epi8(broadcast4(y + 4 * v), q[v]));
          sum = _mm256_add_epi32(sum, _mm256_madd_epi16(p, ones));
        }
        const __m256 dot = _mm256_mul_ps(_mm256_cvtepi32_ps(sum), _mm256_set1_ps(rows[m].d[b]));
        acc[m] = _mm256_fmadd_ps(dw, dot, acc[m]);
      }
      continue;
    }
    constexpr bool kFive = kType == GgmlType::Q5_0;
    if constexpr (kFive)
      unpack_five(t + 16, q);
    else
      unpack_nibbles(t + 16, q);
    const __m256 dw = load_f16x8(t);  // loaded late: kept live across the unpacking, it spilled
#pragma GCC unroll 8
    for (int m = 0; m < kM; ++m) {
      const __m256i dot = group_dot<kFive>(q, rows[m].q + 32 * b);
      // d_y * (sum of unsigned products) - zero * d_y * sum(q_y), then times d_w.
      const __m256 signed_dot =
          _mm256_fmsub_ps(_mm256_cvtepi32_ps(dot), _mm256_set1_ps(rows[m].d[b]),
                          _mm256_set1_ps(zero * rows[m].sum[b]));
      acc[m] = _mm256_fmadd_ps(dw, signed_dot, acc[m]);
    }
  }
#pragma GCC unroll 8
  for (int m = 0; m < kM; ++m) _mm256_storeu_ps(out[m], acc[m]);
}

template <int kM>
LUM_AVX2 void tiles_q4_k(const uint8_t* tiles, int64_t blocks, int64_t ahead, const Row* rows,
                         float* const* out) {
  constexpr int64_t kTile = layout_of(GgmlType::Q4_K).tile_bytes;
  __m256 acc[kM];
  for (auto& a : acc) a = _mm256_setzero_ps();
  for (int64_t b = 0; b < blocks; ++b) {
    const uint8_t* t = tiles + b * kTile;
    __m256 scaled[kM], mins[kM];
#pragma GCC unroll 8
    for (int m = 0; m < kM; ++m) scaled[m] = mins[m] = _mm256_setzero_ps();
    for (int sub = 0; sub < 8; ++sub) {
      prefetch_ahead(t + kTile / 8 * sub, kTile / 8, ahead);
      __m256i q[8];
      unpack_nibbles(t + 48 + 144 * sub, q);
      const __m256i sc = scale_pairs<false>(t + 32 + 144 * sub);
      const __m256 mn = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(
          _mm_loadl_epi64(reinterpret_cast<const __m128i*>(t + 40 + 144 * sub))));
#pragma GCC unroll 8
      for (int m = 0; m < kM; ++m) {
        const int64_t at = 8 * b + sub;  // the activation block
        const int8_t* y = rows[m].q + 32 * at;
        __m256i p = _mm256_maddubs_epi16(q[0], broadcast4(y));
#pragma GCC unroll 8
        for (int v = 1; v < 8; ++v)
          p = _mm256_add_epi16(p, _mm256_maddubs_epi16(q[v], broadcast4(y + 4 * v)));
        const __m256i dot = _mm256_madd_epi16(p, sc);
        scaled[m] =
            _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_set1_ps(rows[m].d[at]), scaled[m]);
        mins[m] = _mm256_fmadd_ps(mn, _mm256_set1_ps(rows[m].sum[at]), mins[m]);
      }
    }
    const __m256 d = load_f16x8(t), dmin = load_f16x8(t + 16);
#pragma GCC unroll 8
    for (int m = 0; m < kM; ++m)
      acc[m] = _mm256_fnmadd_ps(dmin, mins[m], _mm256_fmadd_ps(d, scaled[m], acc[m]));
  }
#pragma GCC unroll 8
  for (int m = 0; m < kM; ++m) _mm256_storeu_ps(out[m], acc[m]);
}

template <int kM>
LUM_AVX2 void tiles_q6_k(const uint8_t* tiles, int64_t blocks, int64_t ahead, const Row* rows,
                         float* const* out) {
  constexpr int64_t kTile = layout_of(GgmlType::Q6_K).tile_bytes;
  __m256 acc[kM];
  for (auto& a : acc) a = _mm256_setzero_ps();
  for (int64_t b = 0; b < blocks; ++b) {
    const uint8_t* t = tiles + b * kTile;
    __m256 scaled[kM], zero[kM];
#pragma GCC unroll 8
    for (int m = 0; m < kM; ++m) scaled[m] = zero[m] = _mm256_setzero_ps();
    for (int g = 0; g < 8; ++g) {
      prefetch_ahead(t + kTile / 8 * g, kTile / 8, ahead);
      __m256i q[8];
      unpack_six(t + 32 + 208 * g, q);
      // The two 16-value sub-blocks' scales: as int16 pairs for madd, and as floats.
      __m256i sc[2];
      __m256 scf[2];
#pragma GCC unroll 8
      for (int half = 0; half < 2; ++half) {
        const __m128i raw =
            _mm_loadl_epi64(reinterpret_cast<const __m128i*>(t + 16 + 208 * g + 8 * half));
        sc[half] = scale_pairs<true>(t + 16 + 208 * g + 8 * half);
        scf[half] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(raw));
      }
#pragma GCC unroll 8
      for (int m = 0; m < kM; ++m) {
        const int64_t at = 8 * b + g;  // the activation block
        const int8_t* y = rows[m].q + 32 * at;
        // Values below 64: two products of at most 2 * 63 * 127 stay within int16.
        __m256i dot = _mm256_setzero_si256();
#pragma GCC unroll 8
        for (int v = 0; v < 8; v += 2) {
          const __m256i pair =
              _mm256_add_epi16(_mm256_maddubs_epi16(q[v], broadcast4(y + 4 * v)),
                               _mm256_maddubs_epi16(q[v + 1], broadcast4(y + 4 * v + 4)));
          dot = _mm256_add_epi32(dot, _mm256_madd_epi16(pair, sc[v / 4]));
        }
        scaled[m] =
            _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_set1_ps(rows[m].d[at]), scaled[m]);
        zero[m] = _mm256_fmadd_ps(scf[0], _mm256_set1_ps(rows[m].sum16[2 * at]), zero[m]);
        zero[m] = _mm256_fmadd_ps(scf[1], _mm256_set1_ps(rows[m].sum16[2 * at + 1]), zero[m]);
      }
    }
    const __m256 d = load_f16x8(t);
#pragma GCC unroll 8
    for (int m = 0; m < kM; ++m)
      acc[m] =
          _mm256_fmadd_ps(d, _mm256_fnmadd_ps(_mm256_set1_ps(32.0f), zero[m], scaled[m]), acc[m]);
  }
#pragma GCC unroll 8
  for (int m = 0; m < kM; ++m) _mm256_storeu_ps(out[m], acc[m]);
}

template <int kM>
LUM_AVX2 void tiles(uint32_t format, const uint8_t* t, int64_t blocks, int64_t ahead,
                    const Row* rows, float* const* out) {
  switch (static_cast<GgmlType>(format)) {
    case GgmlType::Q4_0:
      return tiles_32<GgmlType::Q4_0, kM>(t, blocks, ahead, rows, out);
    case GgmlType::Q5_0:
      return tiles_32<GgmlType::Q5_0, kM>(t, blocks, ahead, rows, out);
    case GgmlType::Q8_0:
      return tiles_32<GgmlType::Q8_0, kM>(t, blocks, ahead, rows, out);
    case GgmlType::Q4_K:
      return tiles_q4_k<kM>(t, blocks, ahead, rows, out);
    case GgmlType::Q6_K:
      return tiles_q6_k<kM>(t, blocks, ahead, rows, out);
    default:
      LUM_FAIL() << "internal: no interleaved kernel for " << ggml_type_name(format);
  }
}

// ---- AVX-512: two groups of eight rows per pass -------------------------------------
// The same tiles, read as pairs: the tile of group g in the low 256 bits of each vector
// and that of group g + 1 (`stride` bytes on) in the high 256, so every instruction
// serves sixteen rows and the sixteen outputs of an activation row are one store.
// Products of unsigned weight bytes and signed activation bytes go through VNNI's
// dpbusd, which sums four of them into each int32 lane without int16 saturation.

// GCC 12's AVX-512 intrinsics start from _mm512_undefined_*, which its flow analysis
// reports as maybe uninitialised; the values are always fully written.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

LUM_AVX512 inline __m512i load2x32(const uint8_t* p, int64_t stride) {
  return _mm512_inserti64x4(_mm512_castsi256_si512(load32(p)), load32(p + stride), 1);
}

LUM_AVX512 inline __m512 load2_f16x8(const uint8_t* p, int64_t stride) {
  const __m128i lo = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  const __m128i hi = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + stride));
  return _mm512_cvtph_ps(_mm256_inserti128_si256(_mm256_castsi128_si256(lo), hi, 1));
}

LUM_AVX512 inline __m512i broadcast4x16(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm512_set1_epi32(v);
}

LUM_AVX512 inline void unpack_nibbles2(const uint8_t* p, int64_t stride, __m512i q[8]) {
  const __m512i m4 = _mm512_set1_epi8(0xF);
#pragma GCC unroll 8
  for (int i = 0; i < 4; ++i) {
    const __m512i x = load2x32(p + 32 * i, stride);
    q[2 * i] = _mm512_and_si512(x, m4);
    q[2 * i + 1] = _mm512_and_si512(_mm512_srli_epi16(x, 4), m4);
  }
}

LUM_AVX512 inline void unpack_five2(const uint8_t* p, int64_t stride, __m512i q[8]) {
  const __m512i low5 = _mm512_set1_epi8(0x1F), low3 = _mm512_set1_epi8(0x07);
  __m512i s[5];
#pragma GCC unroll 5
  for (int k = 0; k < 5; ++k) {
    s[k] = load2x32(p + 32 * k, stride);
    q[k] = _mm512_and_si512(s[k], low5);
  }
  __m512i top3[3];
#pragma GCC unroll 3
  for (int k = 0; k < 3; ++k) top3[k] = _mm512_and_si512(_mm512_srli_epi16(s[2 * k], 5), low3);
  const __m512i two = _mm512_set1_epi8(0x18);
  q[5] = _mm512_or_si512(top3[0], _mm512_and_si512(_mm512_srli_epi16(s[1], 2), two));
  q[6] = _mm512_or_si512(top3[1], _mm512_and_si512(_mm512_srli_epi16(s[3], 2), two));
  q[7] = _mm512_or_si512(
      top3[2],
      _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(s[1], 4), _mm512_set1_epi8(0x08)),
                      _mm512_and_si512(_mm512_srli_epi16(s[3], 3), _mm512_set1_epi8(0x10))));
}

LUM_AVX512 inline void unpack_six2(const uint8_t* p, int64_t stride, __m512i q[8]) {
  const __m512i low6 = _mm512_set1_epi8(0x3F);
  __m512i s[6];
#pragma GCC unroll 6
  for (int k = 0; k < 6; ++k) {
    s[k] = load2x32(p + 32 * k, stride);
    q[k] = _mm512_and_si512(s[k], low6);
  }
#pragma GCC unroll 2
  for (int u = 0; u < 2; ++u) {
    const __m512i* t = s + 3 * u;
    q[6 + u] = _mm512_or_si512(
        _mm512_and_si512(_mm512_srli_epi16(t[0], 6), _mm512_set1_epi8(0x03)),
        _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(t[1], 4), _mm512_set1_epi8(0x0C)),
                        _mm512_and_si512(_mm512_srli_epi16(t[2], 2), _mm512_set1_epi8(0x30))));
  }
}

// Sixteen rows' sub-block scale bytes as int16 pairs (see scale_pairs).
template <bool kSigned>
LUM_AVX512 inline __m512i scale_pairs2(const uint8_t* p, int64_t stride) {
  const __m128i twice = _mm_setr_epi8(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);
  const __m128i lo = _mm_shuffle_epi8(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)), twice);
  const __m128i hi =
      _mm_shuffle_epi8(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p + stride)), twice);
  const __m256i bytes = _mm256_inserti128_si256(_mm256_castsi128_si256(lo), hi, 1);
  return kSigned ? _mm512_cvtepi8_epi16(bytes) : _mm512_cvtepu8_epi16(bytes);
}

// Sixteen rows' eight bytes each (8 from p, 8 from p + stride) as floats.
template <bool kSigned>
LUM_AVX512 inline __m512 bytes_to_ps2(const uint8_t* p, int64_t stride) {
  const __m128i b =
      _mm_unpacklo_epi64(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)),
                         _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p + stride)));
  return _mm512_cvtepi32_ps(kSigned ? _mm512_cvtepi8_epi32(b) : _mm512_cvtepu8_epi32(b));
}

template <GgmlType kType, int kM>
LUM_AVX512 void tiles_32_x16(const uint8_t* tiles, int64_t stride, int64_t blocks, int64_t ahead,
                             const Row* rows, float* const* out) {
  constexpr int64_t kTile = layout_of(kType).tile_bytes;
  const float zero = kType == GgmlType::Q5_0 ? 16.0f : 8.0f;
  __m512 acc[kM];
  for (auto& a : acc) a = _mm512_setzero_ps();
  for (int64_t b = 0; b < blocks; ++b) {
    const uint8_t* t = tiles + b * kTile;
    prefetch_ahead(t, kTile, ahead);
    prefetch_ahead(t + stride, kTile, ahead);
    const __m512 dw = load2_f16x8(t, stride);
    __m512i q[8];
    if constexpr (kType == GgmlType::Q8_0) {
      // dpbusd takes its first operand unsigned: |w| (abs(-128) reads as 128) against y
      // negated where w is negative.
      __mmask64 negative[8];
#pragma GCC unroll 8
      for (int v = 0; v < 8; ++v) {
        const __m512i w = load2x32(t + 16 + 32 * v, stride);
        negative[v] = _mm512_movepi8_mask(w);
        q[v] = _mm512_abs_epi8(w);
      }
#pragma GCC unroll 8
      for (int m = 0; m < kM; ++m) {
        const int8_t* y = rows[m].q + 32 * b;
        __m512i sum = _mm512_setzero_si512();
#pragma GCC unroll 8
        for (int v = 0; v < 8; ++v) {
          const __m512i yv = broadcast4x16(y + 4 * v);
          sum = _mm512_dpbusd_epi32(
              sum, q[v], _mm512_mask_sub_epi8(yv, negative[v], _mm512_setzero_si512(), yv));
        }
        const __m512 dot = _mm512_mul_ps(_mm512_cvtepi32_ps(sum), _mm512_set1_ps(rows[m].d[b]));
        acc[m] = _mm512_fmadd_ps(dw, dot, acc[m]);
      }
      continue;
    }
    if constexpr (kType == GgmlType::Q5_0)
      unpack_five2(t + 16, stride, q);
    else
      unpack_nibbles2(t + 16, stride, q);
#pragma GCC unroll 8
    for (int m = 0; m < kM; ++m) {
      const int8_t* y = rows[m].q + 32 * b;
      __m512i dot = _mm512_setzero_si512();
#pragma GCC unroll 8
      for (int v = 0; v < 8; ++v) dot = _mm512_dpbusd_epi32(dot, q[v], broadcast4x16(y + 4 * v));
      const __m512 signed_dot =
          _mm512_fmsub_ps(_mm512_cvtepi32_ps(dot), _mm512_set1_ps(rows[m].d[b]),
                          _mm512_set1_ps(zero * rows[m].sum[b]));
      acc[m] = _mm512_fmadd_ps(dw, signed_dot, acc[m]);
    }
  }
#pragma GCC unroll 8
  for (int m = 0; m < kM; ++m) _mm512_storeu_ps(out[m], acc[m]);
}

template <int kM>
LUM_AVX512 void tiles_q4_k_x16(const uint8_t* tiles, int64_t stride, int64_t blocks, int64_t ahead,
                               const Row* rows, float* const* out) {
  constexpr int64_t kTile = layout_of(GgmlType::Q4_K).tile_bytes;
  __m512 acc[kM];
  for (auto& a : acc) a = _mm512_setzero_ps();
  for (int64_t b = 0; b < blocks; ++b) {
    const uint8_t* t = tiles + b * kTile;
    __m512 scaled[kM], mins[kM];
#pragma GCC unroll 8
    for (int m = 0; m < kM; ++m) scaled[m] = mins[m] = _mm512_setzero_ps();
    for (int sub = 0; sub < 8; ++sub) {
      prefetch_ahead(t + kTile / 8 * sub, kTile / 8, ahead);
      prefetch_ahead(t + stride + kTile / 8 * sub, kTile / 8, ahead);
      __m512i q[8];
      unpack_nibbles2(t + 48 + 144 * sub, stride, q);
      const __m512i sc = scale_pairs2<false>(t + 32 + 144 * sub, stride);
      const __m512 mn = bytes_to_ps2<false>(t + 40 + 144 * sub, stride);
#pragma GCC unroll 8
      for (int m = 0; m < kM; ++m) {
        const int64_t at = 8 * b + sub;  // the activation block
        const int8_t* y = rows[m].q + 32 * at;
        __m512i p = _mm512_maddubs_epi16(q[0], broadcast4x16(y));
#pragma GCC unroll 8
        for (int v = 1; v < 8; ++v)
          p = _mm512_add_epi16(p, _mm512_maddubs_epi16(q[v], broadcast4x16(y + 4 * v)));
        const __m512i dot = _mm512_madd_epi16(p, sc);
        scaled[m] =
            _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), _mm512_set1_ps(rows[m].d[at]), scaled[m]);
        mins[m] = _mm512_fmadd_ps(mn, _mm512_set1_ps(rows[m].sum[at]), mins[m]);
      }
    }
    const __m512 d = load2_f16x8(t, stride), dmin = load2_f16x8(t + 16, stride);
#pragma GCC unroll 8
    for (int m = 0; m < kM; ++m)
      acc[m] = _mm512_fnmadd_ps(dmin, mins[m], _mm512_fmadd_ps(d, scaled[m], acc[m]));
  }
#pragma GCC unroll 8
  for (int m = 0; m < kM; ++m) _mm512_storeu_ps(out[m], acc[m]);
}

template <int kM>
LUM_AVX512 void tiles_q6_k_x16(const uint8_t* tiles, int64_t stride, int64_t blocks, int64_t ahead,
                               const Row* rows, float* const* out) {
  constexpr int64_t kTile = layout_of(GgmlType::Q6_K).tile_bytes;
  __m512 acc[kM];
  for (auto& a : acc) a = _mm512_setzero_ps();
  for (int64_t b = 0; b < blocks; ++b) {
    const uint8_t* t = tiles + b * kTile;
    __m512 scaled[kM], zero[kM];
#pragma GCC unroll 8
    for (int m = 0; m < kM; ++m) scaled[m] = zero[m] = _mm512_setzero_ps();
    for (int g = 0; g < 8; ++g) {
      prefetch_ahead(t + kTile / 8 * g, kTile / 8, ahead);
      prefetch_ahead(t + stride + kTile / 8 * g, kTile / 8, ahead);
      __m512i q[8];
      unpack_six2(t + 32 + 208 * g, stride, q);
      __m512i sc[2];
      __m512 scf[2];
#pragma GCC unroll 8
      for (int half = 0; half < 2; ++half) {
        sc[half] = scale_pairs2<true>(t + 16 + 208 * g + 8 * half, stride);
        scf[half] = bytes_to_ps2<true>(t + 16 + 208 * g + 8 * half, stride);
      }
#pragma GCC unroll 8
      for (int m = 0; m < kM; ++m) {
        const int64_t at = 8 * b + g;  // the activation block
        const int8_t* y = rows[m].q + 32 * at;
        __m512i dot = _mm512_setzero_si512();
#pragma GCC unroll 8
        for (int v = 0; v < 8; v += 2) {
          const __m512i pair =
              _mm512_add_epi16(_mm512_maddubs_epi16(q[v], broadcast4x16(y + 4 * v)),
                               _mm512_maddubs_epi16(q[v + 1], broadcast4x16(y + 4 * v + 4)));
          dot = _mm512_add_epi32(dot, _mm512_madd_epi16(pair, sc[v / 4]));
        }
        scaled[m] =
            _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), _mm512_set1_ps(rows[m].d[at]), scaled[m]);
        zero[m] = _mm512_fmadd_ps(scf[0], _mm512_set1_ps(rows[m].sum16[2 * at]), zero[m]);
        zero[m] = _mm512_fmadd_ps(scf[1], _mm512_set1_ps(rows[m].sum16[2 * at + 1]), zero[m]);
      }
    }
    const __m512 d = load2_f16x8(t, stride);
#pragma GCC unroll 8
    for (int m = 0; m < kM; ++m)
      acc[m] =
          _mm512_fmadd_ps(d, _mm512_fnmadd_ps(_mm512_set1_ps(32.0f), zero[m], scaled[m]), acc[m]);
  }
#pragma GCC unroll 8
  for (int m = 0; m < kM; ++m) _mm512_storeu_ps(out[m], acc[m]);
}

template <int kM>
LUM_AVX512 void tiles_x16(uint32_t format, const uint8_t* t, int64_t stride, int64_t blocks,
                          int64_t ahead, const Row* rows, float* const* out) {
  switch (static_cast<GgmlType>(format)) {
    case GgmlType::Q4_0:
      return tiles_32_x16<GgmlType::Q4_0, kM>(t, stride, blocks, ahead, rows, out);
    case GgmlType::Q5_0:
      return tiles_32_x16<GgmlType::Q5_0, kM>(t, stride, blocks, ahead, rows, out);
    case GgmlType::Q8_0:
      return tiles_32_x16<GgmlType::Q8_0, kM>(t, stride, blocks, ahead, rows, out);
    case GgmlType::Q4_K:
      return tiles_q4_k_x16<kM>(t, stride, blocks, ahead, rows, out);
    case GgmlType::Q6_K:
      return tiles_q6_k_x16<kM>(t, stride, blocks, ahead, rows, out);
    default:
      LUM_FAIL() << "internal: no interleaved kernel for " << ggml_type_name(format);
  }
}

#pragma GCC diagnostic pop

// The kernel instance for `count` (1 to 4) activation rows.
void tiles_for(int64_t count, uint32_t format, const uint8_t* t, int64_t blocks, int64_t ahead,
               const Row* r, float* const* o) {
  switch (count) {
    case 1:
      return tiles<1>(format, t, blocks, ahead, r, o);
    case 2:
      return tiles<2>(format, t, blocks, ahead, r, o);
    case 3:
      return tiles<3>(format, t, blocks, ahead, r, o);
    default:
      return tiles<4>(format, t, blocks, ahead, r, o);
  }
}

void tiles_x16_for(int64_t count, uint32_t format, const uint8_t* t, int64_t stride, int64_t blocks,
                   int64_t ahead, const Row* r, float* const* o) {
  switch (count) {
    case 1:
      return tiles_x16<1>(format, t, stride, blocks, ahead, r, o);
    case 2:
      return tiles_x16<2>(format, t, stride, blocks, ahead, r, o);
    case 3:
      return tiles_x16<3>(format, t, stride, blocks, ahead, r, o);
    default:
      return tiles_x16<4>(format, t, stride, blocks, ahead, r, o);
  }
}
#endif

}  // namespace

bool interleavable(uint32_t format, int64_t n, int64_t k) {
  const Layout l = layout_of(format);
  return use_avx2() && l.tile_bytes > 0 && n % kRows == 0 && k % l.block_elems == 0 && n > 0;
}

InterleavedWeights interleave(uint32_t format, const uint8_t* w, int64_t n, int64_t k) {
  const Layout l = layout_of(format);
  LUM_CHECK(l.tile_bytes > 0 && n % kRows == 0 && k % l.block_elems == 0)
      << "internal: " << ggml_type_name(format) << " [" << n << ", " << k
      << "] has no interleaved layout";
  const int64_t blocks = k / l.block_elems;
  InterleavedWeights out{
      format, n, k,
      HugePageBytes::allocate(static_cast<size_t>(n / kRows * blocks * l.tile_bytes))};
  uint8_t* dst = out.data.data();
  const auto type = static_cast<GgmlType>(format);
  run_parallel_for(omp_get_max_threads(), n / kRows, [&](int64_t begin, int64_t end) {
    for (int64_t g = begin; g < end; ++g) {
      for (int64_t b = 0; b < blocks; ++b) {
        const uint8_t* src[kRows];
        for (int64_t r = 0; r < kRows; ++r)
          src[r] = w + ((kRows * g + r) * blocks + b) * l.src_bytes;
        uint8_t* tile = dst + (g * blocks + b) * l.tile_bytes;
        if (type == GgmlType::Q4_K)
          interleave_q4_k(src, tile);
        else if (type == GgmlType::Q6_K)
          interleave_q6_k(src, tile);
        else
          interleave_32(type, src, tile);
      }
    }
  });
  return out;
}

namespace {

// How a product's groups of eight rows are read: in passes of one group (two with
// AVX-512, an odd last group alone).
struct Split {
  int64_t groups = 0, per_pass = 1, passes = 0, group_bytes = 0;

  Split() = default;
  explicit Split(const InterleavedWeights& w) {
    const Layout l = layout_of(w.format);
    groups = w.n / kRows;
    per_pass = use_avx512() ? 2 : 1;
    passes = (groups + per_pass - 1) / per_pass;
    group_bytes = w.k / l.block_elems * l.tile_bytes;
  }
  int64_t offset(int64_t pass) const { return std::min(pass * per_pass, groups) * group_bytes; }
  int64_t bytes() const { return groups * group_bytes; }
};

// One thread's share of a group of products' passes, [front, back). Its owner takes
// runs from the front, in order, so its reads stay one stream; a thread done with its own
// share takes runs from the back. Runs are a quarter of what is left (at least `min`), so
// a share is taken in a few dozen steps and the threads still end within a small run of
// each other: static halves left one waiting up to a tenth of a product (cores do not
// stream at the same rate on a shared machine).
class Share {
 public:
  void set(int64_t front, int64_t back) { v_.store(pack(front, back), std::memory_order_relaxed); }
  bool take_front(int64_t min, int64_t& from, int64_t& to) { return take(min, true, from, to); }
  bool take_back(int64_t min, int64_t& from, int64_t& to) { return take(min, false, from, to); }

 private:
  static uint64_t pack(int64_t front, int64_t back) {
    return static_cast<uint64_t>(front) << 32 | static_cast<uint32_t>(back);
  }
  bool take(int64_t min, bool front_end, int64_t& from, int64_t& to) {
    uint64_t v = v_.load(std::memory_order_relaxed);
    for (;;) {
      const auto front = static_cast<int64_t>(v >> 32), back = static_cast<int64_t>(v & 0xFFFFFFFF);
      if (front >= back) return false;
      const int64_t run = std::min(back - front, std::max(min, (back - front) / 4));
      from = front_end ? front : back - run;
      to = front_end ? front + run : back;
      const uint64_t left = front_end ? pack(to, back) : pack(front, from);
      if (v_.compare_exchange_weak(v, left, std::memory_order_relaxed)) return true;
    }
  }
  alignas(64) std::atomic<uint64_t> v_{0};  // front << 32 | back; a line of its own
};

}  // namespace

void qmatmul_interleaved(const std::vector<const float*>& rows,
                         std::span<const InterleavedProduct> products) {
#if defined(__x86_64__)
  constexpr size_t kMaxProducts = 8;
  const size_t count = products.size();
  LUM_CHECK(count > 0 && count <= kMaxProducts)
      << "internal: " << count << " products in one interleaved group";
  const int64_t k = products[0].w->k;
  for (const InterleavedProduct& p : products)
    LUM_CHECK(p.w->k == k) << "internal: interleaved products of K " << k << " and " << p.w->k;
  // Kept between calls: decode runs a hundred of these per token. The team reads the
  // calling thread's copies through these references.
  thread_local QuantizedRows kept_rows;
  thread_local std::vector<float> kept_sums;
  QuantizedRows& x = kept_rows;
  std::vector<float>& sum32 = kept_sums;  // d * sum(q) per 32-block
  quantize_rows(rows, k, x);
  const auto m = static_cast<int64_t>(rows.size());
  const int64_t k32 = k / 32;
  sum32.resize(static_cast<size_t>(m * k32));
  for (size_t i = 0; i < sum32.size(); ++i) sum32[i] = x.sum16[2 * i] + x.sum16[2 * i + 1];
  // The group's passes are its products' passes, one product after another; product p's
  // begin at first[p].
  std::array<Split, kMaxProducts> split;
  std::array<int64_t, kMaxProducts + 1> first{};
  int64_t bytes = 0;
  for (size_t p = 0; p < count; ++p) {
    split[p] = Split(*products[p].w);
    first[p + 1] = first[p] + split[p].passes;
    bytes += split[p].bytes();
  }
  const int64_t passes = first[count];
  auto product_of = [&](int64_t pass) {
    size_t p = 0;
    while (pass >= first[p + 1]) ++p;
    return p;
  };
  // Below 64 KiB of weights a second thread costs more than it saves.
  const int product_threads = bytes < (64 << 10) ? 1 : omp_get_max_threads();
  // Passes per run taken at least: 8 KiB of the first product's weights.
  const int64_t min_run =
      std::max<int64_t>(1, (8 << 10) / (split[0].per_pass * split[0].group_bytes));
  constexpr int kMaxShares = 64;
  const int shares = std::min(product_threads, kMaxShares);
  thread_local std::array<Share, kMaxShares> kept_shares;  // not rebuilt (4 KiB) per call
  std::array<Share, kMaxShares>& share = kept_shares;
  for (int i = 0; i < shares; ++i) share[i].set(passes * i / shares, passes * (i + 1) / shares);
  constexpr int64_t kTileRows = 4;  // activation rows per pass over a group's weights
  // Products of several activation rows are not timed: their arithmetic weighs more.
  PrefetchTuner& tuner = prefetch_tuner(bytes);
  const PrefetchTuner::Choice prefetch = tuner.choose(m == 1);
  const int64_t ahead = prefetch.distance;
  // Passes [begin, end) of product p.
  auto run_product = [&](size_t p, int64_t begin, int64_t end) {
    const InterleavedWeights& w = *products[p].w;
    const Split& sp = split[p];
    const int64_t blocks = w.k / layout_of(w.format).block_elems;
    for (int64_t pass = begin; pass < end; ++pass) {
      const int64_t g = pass * sp.per_pass;
      const bool pair = sp.per_pass == 2 && g + 1 < sp.groups;
      const uint8_t* t = w.data.data() + g * sp.group_bytes;
      for (int64_t first_row = 0; first_row < m; first_row += kTileRows) {
        Row r[kTileRows];
        float* o[kTileRows];
        const int64_t n_rows = std::min(kTileRows, m - first_row);
        for (int64_t i = 0; i < n_rows; ++i) {
          const int64_t row = first_row + i;
          r[i] = {x.q.data() + row * k, x.d.data() + row * k32, sum32.data() + row * k32,
                  x.sum16.data() + row * 2 * k32};
          o[i] = products[p].out + row * w.n + kRows * g;
        }
        if (pair) {
          tiles_x16_for(n_rows, w.format, t, sp.group_bytes, blocks, ahead, r, o);
        } else {
          tiles_for(n_rows, w.format, t, blocks, ahead, r, o);
        }
      }
    }
  };
  auto run_passes = [&](int64_t begin, int64_t end) {
    for (size_t p = product_of(begin); begin < end; ++p) {
      const int64_t stop = std::min(end, first[p + 1]);
      run_product(p, begin - first[p], stop - first[p]);
      begin = stop;
    }
  };
  // Asks for the start of passes [begin, end), which the kernels' own prefetching does not
  // cover.
  auto prefetch_run = [&](int64_t begin, int64_t end) {
    if (begin >= end) return;
    const size_t p = product_of(begin);
    const int64_t from = split[p].offset(begin - first[p]);
    const int64_t to = split[p].offset(std::min(end, first[p + 1]) - first[p]);
    prefetch_start(products[p].w->data.data() + from, to - from);
  };
  // Shares not started (fewer threads than asked for) are taken from the back by the rest.
  const auto start = std::chrono::steady_clock::now();
  run_parallel(product_threads, [&](int id, int) {
    int64_t from = 0, to = 0;
    if (id < shares) {
      // The whole share is asked for up front: its first run alone is a quarter of it.
      prefetch_run(passes * id / shares, passes * (id + 1) / shares);
      while (share[id].take_front(min_run, from, to)) run_passes(from, to);
    }
    // Then help with the others' shares, from their ends.
    for (int other = 1; other < shares; ++other) {
      Share& s = share[(id + other) % shares];
      while (s.take_back(min_run, from, to)) {
        prefetch_run(from, to);
        run_passes(from, to);
      }
    }
  });
  if (prefetch.timed) {
    const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
    if (tuner.report(ahead, bytes, took.count())) log_prefetch_choice(bytes);
  }
#else
  (void)rows, (void)products;
  LUM_FAIL() << "internal: interleaved QMatMul needs x86-64";
#endif
}

}  // namespace luminal::cpugen

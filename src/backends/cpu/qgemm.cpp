// QMatMul on the CPU. Every block format decodes (qformats.hpp) into a common form —
// int8 values with a float scale and offset per 16 elements — so one integer dot
// product serves all formats. Threads split the weight rows; each decoded block is used
// by a tile of activation rows, or, for many rows, whole weight rows are decoded once.
// Weights the executable has interleaved (qinterleaved.hpp) take that path instead, for
// any number of rows: it outruns both of these.
#include "backends/cpu/qgemm.hpp"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "backends/cpu/gemm.hpp"
#include "backends/cpu/qactivations.hpp"
#include "backends/cpu/qformats.hpp"
#include "backends/cpu/simd.hpp"
#include "luminal/dtype.hpp"
#include "luminal/error.hpp"
#include "luminal/quant.hpp"

namespace luminal::cpugen {
namespace {

using namespace qformats;

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
void rows_portable(const uint8_t* w, int64_t j0, int64_t j1, int64_t n, int64_t k, const RowTile& t,
                   int64_t first, float* out) {
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

// kPredecoded: `pre` holds weight row j0 (and j1 == j0 + 1) already decoded. Otherwise
// each block is decoded as it is reached, its scales and offsets kept for the whole row:
// the offsets' share of each dot product, sum(b * activation sums), is taken at the end
// of the row in one vectorised pass.
template <class F, int kTile, bool kPredecoded = false>
LUM_AVX2 void rows_avx2(const uint8_t* w, int64_t j0, int64_t j1, int64_t n, int64_t k,
                        const RowTile& t, int64_t first, float* out,
                        const PredecodedRow* pre = nullptr) {
  constexpr bool kUnsigned = F::kUnsigned;
  alignas(32) int8_t scratch[F::kElems];
  float s_local[F::kElems / 16];
  std::vector<float> b_row;  // the row's offsets, when not predecoded
  if (F::kOffset && !kPredecoded) b_row.assign(static_cast<size_t>(k / 16), 0.0f);
  const float* b_all = kPredecoded ? pre->b.data() : b_row.data();
  const int64_t blocks = k / static_cast<int64_t>(F::kElems);
  const __m256i ones = _mm256_set1_epi16(1);
  for (int64_t j = j0; j < j1; ++j) {
    __m256 acc[kTile];
    for (auto& a : acc) a = _mm256_setzero_ps();
    const uint8_t* row = w + j * blocks * static_cast<int64_t>(F::kBytes);
    for (int64_t blk = 0; blk < blocks; ++blk) {
      const int64_t base = blk * static_cast<int64_t>(F::kElems);
      const int8_t* q;
      const float* s = s_local;
      if constexpr (kPredecoded) {
        q = pre->q.data() + base;
        s = pre->s.data() + base / 16;
      } else {
        q = decode_avx2(F{}, row + blk * static_cast<int64_t>(F::kBytes), scratch, s_local,
                        F::kOffset ? b_row.data() + base / 16 : nullptr);
      }
      for (size_t c = 0; c < F::kElems / 32; ++c) {
        const __m256i wv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + 32 * c));
        // maddubs multiplies unsigned by signed bytes: unsigned weights go in as they are;
        // signed ones as |w| against the activations given w's sign.
        const __m256i wop = kUnsigned ? wv : _mm256_sign_epi8(wv, wv);
        const float* da = &t.d[0][base / 32 + static_cast<int64_t>(c)];
        for (int r = 0; r < kTile; ++r) {
          const __m256i xv =
              _mm256_loadu_si256(reinterpret_cast<const __m256i*>(t.q[r] + base + 32 * c));
          const __m256i p16 = _mm256_maddubs_epi16(wop, kUnsigned ? xv : _mm256_sign_epi8(xv, wv));
          const __m256i p32 = _mm256_madd_epi16(p16, ones);  // lanes 0-3: elements 0-15
          const float dr = r == 0 ? *da : t.d[r][base / 32 + static_cast<int64_t>(c)];
          const __m256 scale = F::kScalePer32 ? _mm256_set1_ps(s[2 * c] * dr)
                                              : _mm256_set_m128(_mm_set1_ps(s[2 * c + 1] * dr),
                                                                _mm_set1_ps(s[2 * c] * dr));
          acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p32), scale, acc[r]);
        }
      }
    }
    for (int r = 0; r < kTile; ++r)
      out[(first + r) * n + j] =
          hsum(acc[r]) + (F::kOffset ? dot_f32(b_all, t.sum16[r], k / 16, true) : 0.0f);
  }
}

// A weight row decoded to f32 through the common form: the sgemm path's panels.
template <class F>
LUM_AVX2 void decode_row_f32_avx2(const uint8_t* row, int64_t k, float* out) {
  alignas(32) int8_t scratch[F::kElems];
  float s[F::kElems / 16] = {}, b[F::kElems / 16] = {};
  const int64_t blocks = k / static_cast<int64_t>(F::kElems);
  for (int64_t blk = 0; blk < blocks; ++blk) {
    const int8_t* q = decode_avx2(F{}, row + blk * static_cast<int64_t>(F::kBytes), scratch, s, b);
    float* o = out + blk * static_cast<int64_t>(F::kElems);
    for (size_t g = 0; g < F::kElems / 16; ++g) {
      const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(q + 16 * g));
      const size_t at = F::kScalePer32 ? g & ~size_t{1} : g;  // per-32 formats fill s[even]
      const __m256 sv = _mm256_set1_ps(s[at]), bv = _mm256_set1_ps(b[at]);
      const __m256 lo = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v));
      const __m256 hi = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(v, 8)));
      _mm256_storeu_ps(o + 16 * g, _mm256_fmadd_ps(lo, sv, bv));
      _mm256_storeu_ps(o + 16 * g + 8, _mm256_fmadd_ps(hi, sv, bv));
    }
  }
}

#endif

// Calls fn(F{}) with the decoder of a block format; false if there is none.
template <class Fn>
bool with_format(uint32_t format, Fn&& fn) {
  switch (static_cast<GgmlType>(format)) {
    case GgmlType::Q8_0:
      return fn(Q8_0{}), true;
    case GgmlType::Q4_0:
      return fn(Q4<false>{}), true;
    case GgmlType::Q4_1:
      return fn(Q4<true>{}), true;
    case GgmlType::Q5_0:
      return fn(Q5<false>{}), true;
    case GgmlType::Q5_1:
      return fn(Q5<true>{}), true;
    case GgmlType::Q4_K:
      return fn(QK<false>{}), true;
    case GgmlType::Q5_K:
      return fn(QK<true>{}), true;
    case GgmlType::Q6_K:
      return fn(Q6_K{}), true;
    default:
      return false;
  }
}

// All activation rows against all weight rows for one block format; threads split the
// weight rows.
template <class F>
void run_format(const uint8_t* w, int64_t n, int64_t k, const QuantizedRows& x, int64_t rows,
                float* out) {
  const bool avx2 = use_avx2();
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
        const int64_t row_bytes =
            k / static_cast<int64_t>(F::kElems) * static_cast<int64_t>(F::kBytes);
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

// One weight row as f32: F16 and BF16 widened with vector instructions, other formats
// through luminal::dequantize.
void decode_row(uint32_t format, const uint8_t* row, int64_t k, float* dst, bool avx2) {
  const auto* half = reinterpret_cast<const uint16_t*>(row);
  switch (static_cast<GgmlType>(format)) {
    case GgmlType::F16:
      return widen_f16(half, k, dst, avx2);
    case GgmlType::BF16:
      return widen_bf16(half, k, dst, avx2);
    default:
      dequantize(format, reinterpret_cast<const std::byte*>(row), static_cast<size_t>(k), dst);
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
  for (int64_t i = 0; i < m; ++i)
    std::memcpy(a.data() + i * k, rows[static_cast<size_t>(i)], static_cast<size_t>(k) * 4);
  constexpr int64_t kPanel = 256;  // weight rows per decoded panel (~2 MB at K = 2048)
  std::vector<float> panel(static_cast<size_t>(std::min(n, kPanel) * k));
  const bool avx2 = use_avx2();
  for (int64_t j0 = 0; j0 < n; j0 += kPanel) {
    const int64_t p = std::min(kPanel, n - j0);
#pragma omp parallel for schedule(static)
    for (int64_t j = 0; j < p; ++j) {
      const uint8_t* row = w + (j0 + j) * static_cast<int64_t>(row_bytes);
      float* dst = panel.data() + j * k;
#if defined(__x86_64__)
      if (avx2 &&
          with_format(format, [&](auto f) { decode_row_f32_avx2<decltype(f)>(row, k, dst); }))
        continue;
#endif
      decode_row(format, row, k, dst, avx2);
    }
    sgemm_columns(CblasNoTrans, CblasTrans, m, p, k, a.data(), k, panel.data(), k, k, out + j0, n);
  }
}

}  // namespace

// The products of the rows and of their int8 rounding errors (themselves quantised), in one
// pass over the weights, each pair summed: two int8 terms hold about 15 bits of each value.
void residual_products(const std::vector<const float*>& rows, int64_t k,
                       std::span<const InterleavedProduct> products) {
  QuantizedRows x;
  quantize_rows(rows, k, x);
  const size_t m = rows.size(), kk = static_cast<size_t>(k);
  std::vector<float> residual(m * kk);
  std::vector<const float*> both_rows = rows;
  for (size_t r = 0; r < m; ++r) {
    for (size_t i = 0; i < kk; ++i) {
      const size_t at = r * kk + i;
      residual[at] = rows[r][i] - x.d[at / 32] * static_cast<float>(x.q[at]);
    }
    both_rows.push_back(residual.data() + r * kk);
  }
  std::vector<std::vector<float>> sums(products.size());
  std::vector<InterleavedProduct> both;
  for (size_t p = 0; p < products.size(); ++p) {
    sums[p].resize(2 * m * static_cast<size_t>(products[p].w->n));
    both.push_back({products[p].w, sums[p].data()});
  }
  qmatmul_interleaved(both_rows, both);
  for (size_t p = 0; p < products.size(); ++p) {
    const size_t half = m * static_cast<size_t>(products[p].w->n);
    for (size_t i = 0; i < half; ++i) products[p].out[i] = sums[p][i] + sums[p][half + i];
  }
}

void qmatmul(const ConcreteView& a, const float* a_data, uint32_t format, const uint8_t* w,
             int64_t n, int64_t k, float* out, bool int8_activations,
             const InterleavedWeights* interleaved, bool residual) {
  size_t block_elems = 0, block_bytes = 0;
  LUM_CHECK(ggml_block_layout(format, block_elems, block_bytes))
      << "QMatMul: unsupported weight format " << ggml_type_name(format);
  const std::vector<const float*> rows = activation_rows(a, a_data);
  const auto nr = static_cast<int64_t>(rows.size());
  const size_t row_bytes = static_cast<size_t>(k) / block_elems * block_bytes;
  if (nr == 0 || n == 0) return;
  const bool f16 = format == static_cast<uint32_t>(GgmlType::F16),
             bf16 = format == static_cast<uint32_t>(GgmlType::BF16);
  if ((f16 || bf16) && nr < kBlasRows) {  // 16-bit weights widened inside the dot products
    const bool avx2 = use_avx2();
#pragma omp parallel for schedule(static)
    for (int64_t j = 0; j < n; ++j) {
      const auto* row = reinterpret_cast<const uint16_t*>(w + j * row_bytes);
      for (int64_t i = 0; i < nr; ++i)
        out[i * n + j] = f16 ? dot_f16(row, rows[i], k, avx2) : dot_bf16(row, rows[i], k, avx2);
    }
    return;
  }
  if (block_elems == 1 || !int8_activations) {  // decode each row exactly, f32 dot products
    const bool avx2 = use_avx2();
#pragma omp parallel
    {
      std::vector<float> wrow(static_cast<size_t>(k));
#pragma omp for schedule(static)
      for (int64_t j = 0; j < n; ++j) {
        decode_row(format, w + j * row_bytes, k, wrow.data(), avx2);
        for (int64_t i = 0; i < nr; ++i) out[i * n + j] = dot_f32(wrow.data(), rows[i], k, avx2);
      }
    }
    return;
  }
  if (interleaved) {
    const InterleavedProduct product{interleaved, out};
    if (residual) return residual_products(rows, k, {&product, 1});
    return qmatmul_interleaved(rows, {&product, 1});
  }
  if (nr >= kBlasRows) return dequantized_sgemm(rows, format, w, n, k, row_bytes, out);
  LUM_CHECK(k % 32 == 0) << "QMatMul: K = " << k << " is not a multiple of 32";
  QuantizedRows x;
  quantize_rows(rows, k, x);
  const bool known =
      with_format(format, [&](auto f) { run_format<decltype(f)>(w, n, k, x, nr, out); });
  LUM_CHECK(known) << "QMatMul: no kernel for " << ggml_type_name(format);
}

void qmatmul_group(const ConcreteView& a, const float* a_data,
                   std::span<const InterleavedProduct> products, bool residual) {
  const std::vector<const float*> rows = activation_rows(a, a_data);
  if (rows.empty()) return;
  if (residual) return residual_products(rows, products[0].w->k, products);
  qmatmul_interleaved(rows, products);
}

}  // namespace luminal::cpugen

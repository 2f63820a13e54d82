// Register-blocked AVX2 kernels for a few rows of A (up to four) against a B read once where
// it lies, f32 or f16 (private to src/backends/cpu). The decode MatMul (gemm.cpp) and the
// Attention kernel (attention.cpp) both run on them; B's columns or rows are reached through
// a function from index to address, so the same kernel walks a strided matrix or a list of
// kept cache rows.
#pragma once

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "backends/cpu/simd.hpp"

namespace luminal::cpugen {

/// Calls run(std::integral_constant<int, R>{}) for R = rows (1 to 4).
template <class Run>
void with_rows(int64_t rows, Run&& run) {
  switch (rows) {
    case 1:
      return run(std::integral_constant<int, 1>{});
    case 2:
      return run(std::integral_constant<int, 2>{});
    case 3:
      return run(std::integral_constant<int, 3>{});
    default:
      return run(std::integral_constant<int, 4>{});
  }
}

#if defined(__x86_64__)
/// c[r * ldc + j] = sum_p rows[r * k + p] * column(j)[p] for j in [j0, j1): R rows of A
/// (K contiguous) against columns of B that run along K (keys), each read once and
/// widened on the way. Two columns per pass, so each load of A serves two FMAs (with one,
/// loads of A outnumbered the FMAs).
template <int R, class ColumnAt>
LUM_AVX2 void dot_columns(const float* rows, int64_t k, ColumnAt&& column, int64_t j0, int64_t j1,
                          float* c, int64_t ldc) {
  const int64_t wide = k / 8 * 8;
  for (int64_t j = j0; j < j1; j += 2) {
    const bool pair = j + 1 < j1;
    const auto* c0 = column(j);
    const auto* c1 = pair ? column(j + 1) : c0;
    __m256 a0[R], a1[R];  // separate arrays, loops unrolled: GCC keeps them in registers
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) a0[r] = a1[r] = _mm256_setzero_ps();
    for (int64_t p = 0; p < wide; p += 8) {
      const __m256 x0 = load8(c0 + p), x1 = load8(c1 + p);
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) {
        const __m256 a = _mm256_loadu_ps(rows + r * k + p);
        a0[r] = _mm256_fmadd_ps(a, x0, a0[r]);
        a1[r] = _mm256_fmadd_ps(a, x1, a1[r]);
      }
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      float s0 = hsum(a0[r]), s1 = hsum(a1[r]);
      for (int64_t p = wide; p < k; ++p) {
        s0 += rows[r * k + p] * load1(c0 + p);
        s1 += rows[r * k + p] * load1(c1 + p);
      }
      c[r * ldc + j] = s0;
      if (pair) c[r * ldc + j + 1] = s1;
    }
  }
}

/// c[r * ldc + j] = sum_{p in [p0, p1)} rows[r * k + p] * row(p)[j] for j < n: R rows of A
/// against rows of B that run along N (values), 16 columns at a time summed in registers
/// down a chunk of B's rows small enough to stay in L1 while every 16 columns take their
/// turn (passes over a whole long cache fell out of L2), the sums carried from chunk to
/// chunk in c. No rows: c is zero.
template <int R, class RowAt>
LUM_AVX2 void row_panels(const float* rows, int64_t k, RowAt&& row, int64_t p0, int64_t p1,
                         int64_t n, float* c, int64_t ldc) {
  constexpr int64_t kChunk = 32;
  const int64_t wide = n / 16 * 16, row_bytes = n * static_cast<int64_t>(sizeof(*row(p0)));
  // The next chunk is asked for while this one is summed, a few rows with each 16
  // columns: asked for all at once, most of the requests found the core's miss queue
  // full and were dropped, and the loads then waited on memory half the time.
  const int64_t blocks = std::max<int64_t>(1, n / 16),
                rows_per_block = (kChunk + blocks - 1) / blocks;
  for (int64_t pc = p0; pc < p1; pc += kChunk) {
    const int64_t pe = std::min(p1, pc + kChunk), next_end = std::min(p1, pe + kChunk);
    for (int64_t j = 0; j < wide; j += 16) {
      const int64_t ask = pe + j / 16 * rows_per_block;
      for (int64_t p = ask; p < std::min(next_end, ask + rows_per_block); ++p)
        for (int64_t at = 0; at < row_bytes; at += 64)
          _mm_prefetch(reinterpret_cast<const char*>(row(p)) + at, _MM_HINT_T0);
      __m256 lo[R], hi[R];
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) {
        lo[r] = pc == p0 ? _mm256_setzero_ps() : _mm256_loadu_ps(c + r * ldc + j);
        hi[r] = pc == p0 ? _mm256_setzero_ps() : _mm256_loadu_ps(c + r * ldc + j + 8);
      }
      for (int64_t p = pc; p < pe; ++p) {
        const auto* src = row(p) + j;
        const __m256 v0 = load8(src), v1 = load8(src + 8);
#pragma GCC unroll 4
        for (int r = 0; r < R; ++r) {
          const __m256 a = _mm256_broadcast_ss(rows + r * k + p);
          lo[r] = _mm256_fmadd_ps(a, v0, lo[r]);
          hi[r] = _mm256_fmadd_ps(a, v1, hi[r]);
        }
      }
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) {
        _mm256_storeu_ps(c + r * ldc + j, lo[r]);
        _mm256_storeu_ps(c + r * ldc + j + 8, hi[r]);
      }
    }
    for (int64_t j = wide; j < n; ++j)  // columns past the last 16
      for (int r = 0; r < R; ++r) {
        float sum = pc == p0 ? 0.0f : c[r * ldc + j];
        for (int64_t p = pc; p < pe; ++p) sum += rows[r * k + p] * load1(row(p) + j);
        c[r * ldc + j] = sum;
      }
  }
  if (p0 == p1)
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) std::fill(c + r * ldc, c + r * ldc + n, 0.0f);
}
#endif

}  // namespace luminal::cpugen

// The MatMul kernel on the CPU: one OpenBLAS sgemm per batch entry, straight from the
// input views' strides, or for a few rows (decoding) a kernel that reads B once in its
// own layout, f32 or f16 (private to src/backends/cpu).
#pragma once

#include <cblas.h>

#include "luminal/view.hpp"

namespace luminal::cpugen {

/// OpenBLAS runs single-threaded inside the backend: kernels already run on OpenMP's
/// threads, and a second pool competing for the same cores slows both. Called before
/// any BLAS use.
void single_threaded_blas();

/// C[m, n] (row-major, row stride ldc) = op(A) op(B) with one sgemm per thread over a share of
/// the columns; column j of op(B) starts at b + j * b_col_stride.
void sgemm_columns(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int64_t m, int64_t n, int64_t k,
                   const float* a, int64_t lda, const float* b, int64_t ldb, int64_t b_col_stride,
                   float* c, int64_t ldc);

/// a and b are [batch..., M, K, N] views (a broadcast along N, b along M) over the raw
/// f32 buffers; writes the row-major [batch..., M, N] result to `out`.
void matmul_f32(const ConcreteView& a, const float* a_data, const ConcreteView& b,
                const float* b_data, float* out);

/// The same product with b stored as f16 (a half-precision KV cache), read as it is.
void matmul_f32_f16(const ConcreteView& a, const float* a_data, const ConcreteView& b,
                    const uint16_t* b_data, float* out);

}  // namespace luminal::cpugen

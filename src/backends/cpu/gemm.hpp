// The MatMul kernel on the CPU: one OpenBLAS sgemm per batch entry, straight from the
// input views' strides, or for a few rows (decoding) a kernel that reads B once in its
// own layout, f32 or f16 (private to src/backends/cpu). Between the two, for f32
// products of a few tens of rows, the search decides.
#pragma once

#include <cblas.h>

#include <array>
#include <functional>
#include <map>

#include "luminal/view.hpp"
#include "runtime/search.hpp"

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

/// For f32 products with a few tens of rows, which of the few-rows kernel and BLAS runs
/// is searched per product shape (the cost model's pick: the few-rows kernel up to 8
/// rows) and remembered for the executable.
class ProductChoices {
 public:
  explicit ProductChoices(runtime::Searcher& searcher) : searcher_(searcher) {}
  /// A product's shape: rows, inner dim, columns, batch, and A's and B's strides.
  using Shape = std::array<int64_t, 8>;
  /// Whether the product of `shape` runs on the few-rows kernel: the remembered choice,
  /// else the search's winner between `few` and `blas`, each writing `numel` floats at
  /// `out`, `pick` being the cost model's choice.
  bool few_rows(const Shape& shape, bool pick, const std::function<void()>& few,
                const std::function<void()>& blas, float* out, size_t numel);

 private:
  runtime::Searcher& searcher_;
  std::map<Shape, bool> chosen_;
};

/// a and b are [batch..., M, K, N] views (a broadcast along N, b along M) over the raw
/// f32 buffers; writes the row-major [batch..., M, N] result to `out`. With `choices`,
/// products of up to 64 rows may be searched.
void matmul_f32(const ConcreteView& a, const float* a_data, const ConcreteView& b,
                const float* b_data, float* out, ProductChoices* choices = nullptr);

/// The same product with b stored as f16 (a half-precision KV cache), read as it is.
void matmul_f32_f16(const ConcreteView& a, const float* a_data, const ConcreteView& b,
                    const uint16_t* b_data, float* out);

}  // namespace luminal::cpugen

// MatMul through OpenBLAS.
#include "backends/cpu/gemm.hpp"

#include <cblas.h>
#include <omp.h>

#include <algorithm>

namespace luminal::cpugen {
namespace {

// Leading dimensions for a row-major BLAS call over a strided matrix (rows x cols with
// strides rs, cs): no-transpose if columns are contiguous, transpose if rows are.
bool layout(int64_t rows, int64_t cols, int64_t rs, int64_t cs, CBLAS_TRANSPOSE& t, int64_t& ld) {
  if (cs == 1 && (rows == 1 || rs >= cols)) {
    t = CblasNoTrans;
    ld = std::max<int64_t>(rows == 1 ? cols : rs, 1);
    return true;
  }
  if (rs == 1 && (cols == 1 || cs >= rows)) {
    t = CblasTrans;
    ld = std::max<int64_t>(cols == 1 ? rows : cs, 1);
    return true;
  }
  return false;
}

}  // namespace

void single_threaded_blas() {
  static const bool done = [] {
    openblas_set_num_threads(1);
    return true;
  }();
  (void)done;
}

void sgemm_columns(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int64_t m, int64_t n, int64_t k,
                   const float* a, int64_t lda, const float* b, int64_t ldb, int64_t b_col_stride,
                   float* c, int64_t ldc) {
  single_threaded_blas();
  const auto call = [&](int64_t j0, int64_t j1) {
    if (j1 <= j0) return;
    cblas_sgemm(CblasRowMajor, ta, tb, static_cast<blasint>(m), static_cast<blasint>(j1 - j0),
                static_cast<blasint>(k), 1.0f, a, static_cast<blasint>(lda), b + j0 * b_col_stride,
                static_cast<blasint>(ldb), 0.0f, c + j0, static_cast<blasint>(ldc));
  };
  // Enough work for every thread: split the columns, 16 at least per thread.
  const int threads = omp_get_max_threads();
  if (threads == 1 || n < 32 * threads || m * n * k < (1 << 18)) return call(0, n);
#pragma omp parallel
  {
    const int64_t t = omp_get_thread_num(), count = omp_get_num_threads();
    const int64_t step = (n + count - 1) / count;
    const int64_t j0 = std::min(n, (t * step + 15) / 16 * 16);
    const int64_t j1 = t + 1 == count ? n : std::min(n, ((t + 1) * step + 15) / 16 * 16);
    call(j0, j1);
  }
}

void matmul_f32(const ConcreteView& a, const float* ad, const ConcreteView& b, const float* bd,
                float* out) {
  const size_t r = a.dims.size();
  const int64_t k = a.dims[r - 2], n = a.dims[r - 1];
  const int64_t sam = a.strides[r - 3], sak = a.strides[r - 2];
  const int64_t sbk = b.strides[r - 2], sbn = b.strides[r - 1];
  // Trailing batch dims over which B is shared (keys and values broadcast across the
  // query heads of a group) fold into A's rows when those continue at A's row stride:
  // one GEMM with more rows instead of several skinny ones (decoding has one row).
  int64_t m = a.dims[r - 3];
  size_t batch_dims = r - 3;
  for (; batch_dims > 0; --batch_dims) {
    const size_t d = batch_dims - 1;
    if (a.dims[d] != 1 && (b.strides[d] != 0 || a.strides[d] != m * sam)) break;
    m *= a.dims[d];
  }
  CBLAS_TRANSPOSE ta = CblasNoTrans, tb = CblasNoTrans;
  int64_t lda = 1, ldb = 1;
  const bool blas = layout(m, k, sam, sak, ta, lda) && layout(k, n, sbk, sbn, tb, ldb);
  int64_t batch = 1;
  for (size_t d = 0; d < batch_dims; ++d) batch *= a.dims[d];
  std::vector<int64_t> idx(batch_dims, 0);
  for (int64_t bi = 0; bi < batch; ++bi) {
    int64_t oa = a.offset, ob = b.offset;
    for (size_t d = 0; d < idx.size(); ++d) {
      oa += idx[d] * a.strides[d];
      ob += idx[d] * b.strides[d];
    }
    float* c = out + bi * m * n;
    if (blas && m > 0 && n > 0) {
      if (k == 0) {
        std::fill(c, c + m * n, 0.0f);
      } else {
        sgemm_columns(ta, tb, m, n, k, ad + oa, lda, bd + ob, ldb, sbn, c, n);
      }
    } else {
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) {
          float acc = 0;
          for (int64_t p = 0; p < k; ++p)
            acc += ad[oa + i * sam + p * sak] * bd[ob + p * sbk + j * sbn];
          c[i * n + j] = acc;
        }
    }
    for (size_t d = idx.size(); d-- > 0;) {
      if (++idx[d] < a.dims[d]) break;
      idx[d] = 0;
    }
  }
}

}  // namespace luminal::cpugen

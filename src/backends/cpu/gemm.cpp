// MatMul through OpenBLAS.
#include "backends/cpu/gemm.hpp"

#include <cblas.h>

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

void matmul_f32(const ConcreteView& a, const float* ad, const ConcreteView& b, const float* bd,
                float* out) {
  const size_t r = a.dims.size();
  const int64_t m = a.dims[r - 3], k = a.dims[r - 2], n = a.dims[r - 1];
  const int64_t sam = a.strides[r - 3], sak = a.strides[r - 2];
  const int64_t sbk = b.strides[r - 2], sbn = b.strides[r - 1];
  CBLAS_TRANSPOSE ta = CblasNoTrans, tb = CblasNoTrans;
  int64_t lda = 1, ldb = 1;
  const bool blas = layout(m, k, sam, sak, ta, lda) && layout(k, n, sbk, sbn, tb, ldb);
  int64_t batch = 1;
  for (size_t d = 0; d + 3 < r; ++d) batch *= a.dims[d];
  std::vector<int64_t> idx(r > 3 ? r - 3 : 0, 0);
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
        cblas_sgemm(CblasRowMajor, ta, tb, static_cast<blasint>(m), static_cast<blasint>(n),
                    static_cast<blasint>(k), 1.0f, ad + oa, static_cast<blasint>(lda), bd + ob,
                    static_cast<blasint>(ldb), 0.0f, c, static_cast<blasint>(n));
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

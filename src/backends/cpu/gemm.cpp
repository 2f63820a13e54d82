// MatMul through OpenBLAS, and a kernel of its own for a few rows of A.
#include "backends/cpu/gemm.hpp"

#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <type_traits>
#include <vector>

#include "backends/cpu/few_rows.hpp"
#include "backends/cpu/simd.hpp"
#include "luminal/dtype.hpp"

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

// The product as matrices: [batch..., M, K, N] with the trailing batch dims over which B
// is shared (keys and values broadcast across the query heads of a group) folded into
// A's rows when those continue at A's row stride: one product with more rows instead of
// several skinny ones (decoding has one row).
struct Folded {
  int64_t m, k, n, sam, sak, sbk, sbn;
  size_t batch_dims;
  int64_t batch;
};

Folded fold(const ConcreteView& a, const ConcreteView& b) {
  const size_t r = a.dims.size();
  Folded f{a.dims[r - 3],
           a.dims[r - 2],
           a.dims[r - 1],
           a.strides[r - 3],
           a.strides[r - 2],
           b.strides[r - 2],
           b.strides[r - 1],
           r - 3,
           1};
  for (; f.batch_dims > 0; --f.batch_dims) {
    const size_t d = f.batch_dims - 1;
    if (a.dims[d] != 1 && (b.strides[d] != 0 || a.strides[d] != f.m * f.sam)) break;
    f.m *= a.dims[d];
  }
  for (size_t d = 0; d < f.batch_dims; ++d) f.batch *= a.dims[d];
  return f;
}

// Calls body(entry, a_offset, b_offset) for every batch entry left after folding.
template <class Body>
void for_each_batch(const ConcreteView& a, const ConcreteView& b, const Folded& f, Body&& body) {
  std::vector<int64_t> idx(f.batch_dims, 0);
  for (int64_t bi = 0; bi < f.batch; ++bi) {
    int64_t oa = a.offset, ob = b.offset;
    for (size_t d = 0; d < idx.size(); ++d) {
      oa += idx[d] * a.strides[d];
      ob += idx[d] * b.strides[d];
    }
    body(bi, oa, ob);
    for (size_t d = idx.size(); d-- > 0;) {
      if (++idx[d] < a.dims[d]) break;
      idx[d] = 0;
    }
  }
}

// ---- A few rows of A (decoding) -------------------------------------------------------
// BLAS would pack B before multiplying; with a handful of rows that copy costs as much as
// the product. This kernel reads each element of B once, where it lies, widening f16 on
// the way, and uses it for every row of A.

constexpr int64_t kFewRows = 8;

// c = the sum of `threads` partial products of `size` elements each, laid end to end.
void add_partials(const std::vector<float>& partial, int threads, int64_t size, float* c) {
  std::copy(partial.begin(), partial.begin() + size, c);
  for (int t = 1; t < threads; ++t)
    for (int64_t e = 0; e < size; ++e) c[e] += partial[t * size + e];
}

#if defined(__x86_64__)
// Up to four rows at a time through the kernels of few_rows.hpp.
template <class Kernel>
LUM_AVX2 void by_fours(int64_t m, int64_t k, const float* rows, float* c, int64_t ldc,
                       Kernel&& run) {
  for (int64_t i = 0; i < m; i += 4)
    with_rows(std::min<int64_t>(4, m - i), [&](auto r) { run(r, rows + i * k, c + i * ldc); });
}

// few_rows with AVX2 where B's elements along the inner loop are contiguous; false where
// they are not.
template <class BT>
LUM_AVX2 bool few_rows_avx2(const Folded& f, const std::vector<float>& rows, const BT* b, float* c,
                            int threads) {
  const int64_t m = f.m, k = f.k, n = f.n;
  if (f.sbk == 1) {
#pragma omp parallel num_threads(threads)
    {
      const int64_t t = omp_get_thread_num(), count = omp_get_num_threads();
      const int64_t j0 = n * t / count, j1 = n * (t + 1) / count;
      by_fours(m, k, rows.data(), c, n, [&](auto r, const float* a, float* out) {
        dot_columns<decltype(r)::value>(
            a, k, [&](int64_t j) { return b + j * f.sbn; }, j0, j1, out, n);
      });
    }
    return true;
  }
  if (f.sbn != 1) return false;
  // Each thread sums its own run of B's rows (one stream through memory) into a partial
  // product of its own; the partials are added at the end.
  std::vector<float> partial(static_cast<size_t>(threads * m * n));
#pragma omp parallel num_threads(threads)
  {
    const int64_t t = omp_get_thread_num(), count = omp_get_num_threads();
    const int64_t p0 = k * t / count, p1 = k * (t + 1) / count;
    float* mine = partial.data() + t * m * n;
    by_fours(m, k, rows.data(), mine, n, [&](auto r, const float* a, float* out) {
      row_panels<decltype(r)::value>(
          a, k, [&](int64_t p) { return b + p * f.sbk; }, p0, p1, n, out, n);
    });
  }
  add_partials(partial, threads, m * n, c);
  return true;
}
#endif

// n values of B from p at stride s, as contiguous f32: in place where they already are,
// else widened or gathered into tmp.
const float* run_of(const float* p, int64_t s, int64_t n, float* tmp, bool) {
  if (s == 1) return p;
  for (int64_t i = 0; i < n; ++i) tmp[i] = p[i * s];
  return tmp;
}
const float* run_of(const uint16_t* p, int64_t s, int64_t n, float* tmp, bool avx2) {
  if (s == 1) {
    widen_f16(p, n, tmp, avx2);
    return tmp;
  }
  for (int64_t i = 0; i < n; ++i) tmp[i] = f16_bits_to_float(p[i * s]);
  return tmp;
}

// c[m, n] = A B for one batch entry, A at `a` with strides (sam, sak), B at `b`.
template <class BT>
void few_rows(const Folded& f, const float* a, const BT* b, float* c) {
  const int64_t m = f.m, k = f.k, n = f.n;
  const bool avx2 = use_avx2();
  std::vector<float> rows(static_cast<size_t>(m * k));  // A, K-contiguous
  for (int64_t i = 0; i < m; ++i)
    for (int64_t p = 0; p < k; ++p) rows[i * k + p] = a[i * f.sam + p * f.sak];
  const int threads = m * n * k >= (1 << 16) ? omp_get_max_threads() : 1;
#if defined(__x86_64__)
  if (avx2 && few_rows_avx2(f, rows, b, c, threads)) return;
#endif
  if (f.sbk == 1) {
    // Each column of B lies along K (keys, weights read as W^T): one dot per row of A.
#pragma omp parallel num_threads(threads)
    {
      std::vector<float> tmp(static_cast<size_t>(k));
#pragma omp for schedule(static)
      for (int64_t j = 0; j < n; ++j) {
        const float* col = run_of(b + j * f.sbn, 1, k, tmp.data(), avx2);
        for (int64_t i = 0; i < m; ++i) c[i * n + j] = dot_f32(rows.data() + i * k, col, k, avx2);
      }
    }
    return;
  }
  // Rows of B lie along N (values): each thread adds its share of K's rows, scaled by A's
  // entries, into a partial product of its own; the partials are summed at the end.
  std::vector<float> partial(static_cast<size_t>(threads * m * n), 0.0f);
#pragma omp parallel num_threads(threads)
  {
    const int64_t t = omp_get_thread_num(), count = omp_get_num_threads();
    const int64_t p0 = k * t / count, p1 = k * (t + 1) / count;
    float* acc = partial.data() + t * m * n;
    std::vector<float> tmp(static_cast<size_t>(n));
    for (int64_t p = p0; p < p1; ++p) {
      const float* row = run_of(b + p * f.sbk, f.sbn, n, tmp.data(), avx2);
      for (int64_t i = 0; i < m; ++i) axpy(rows[i * k + p], row, acc + i * n, n, avx2);
    }
  }
  add_partials(partial, threads, m * n, c);
}

// Products with no output, an empty sum, or (`few`) rows for few_rows; false leaves the
// product to the caller.
template <class BT>
bool empty_or_few_rows(const ConcreteView& a, const float* ad, const ConcreteView& b, const BT* bd,
                       const Folded& f, float* out, bool few) {
  const int64_t size = f.m * f.n;  // of one batch entry's output
  if (size == 0) return true;
  if (f.k == 0) {
    std::fill(out, out + f.batch * size, 0.0f);
    return true;
  }
  if (!few) return false;
  for_each_batch(a, b, f, [&](int64_t bi, int64_t oa, int64_t ob) {
    few_rows(f, ad + oa, bd + ob, out + bi * size);
  });
  return true;
}

// Rows up to which f32 products are searched, and the multiply-adds below which they are
// not (the choice then costs more than it can save).
constexpr int64_t kSearchedRows = 64;
constexpr int64_t kSearchedMultiplyAdds = 1 << 20;

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

bool ProductChoices::few_rows(const Shape& shape, bool pick, const std::function<void()>& few,
                              const std::function<void()>& blas, float* out, size_t numel) {
  if (const auto it = chosen_.find(shape); it != chosen_.end()) return it->second;
  runtime::SearchProblem p;
  const auto& [m, k, n, batch, sam, sak, sbk, sbn] = shape;
  p.signature = "matmul f32 m=" + std::to_string(m) + " k=" + std::to_string(k) +
                " n=" + std::to_string(n) + " batch=" + std::to_string(batch) + " a(" +
                std::to_string(sam) + "," + std::to_string(sak) + ") b(" + std::to_string(sbk) +
                "," + std::to_string(sbn) + ")";
  p.candidates = {{pick ? "few rows" : "blas", pick ? few : blas},
                  {pick ? "blas" : "few rows", pick ? blas : few}};
  std::vector<float> reference;
  p.keep_reference = [&] { reference.assign(out, out + numel); };
  // Another order of summation: a few ulps of the largest terms.
  p.mismatch = [&] { return runtime::output_mismatch(out, reference, 1e-4); };
  const size_t winner = searcher_.choose(p).winner;
  return chosen_[shape] = winner == 0 ? pick : !pick;
}

void matmul_f32(const ConcreteView& a, const float* ad, const ConcreteView& b, const float* bd,
                float* out, ProductChoices* choices) {
  const Folded f = fold(a, b);
  const int64_t m = f.m, k = f.k, n = f.n;
  CBLAS_TRANSPOSE ta = CblasNoTrans, tb = CblasNoTrans;
  int64_t lda = 1, ldb = 1;
  const bool blas = layout(m, k, f.sam, f.sak, ta, lda) && layout(k, n, f.sbk, f.sbn, tb, ldb);
  auto run_blas = [&] {
    for_each_batch(a, b, f, [&](int64_t bi, int64_t oa, int64_t ob) {
      sgemm_columns(ta, tb, m, n, k, ad + oa, lda, bd + ob, ldb, f.sbn, out + bi * m * n, n);
    });
  };
  bool few = m <= kFewRows;
  if (choices && blas && m > 1 && m <= kSearchedRows &&
      m * n * k * f.batch >= kSearchedMultiplyAdds) {
    few = choices->few_rows(
        {m, k, n, f.batch, f.sam, f.sak, f.sbk, f.sbn}, few,
        [&] { empty_or_few_rows(a, ad, b, bd, f, out, true); }, run_blas, out,
        static_cast<size_t>(f.batch * m * n));
  }
  if (empty_or_few_rows(a, ad, b, bd, f, out, few)) return;
  if (blas) return run_blas();
  for_each_batch(a, b, f, [&](int64_t bi, int64_t oa, int64_t ob) {
    float* c = out + bi * m * n;
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        float acc = 0;
        for (int64_t p = 0; p < k; ++p)
          acc += ad[oa + i * f.sam + p * f.sak] * bd[ob + p * f.sbk + j * f.sbn];
        c[i * n + j] = acc;
      }
  });
}

void matmul_f32_f16(const ConcreteView& a, const float* ad, const ConcreteView& b,
                    const uint16_t* bd, float* out) {
  const Folded f = fold(a, b);
  if (empty_or_few_rows(a, ad, b, bd, f, out, f.m <= kFewRows)) return;
  // Many rows (a prompt): the product is compute-bound, so B's span is widened to f32
  // once and multiplied through BLAS.
  const auto range = b.physical_range();
  const int64_t lo = range ? range->first : 0, hi = range ? range->second + 1 : 0;
  std::vector<float> wide(static_cast<size_t>(hi - lo));
  run_of(bd + lo, 1, hi - lo, wide.data(), use_avx2());
  ConcreteView shifted = b;
  shifted.offset -= lo;
  matmul_f32(a, ad, shifted, wide.data(), out);
}

}  // namespace luminal::cpugen

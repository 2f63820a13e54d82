// The MatMul kernel op: reference semantics and the pattern check.
#include "luminal/compiler/matmul_op.hpp"

#include <algorithm>
#include <cmath>

#include "compiler/walks.hpp"
#include "luminal/quant.hpp"

namespace luminal::compiler {

namespace {

// out[batch.., i, j] = sum_p a[batch.., i, p, j] * b_at(batch, i, p, j), in double: `a`
// is the [batch..., M, K, N] operand read through its view; `b_at` reads the other.
template <class BAt>
Buffer sum_of_products(const Buffer& a, const std::vector<int64_t>& s, DType out_dtype, BAt b_at) {
  const size_t r = s.size();
  const int64_t m = s[r - 3], k = s[r - 2], n = s[r - 1];
  int64_t batch = 1;
  for (size_t d = 0; d + 3 < r; ++d) batch *= s[d];
  Buffer out(out_dtype, static_cast<size_t>(batch * m * n));
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double acc = 0;
        for (int64_t p = 0; p < k; ++p) {
          const auto at = static_cast<size_t>(((b * m + i) * k + p) * n + j);
          acc += a.get_f64(at) * b_at(at, j * k + p);
        }
        out.set_f64(static_cast<size_t>((b * m + i) * n + j), acc);
      }
  return out;
}

}  // namespace

Buffer MatMulOp::run(const std::vector<Buffer>& in, const std::vector<std::vector<int64_t>>& shapes,
                     const std::vector<int64_t>& /*out_shape*/, DType out_dtype) const {
  // Both inputs are [batch..., M, K, N] (already read through their views).
  return sum_of_products(in[0], shapes[0], out_dtype,
                         [&](size_t at, int64_t) { return in[1].get_f64(at); });
}

Buffer MatMulAddOp::run(const std::vector<Buffer>& in,
                        const std::vector<std::vector<int64_t>>& shapes,
                        const std::vector<int64_t>& /*out_shape*/, DType out_dtype) const {
  // The sum and its addends in double, rounded once to the output's type (as the
  // library's epilogue adds in its f32 accumulator before it stores).
  const Buffer y = sum_of_products(in[0], shapes[0], DType::F64,
                                   [&](size_t at, int64_t) { return in[1].get_f64(at); });
  Buffer out(out_dtype, y.numel());
  for (size_t i = 0; i < y.numel(); ++i) {
    double v = y.get_f64(i);
    for (size_t r = 2; r < in.size(); ++r) v += in[r].get_f64(i);
    out.set_f64(i, v);
  }
  return out;
}

Buffer WindowMatMulOp::run(const std::vector<Buffer>& in,
                           const std::vector<std::vector<int64_t>>& shapes,
                           const std::vector<int64_t>& /*out_shape*/, DType out_dtype) const {
  // The left operand's [batch..., R.., C.., N] elements lie in the order of the right
  // operand's [batch..., M, K, N].
  const Buffer y = sum_of_products(in[0], shapes[1], out_dtype,
                                   [&](size_t at, int64_t) { return in[1].get_f64(at); });
  if (!transposed) return y;
  const std::vector<int64_t>& s = shapes[1];
  const size_t r = s.size();
  const int64_t m = s[r - 3], n = s[r - 1];
  Buffer out(out_dtype, y.numel());
  for (int64_t b = 0; b < static_cast<int64_t>(y.numel()) / (m * n); ++b)
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j)
        out.set_f64(static_cast<size_t>((b * n + j) * m + i),
                    y.get_f64(static_cast<size_t>((b * m + i) * n + j)));
  return out;
}

std::string QMatMulOp::name() const {
  return "QMatMul(" + ggml_type_name(format) + ")";
}

Buffer QMatMulOp::run(const std::vector<Buffer>& in,
                      const std::vector<std::vector<int64_t>>& shapes,
                      const std::vector<int64_t>& /*out_shape*/, DType out_dtype) const {
  // a: [batch..., M, K, N] through its view; w: [N, K] decoded.
  return sum_of_products(in[0], shapes[0], out_dtype, [&](size_t, int64_t wk) {
    return in[1].get_f64(static_cast<size_t>(wk));
  });
}

std::string NormQMatMulOp::name() const {
  return "NormQMatMul(" + ggml_type_name(format) + ")";
}

Buffer NormQMatMulOp::run(const std::vector<Buffer>& in,
                          const std::vector<std::vector<int64_t>>& shapes,
                          const std::vector<int64_t>& /*out_shape*/, DType out_dtype) const {
  // x: [batch..., M, K, N] through its view (the same at every n), g: [batch..., M, K].
  const std::vector<int64_t>& s = shapes[0];
  const size_t r = s.size();
  const int64_t k = s[r - 2], n = s[r - 1];
  const int64_t rows = static_cast<int64_t>(in[0].numel()) / (k * n);
  Buffer normed(DType::F64, in[0].numel());
  for (int64_t row = 0; row < rows; ++row) {
    double squares = 0;
    for (int64_t p = 0; p < k; ++p) {
      const double v = in[0].get_f64(static_cast<size_t>((row * k + p) * n));
      squares += v * v;
    }
    const double scale = 1.0 / std::sqrt(squares / static_cast<double>(k) + eps);
    for (int64_t p = 0; p < k; ++p) {
      const double g = in[1].get_f64(static_cast<size_t>(row * k + p));
      for (int64_t j = 0; j < n; ++j) {
        const auto at = static_cast<size_t>((row * k + p) * n + j);
        normed.set_f64(at, in[0].get_f64(at) * scale * g);
      }
    }
  }
  return sum_of_products(normed, s, out_dtype, [&](size_t, int64_t wk) {
    return in[2].get_f64(static_cast<size_t>(wk));
  });
}

std::string QMatMulAddOp::name() const {
  return "QMatMulAdd(" + ggml_type_name(format) + ")";
}

Buffer QMatMulAddOp::run(const std::vector<Buffer>& in,
                         const std::vector<std::vector<int64_t>>& shapes,
                         const std::vector<int64_t>& out_shape, DType out_dtype) const {
  Buffer y = QMatMulOp(format).run({in[0], in[1]}, {shapes[0], shapes[1]}, out_shape, out_dtype);
  for (size_t i = 0; i < y.numel(); ++i) y.set_f64(i, y.get_f64(i) + in[2].get_f64(i));
  return y;
}

bool is_qgemm(int axis, const View& a, const View& b, const std::vector<Expr>& w_shape) {
  const size_t r = a.rank();
  if (r < 3 || b.rank() != r || axis != static_cast<int>(r) - 2 || w_shape.size() != 2)
    return false;
  if (a.has_mask() || b.has_mask()) return false;
  const auto& sa = a.strides();
  const auto& sb = b.strides();
  const auto& shb = b.shape();
  const Expr zero = 0, one = 1;
  // b[..., m, k, n] = W[n, k]: exactly the transposed weight, shared by every batch and row.
  if (!(b.offset() == zero) || !(shb[r - 1] == w_shape[0]) || !(shb[r - 2] == w_shape[1]))
    return false;
  if (!(sb[r - 2] == one) || !(sb[r - 1] == w_shape[1])) return false;
  for (size_t d = 0; d + 2 < r; ++d)
    if (!(sb[d] == zero)) return false;
  // a is broadcast along N and reads K contiguously.
  return sa[r - 1] == zero && sa[r - 2] == one;
}

bool is_bias_row(const View& v) {
  const size_t r = v.rank();
  if (r < 2 || v.has_mask()) return false;
  const Expr zero = 0, one = 1;
  if (!(v.strides()[r - 1] == one) && !(v.shape()[r - 1] == one)) return false;
  for (size_t d = 0; d + 1 < r; ++d)
    if (!(v.strides()[d] == zero) && !(v.shape()[d] == one)) return false;
  return true;
}

bool is_gemm_of_copies(int axis, const View& a, const View& b, DType dtype) {
  const size_t r = a.rank();
  const bool blas_type = dtype == DType::F32 || dtype == DType::F16 || dtype == DType::BF16;
  if (!blas_type || r < 3 || b.rank() != r || axis != static_cast<int>(r) - 2) return false;
  const auto& sa = a.strides();
  const auto& sb = b.strides();
  const Expr zero = 0;
  // a broadcast along N, b along M; both really vary along K.
  return sa[r - 1] == zero && sb[r - 3] == zero && sa[r - 2] != zero && sb[r - 2] != zero;
}

bool is_gemm(int axis, const View& a, const View& b, DType dtype) {
  if (!is_gemm_of_copies(axis, a, b, dtype) || a.has_mask() || b.has_mask()) return false;
  const size_t r = a.rank();
  const auto& sa = a.strides();
  const auto& sb = b.strides();
  const Expr one = 1;
  // A(m, k) and B(k, n) each need a unit stride on one side for a BLAS leading dimension.
  const bool a_ok = sa[r - 2] == one || sa[r - 3] == one;
  const bool b_ok = sb[r - 1] == one || sb[r - 2] == one;
  return a_ok && b_ok;
}

std::optional<OperandCopy> gemm_operand_copy(const View& v, size_t broadcast_dim) {
  if (v.is_masked(broadcast_dim)) return std::nullopt;
  // The copy holds the dims the operand really varies along (masked ones included: they
  // read zeros outside the mask); the read re-expands the others.
  std::vector<Expr> dims, strides, lo, hi;
  std::vector<size_t> kept;
  for (size_t d = 0; d < v.rank(); ++d) {
    if (d == broadcast_dim || (v.strides()[d] == Expr(0) && !v.is_masked(d))) continue;
    kept.push_back(d);
    dims.push_back(v.shape()[d]);
    strides.push_back(v.strides()[d]);
    lo.push_back(v.mask_lo(d));
    hi.push_back(v.mask_hi(d));
  }
  View copy = View::from_parts(dims, strides, v.offset(), lo, hi);
  // The matrix's two dims outermost first in the source, where their strides say so.
  const size_t n = kept.size();
  std::vector<int> order(n);
  for (size_t i = 0; i < n; ++i) order[i] = static_cast<int>(i);
  if (n >= 2) {
    const auto inner = strides[n - 1].as_const(), outer = strides[n - 2].as_const();
    if (inner && outer && *inner > *outer) std::swap(order[n - 2], order[n - 1]);
  }
  copy = copy.permute(order);
  // Row-major over the copy's shape, permuted back (a swap is its own inverse), with the
  // dropped dims broadcast again.
  View read = View::contiguous(copy.shape()).permute(order);
  for (size_t d = 0; d < v.rank(); ++d)
    if (std::find(kept.begin(), kept.end(), d) == kept.end())
      read = read.expand_dim(static_cast<int>(d), v.shape()[d]);
  return OperandCopy{std::move(copy), std::move(read)};
}

std::optional<WindowOperand> window_operand(const View& va, const View& vw) {
  const size_t r = va.rank();
  if (r < 3 || va.has_mask() || vw.has_mask() || !(va.offset() == Expr(0)) ||
      !(va.strides()[r - 1] == Expr(0)))
    return std::nullopt;
  // va: row-major over [batch..., M, K] (dims of size 1 at any stride).
  Expr step = 1;
  for (size_t d = r - 1; d-- > 0;) {
    if (!(va.shape()[d] == Expr(1)) && !(va.strides()[d] == step)) return std::nullopt;
    step = step * va.shape()[d];
  }
  // vw: the batch dims, then M's dims, then K's.
  const size_t batch = r - 3;
  const std::vector<Expr>& dims = vw.shape();
  if (dims.size() < batch + 2) return std::nullopt;
  for (size_t d = 0; d < batch; ++d)
    if (!(dims[d] == va.shape()[d])) return std::nullopt;
  Expr rows = 1;
  size_t d = batch;
  while (d < dims.size() && !(rows == va.shape()[r - 3])) rows = rows * dims[d++];
  const size_t row_dims = d - batch;
  Expr cols = 1;
  for (; d < dims.size(); ++d) cols = cols * dims[d];
  if (row_dims == 0 || row_dims + batch == dims.size() || !(rows == va.shape()[r - 3]) ||
      !(cols == va.shape()[r - 2]))
    return std::nullopt;
  return WindowOperand{vw.expand_dim(static_cast<int>(dims.size()), va.shape()[r - 1]), row_dims};
}

std::optional<ChannelsLast> channels_last(const WindowOperand& w,
                                          const std::vector<Expr>& source_shape, size_t batch) {
  const View& v = w.view;
  const size_t rank = v.rank(), rx = source_shape.size();
  const size_t first_sum = batch + w.row_dims, end_sum = rank - 1;  // (N, broadcast, is last)
  const std::optional<Walks> walks = walks_of(v, source_shape);
  if (!walks) return std::nullopt;
  // The source dim walked by one sum dim alone, step 1, by no row dim, in eights.
  int inner = -1;
  size_t inner_sum = 0;
  for (size_t e = 0; e < rx; ++e) {
    int sums = 0, rows = 0;
    size_t by = 0;
    for (size_t d = 0; d < rank; ++d) {
      if (walks->dim[d] != static_cast<int>(e)) continue;
      if (d >= first_sum && d < end_sum) ++sums, by = d;
      if (d >= batch && d < first_sum) ++rows;
    }
    const int64_t size = walks->value_size[e];
    if (sums != 1 || rows != 0 || walks->step[by] != 1 || walks->view_size[by] % 8 != 0 ||
        size % 8 != 0)
      continue;
    if (inner < 0 || size > walks->value_size[static_cast<size_t>(inner)])
      inner = static_cast<int>(e), inner_sum = by;
  }
  if (inner < 0 || (inner == static_cast<int>(rx) - 1 && inner_sum == end_sum - 1))
    return std::nullopt;
  ChannelsLast out;
  for (size_t e = 0; e < rx; ++e)
    if (e != static_cast<size_t>(inner)) out.order.push_back(static_cast<int>(e));
  out.order.push_back(inner);
  const std::vector<Expr> shape = v.shape(), lo(rank, Expr(0));
  std::vector<int> perm;  // inner_sum moved to the end of the sum's dims
  for (size_t d = 0; d < rank; ++d)
    if (d != inner_sum && d != end_sum) perm.push_back(static_cast<int>(d));
  perm.insert(perm.begin() + static_cast<std::ptrdiff_t>(end_sum - 1), static_cast<int>(inner_sum));
  perm.push_back(static_cast<int>(end_sum));
  const std::optional<Restrided> over = strides_over(*walks, out.order);
  if (!over) return std::nullopt;
  out.window = View::from_parts(shape, over->strides, over->offset, lo, shape).permute(perm);
  for (size_t d = first_sum; d < end_sum; ++d)
    out.sums.push_back(static_cast<int>(static_cast<size_t>(perm[d]) - first_sum));
  return out;
}

std::optional<View> transposed_read(const View& vo, const std::vector<Expr>& value_shape) {
  const size_t r = value_shape.size();
  const std::optional<Walks> walks = r >= 2 ? walks_of(vo, value_shape) : std::nullopt;
  if (!walks) return std::nullopt;
  int innermost = -1;
  for (size_t d = 0; d < vo.rank(); ++d)
    if (walks->dim[d] >= 0) innermost = walks->dim[d];
  if (innermost != static_cast<int>(r) - 2) return std::nullopt;
  std::vector<int> order(r);
  for (size_t e = 0; e < r; ++e) order[e] = static_cast<int>(e);
  std::swap(order[r - 2], order[r - 1]);
  return over_order(vo, value_shape, order);
}

std::optional<OperandCopy> reordered_sum_copy(const View& vb, const std::vector<Expr>& sum_dims,
                                              const std::vector<int>& sums) {
  const size_t r = vb.rank(), batch = r - 3, q = sum_dims.size();
  if (r < 3 || sums.size() != q || !(vb.strides()[batch] == Expr(0)) || vb.is_masked(batch))
    return std::nullopt;
  std::vector<Expr> split(vb.shape().begin(), vb.shape().end());
  split.erase(split.begin() + static_cast<std::ptrdiff_t>(batch + 1));
  split.insert(split.begin() + static_cast<std::ptrdiff_t>(batch + 1), sum_dims.begin(),
               sum_dims.end());
  const std::optional<View> vs = vb.reshape(split);
  if (!vs) return std::nullopt;
  // The copy: the batch dims b varies along, then N, then the sum's dims in their new order.
  std::vector<size_t> order, kept;
  for (size_t d = 0; d < batch; ++d)
    if (!(vs->strides()[d] == Expr(0)) || vs->is_masked(d)) order.push_back(d), kept.push_back(d);
  order.push_back(batch + 1 + q);
  for (int i : sums) order.push_back(batch + 1 + static_cast<size_t>(i));
  std::vector<Expr> dims, strides, lo, hi;
  for (size_t d : order) {
    dims.push_back(vs->shape()[d]);
    strides.push_back(vs->strides()[d]);
    lo.push_back(vs->mask_lo(d));
    hi.push_back(vs->mask_hi(d));
  }
  OperandCopy c{View::from_parts(dims, strides, vs->offset(), lo, hi), View()};
  // The product's [batch..., M, K, N] view of the row-major copy.
  const View packed = View::contiguous(dims);
  const Expr k = product(sum_dims);
  std::vector<Expr> rd(vb.shape().begin(), vb.shape().end()), rs(r, Expr(0));
  for (size_t i = 0; i < kept.size(); ++i) rs[kept[i]] = packed.strides()[i];
  rs[batch + 1] = 1;
  rs[batch + 2] = k;
  c.read = View::from_parts(rd, rs, 0, std::vector<Expr>(r, Expr(0)), rd);
  return c;
}

}  // namespace luminal::compiler

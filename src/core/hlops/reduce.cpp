// Reductions over several axes with keepdim, built on SumReduce and MaxReduce.
#include <algorithm>

#include "core/hlops/common.hpp"
#include "luminal/error.hpp"
#include "luminal/tensor.hpp"

namespace luminal {
namespace {

using hlops::as_float;

// Distinct, normalised axes in descending order (so removing one keeps the others valid);
// empty means all.
std::vector<size_t> reduce_axes(const std::vector<int>& axes, size_t rank, const char* op) {
  std::vector<size_t> out;
  if (axes.empty()) {
    for (size_t d = 0; d < rank; ++d) out.push_back(d);
  } else {
    for (int a : axes) out.push_back(normalize_axis(a, rank, op));
  }
  std::sort(out.begin(), out.end(), std::greater<>());
  LUM_CHECK(std::adjacent_find(out.begin(), out.end()) == out.end())
      << op << ": repeated axis in reduction";
  return out;
}

Tensor restore_dims(Tensor t, const std::vector<size_t>& desc_axes) {
  for (auto it = desc_axes.rbegin(); it != desc_axes.rend(); ++it)
    t = t.unsqueeze(static_cast<int>(*it));
  return t;
}

Tensor reduce_with(const Tensor& x, const std::vector<int>& axes, bool keepdim, bool is_sum,
                   const char* op) {
  const auto desc = reduce_axes(axes, x.rank(), op);
  Tensor t = x;
  for (size_t a : desc) {
    const int axis = static_cast<int>(a);
    // Over one element the reduction is that element: a view, which fuses, where a
    // reduction is a kernel of its own (a gather's gradient sums its one-hot over the
    // gathered axis, of length 1 for a loss's gather_axis).
    if (t.shape()[a] == Expr(1))
      t = t.squeeze(axis);
    else
      t = is_sum ? t.sum_reduce(axis) : t.max_reduce(axis);
  }
  return keepdim ? restore_dims(t, desc) : t;
}

}  // namespace

Tensor Tensor::sum(const std::vector<int>& axes, bool keepdim) const {
  // Integer and bool sums accumulate in i64, as in PyTorch.
  const Tensor x = is_float(dtype_) ? *this : cast(DType::I64);
  return reduce_with(x, axes, keepdim, true, "sum");
}

Tensor Tensor::max(const std::vector<int>& axes, bool keepdim) const {
  return reduce_with(*this, axes, keepdim, false, "max");
}

Tensor Tensor::min(const std::vector<int>& axes, bool keepdim) const {
  // min(x) = -max(-x); unsigned types negate in a wider type.
  if (dtype_ == DType::U8 || dtype_ == DType::Bool)
    return cast(DType::I32).min(axes, keepdim).cast(dtype_);
  return -(-*this).max(axes, keepdim);
}

Tensor Tensor::count(const std::vector<int>& axes, DType dtype) const {
  Expr n = 1;
  for (size_t a : reduce_axes(axes, rank(), "count")) n = n * shape()[a];
  return graph().iota(n, {}, dtype);
}

Tensor Tensor::mean(const std::vector<int>& axes, bool keepdim) const {
  const Tensor x = as_float(*this);
  return x.sum(axes, keepdim) / x.count(axes, x.dtype());
}

Tensor hlops::product_through_logs(const Tensor& x,
                                   const std::function<Tensor(const Tensor&)>& total) {
  const Tensor zero = eq(x, 0.0);
  const Tensor magnitude = total(where(zero, 1.0, x).abs().log()).exp();
  const Tensor negatives = total(lt(x, 0.0).cast(x.dtype()));
  const Tensor sign = 1.0 - fmod(negatives, scalar_like(negatives, 2.0)) * 2.0;
  const Tensor zeros = total(zero.cast(x.dtype()));
  const Tensor lone_zero = total(where(zero, x, 0.0));
  const Tensor zero_part = where(eq(zeros, 0.0), 1.0, where(eq(zeros, 1.0), lone_zero, 0.0));
  return magnitude * sign * zero_part;
}

Tensor Tensor::prod(const std::vector<int>& axes, bool keepdim) const {
  const Tensor p = hlops::product_through_logs(
      as_float(*this), [&](const Tensor& t) { return t.sum(axes, keepdim); });
  return is_float(dtype_) ? p : p.round().cast(dtype_);
}

Tensor Tensor::var(const std::vector<int>& axes, int64_t correction, bool keepdim) const {
  const Tensor x = as_float(*this);
  const Tensor centred = x - x.mean(axes, true);
  Expr n = 1;
  for (size_t a : reduce_axes(axes, rank(), "var")) n = n * shape()[a];
  const Tensor dof = graph().iota(n - correction, {}, x.dtype());
  return (centred * centred).sum(axes, keepdim) / dof;
}

Tensor Tensor::std(const std::vector<int>& axes, int64_t correction, bool keepdim) const {
  return var(axes, correction, keepdim).sqrt();
}

namespace {

// Index of the first position along `axis` where x equals its extreme `best`.
Tensor first_index_of(const Tensor& x, const Tensor& best, int axis, bool keepdim) {
  const size_t a = normalize_axis(axis, x.rank(), "argmax");
  const Expr n = x.shape()[a];
  std::vector<Expr> line(x.rank(), Expr(1));
  line[a] = n;
  const Tensor positions = x.graph().iota(Expr("z"), {n}, DType::I64).reshape(line);
  const Tensor candidates =
      where(eq(x, best), positions.broadcast_to(x.shape()), x.graph().iota(n, {}, DType::I64));
  return candidates.min({static_cast<int>(a)}, keepdim);
}

}  // namespace

Tensor Tensor::argmax(int axis, bool keepdim) const {
  return first_index_of(*this, max({axis}, true), axis, keepdim);
}

Tensor Tensor::argmin(int axis, bool keepdim) const {
  return first_index_of(*this, min({axis}, true), axis, keepdim);
}

}  // namespace luminal

// Helpers shared by the composite-op files (private to src/core/hlops).
#pragma once

#include <functional>

#include "luminal/tensor.hpp"

namespace luminal::hlops {

/// Integer and bool tensors compute float math in f32, as PyTorch does.
inline Tensor as_float(const Tensor& x) {
  return is_float(x.dtype()) ? x : x.cast(DType::F32);
}

/// A composite activation f over x: over f16 or bf16 values its steps run in f32 and
/// the result is rounded once to x's type, as PyTorch computes such ops (in its "opmath"
/// type); rounded at every step, GELU's 30 steps cost 30 roundings of error and most of
/// the kernel's time. Other types as as_float gives them.
inline Tensor in_f32(const Tensor& x, const std::function<Tensor(const Tensor&)>& f) {
  const DType t = x.dtype();
  if (t == DType::F16 || t == DType::BF16) return f(x.cast(DType::F32)).cast(t);
  return f(as_float(x));
}

/// Row-major flat positions into a tensor of `shape` for every element of an output of
/// `out_shape`, where the coordinate along `axis` comes from `index` (broadcast to
/// `out_shape`) and the others are the output's own coordinates.
Tensor flat_positions(const std::vector<Expr>& shape, const std::vector<Expr>& out_shape, int axis,
                      const Tensor& index);

/// flat_positions' two parts: `base`, an expression of the output's flat index `z` (the
/// position of its coordinates along every dim but `axis`), and `stride`, the data's
/// row-major stride along `axis` that multiplies the index. (The autograd recognises a
/// gather along one axis by rebuilding them.)
struct FlatPositionParts {
  Expr base, stride;
};
FlatPositionParts flat_position_parts(const std::vector<Expr>& shape,
                                      const std::vector<Expr>& out_shape, size_t axis);

/// The product of x's (float) elements that `total` adds up (a sum over axes, or a
/// cumulative sum), through logarithms: the nonzero factors' magnitude exp(total(log|x|)),
/// their sign by the parity of the negatives, times the zero factors' product, which is 1
/// without zeros, 0 with two or more, and with one the zero itself, so that its gradient
/// there is the other factors' product (as PyTorch's) rather than NaN.
Tensor product_through_logs(const Tensor& x, const std::function<Tensor(const Tensor&)>& total);

}  // namespace luminal::hlops

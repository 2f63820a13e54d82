// Normalisation and probability composites.
#include "core/hlops/common.hpp"
#include "luminal/error.hpp"

namespace luminal {

using hlops::as_float;

namespace {

// The maximum along `axis` (kept), which a softmax subtracts so that exp cannot
// overflow. The result does not depend on it, so its gradient is exactly zero: marked so
// (Graph::stop_gradient), a training step computes no ties mask and no sums for it.
Tensor max_shift(const Tensor& x, int axis) {
  const Tensor top = x.max({axis}, true);
  // (Over one element the maximum is a view of x itself, which must keep its gradient.)
  if (top.id() != x.id()) x.graph().stop_gradient(top.id());
  return top;
}

}  // namespace

Tensor Tensor::softmax(int axis) const {
  const Tensor x = as_float(*this);
  const Tensor e = (x - max_shift(x, axis)).exp();
  return e / e.sum({axis}, true);
}

Tensor Tensor::log_softmax(int axis) const {
  const Tensor x = as_float(*this);
  const Tensor shifted = x - max_shift(x, axis);
  return shifted - shifted.exp().sum({axis}, true).log();
}

Tensor Tensor::mean_norm(const std::vector<int>& axes) const {
  const Tensor x = as_float(*this);
  return x - x.mean(axes, true);
}

Tensor Tensor::std_norm(const std::vector<int>& axes, double eps) const {
  const Tensor x = as_float(*this);
  return x * (x.var(axes, 0, true) + eps).rsqrt();
}

Tensor Tensor::layer_norm(const std::vector<int>& axes, double eps) const {
  const Tensor centred = mean_norm(axes);
  return centred * ((centred * centred).mean(axes, true) + eps).rsqrt();
}

Tensor Tensor::rms_norm(const std::vector<int>& axes, double eps) const {
  const Tensor x = as_float(*this);
  return x * ((x * x).mean(axes, true) + eps).rsqrt();
}

Tensor Tensor::normalize(double p, int axis, double eps) const {
  LUM_CHECK(p > 0) << "normalize: p must be positive, got " << p;
  const Tensor x = as_float(*this);
  const Tensor norm =
      p == 2.0 ? (x * x).sum({axis}, true).sqrt() : x.abs().pow(p).sum({axis}, true).pow(1.0 / p);
  return x / norm.maximum(scalar_like(norm, eps));
}

}  // namespace luminal

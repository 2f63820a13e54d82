// Normalisation and probability composites.
#include "core/hlops/common.hpp"
#include "luminal/error.hpp"

namespace luminal {

using hlops::as_float;

Tensor Tensor::softmax(int axis) const {
  const Tensor x = as_float(*this);
  const Tensor e = (x - x.max({axis}, true)).exp();  // shifted by the max: no overflow
  return e / e.sum({axis}, true);
}

Tensor Tensor::log_softmax(int axis) const {
  const Tensor x = as_float(*this);
  const Tensor shifted = x - x.max({axis}, true);
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

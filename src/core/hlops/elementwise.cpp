// Elementwise composites: arithmetic, comparisons, logic, select and unary math, all
// built from the primitive ops (docs/ops.md lists each decomposition).
#include <cmath>
#include <numbers>

#include "core/hlops/common.hpp"
#include "luminal/error.hpp"
#include "luminal/tensor.hpp"

namespace luminal {
namespace {

using hlops::as_float;

Tensor to_bool(const Tensor& x) {
  return x.cast(DType::Bool);
}

}  // namespace

// --- arithmetic ----------------------------------------------------------------------

Tensor operator+(const Tensor& a, const Tensor& b) {
  return binary(Op::Add, a, b);
}
Tensor operator*(const Tensor& a, const Tensor& b) {
  return binary(Op::Mul, a, b);
}
Tensor operator-(const Tensor& a, const Tensor& b) {
  return a + (-b);
}
Tensor Tensor::operator-() const {
  return *this * scalar_like(*this, -1.0);
}

Tensor operator/(const Tensor& a, const Tensor& b) {
  if (!is_float(a.dtype()) || !is_float(b.dtype())) return as_float(a) / as_float(b);
  return a * b.recip();
}

Tensor fmod(const Tensor& a, const Tensor& b) {
  return binary(Op::Mod, a, b);
}

Tensor operator%(const Tensor& a, const Tensor& b) {
  // Move a truncated remainder whose sign differs from the divisor's by one divisor.
  const Tensor r = fmod(a, b);
  const Tensor zero = scalar_like(r, 0.0);
  const Tensor wrong_sign = logical_and(ne(r, zero), ne(lt(r, zero), lt(b, zero)));
  return where(wrong_sign, r + b, r);
}

#define LUM_SCALAR_BINARY(op)                     \
  Tensor operator op(const Tensor& a, double b) { \
    return a op scalar_like(a, b);                \
  }                                               \
  Tensor operator op(double a, const Tensor& b) { \
    return scalar_like(b, a) op b;                \
  }
LUM_SCALAR_BINARY(+)
LUM_SCALAR_BINARY(-)
LUM_SCALAR_BINARY(*)
LUM_SCALAR_BINARY(/)
LUM_SCALAR_BINARY(%)
#undef LUM_SCALAR_BINARY

// --- comparisons and logic -------------------------------------------------------------
// Built from LessThan; with NaN operands le/ge/eq answer as if NaN compared equal.

Tensor less_than(const Tensor& a, const Tensor& b) {
  return binary(Op::LessThan, a, b);
}
Tensor lt(const Tensor& a, const Tensor& b) {
  return less_than(a, b);
}
Tensor gt(const Tensor& a, const Tensor& b) {
  return less_than(b, a);
}
Tensor le(const Tensor& a, const Tensor& b) {
  return gt(a, b).logical_not();
}
Tensor ge(const Tensor& a, const Tensor& b) {
  return lt(a, b).logical_not();
}
Tensor eq(const Tensor& a, const Tensor& b) {
  return logical_and(le(a, b), ge(a, b));
}
Tensor ne(const Tensor& a, const Tensor& b) {
  return logical_or(lt(a, b), gt(a, b));
}
Tensor lt(const Tensor& a, double b) {
  return lt(a, scalar_like(a, b));
}
Tensor le(const Tensor& a, double b) {
  return le(a, scalar_like(a, b));
}
Tensor gt(const Tensor& a, double b) {
  return gt(a, scalar_like(a, b));
}
Tensor ge(const Tensor& a, double b) {
  return ge(a, scalar_like(a, b));
}
Tensor eq(const Tensor& a, double b) {
  return eq(a, scalar_like(a, b));
}
Tensor ne(const Tensor& a, double b) {
  return ne(a, scalar_like(a, b));
}

// On bool, Mul is `and` and Add is `or`.
Tensor logical_and(const Tensor& a, const Tensor& b) {
  return to_bool(a) * to_bool(b);
}
Tensor logical_or(const Tensor& a, const Tensor& b) {
  return to_bool(a) + to_bool(b);
}
Tensor Tensor::logical_not() const {
  return less_than(to_bool(*this), graph().constant(1.0, DType::Bool));
}

Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  LUM_CHECK(&cond.graph() == &a.graph() && &a.graph() == &b.graph())
      << "Where: operands belong to different graphs";
  const Tensor c = to_bool(cond);
  const auto shape =
      broadcast_shapes(broadcast_shapes(c.shape(), a.shape(), "Where"), b.shape(), "Where");
  Node n;
  n.op = Op::Where;
  n.inputs = {Edge{c.id(), c.view().broadcast_to(shape)},
              Edge{a.id(), a.view().broadcast_to(shape)},
              Edge{b.id(), b.view().broadcast_to(shape)}};
  Graph& g = a.graph();
  return g.tensor_of(g.add_node(std::move(n)));
}

Tensor where(const Tensor& cond, const Tensor& a, double b) {
  return where(cond, a, scalar_like(a, b));
}
Tensor where(const Tensor& cond, double a, const Tensor& b) {
  return where(cond, scalar_like(b, a), b);
}

// --- unary ---------------------------------------------------------------------------

Tensor Tensor::full_like(double value) const {
  return scalar_like(*this, value).broadcast_to(shape());
}

Tensor Tensor::abs() const {
  return where(lt(*this, 0.0), -*this, *this);
}
Tensor Tensor::sign() const {
  return gt(*this, 0.0).cast(dtype_) - lt(*this, 0.0).cast(dtype_);
}
Tensor Tensor::square() const {
  return *this * *this;
}
Tensor Tensor::rsqrt() const {
  return as_float(*this).sqrt().recip();
}
Tensor Tensor::exp() const {
  return (as_float(*this) * std::numbers::log2e).exp2();
}
Tensor Tensor::log() const {
  return as_float(*this).log2() * std::numbers::ln2;
}
Tensor Tensor::cos() const {
  return (as_float(*this) + std::numbers::pi / 2).sin();
}
Tensor Tensor::relu() const {
  return where(lt(*this, 0.0), 0.0, *this);
}
Tensor Tensor::leaky_relu(double slope) const {
  return where(lt(*this, 0.0), *this * slope, *this);
}
Tensor Tensor::sigmoid() const {
  return hlops::in_f32(*this, [](const Tensor& x) { return ((-x).exp() + 1.0).recip(); });
}
Tensor Tensor::tanh() const {
  return hlops::in_f32(*this, [](const Tensor& x) { return (x * 2.0).sigmoid() * 2.0 - 1.0; });
}
Tensor Tensor::silu() const {
  return hlops::in_f32(*this, [](const Tensor& x) { return x * x.sigmoid(); });
}

Tensor Tensor::erf() const {
  // Abramowitz & Stegun 7.1.26 (|error| < 1.5e-7), odd symmetry for x < 0.
  return hlops::in_f32(*this, [](const Tensor& x) {
    const Tensor a = x.abs();
    const Tensor t = (a * 0.3275911 + 1.0).recip();
    Tensor poly = t * 1.061405429 - 1.453152027;
    poly = poly * t + 1.421413741;
    poly = poly * t - 0.284496736;
    poly = poly * t + 0.254829592;
    const Tensor y = 1.0 - poly * t * (-(a * a)).exp();
    return where(lt(x, 0.0), -y, y);
  });
}

Tensor Tensor::gelu() const {
  return hlops::in_f32(*this, [](const Tensor& x) {
    return x * 0.5 * ((x * (std::numbers::sqrt2 / 2)).erf() + 1.0);
  });
}

Tensor Tensor::gelu_tanh() const {
  return hlops::in_f32(*this, [](const Tensor& x) {
    const Tensor inner = (x + x * x * x * 0.044715) * std::sqrt(2.0 / std::numbers::pi);
    return x * 0.5 * (inner.tanh() + 1.0);
  });
}

Tensor Tensor::softplus(double beta, double threshold) const {
  return hlops::in_f32(*this, [&](const Tensor& x) {
    const Tensor bx = x * beta;
    return where(gt(bx, threshold), x, (bx.exp() + 1.0).log() * (1.0 / beta));
  });
}

Tensor Tensor::clamp(double lo, double hi) const {
  LUM_CHECK(lo <= hi) << "clamp: min " << lo << " > max " << hi;
  return where(lt(*this, lo), lo, where(gt(*this, hi), hi, *this));
}

Tensor Tensor::floor() const {
  if (!is_float(dtype_)) return *this;
  const Tensor t = *this - fmod(*this, scalar_like(*this, 1.0));  // truncation, exact
  return t - lt(*this, t).cast(dtype_);
}

Tensor Tensor::ceil() const {
  if (!is_float(dtype_)) return *this;
  const Tensor t = *this - fmod(*this, scalar_like(*this, 1.0));
  return t + lt(t, *this).cast(dtype_);
}

Tensor Tensor::round() const {
  if (!is_float(dtype_)) return *this;
  const Tensor f = floor();
  const Tensor frac = *this - f;
  const Tensor f_is_even = eq(fmod(f, scalar_like(f, 2.0)), 0.0);
  const Tensor up = where(eq(frac, 0.5), where(f_is_even, f, f + 1.0), f + 1.0);
  return where(lt(frac, 0.5), f, up);
}

Tensor Tensor::pow(double e) const {
  if (e == 0) return full_like(1.0);
  if (e == 1) return *this;
  if (e == 2) return *this * *this;
  if (e == 3) return *this * *this * *this;
  if (e == 0.5) return sqrt();
  if (e == -0.5) return rsqrt();
  if (e == -1) return as_float(*this).recip();
  const Tensor x = as_float(*this);
  const Tensor magnitude = (x.abs().log2() * e).exp2();
  if (e != std::floor(e)) return where(lt(x, 0.0), std::nan(""), magnitude);
  // Integral exponents keep the sign of an odd power of a negative base.
  const bool odd = std::fmod(std::fabs(e), 2.0) == 1.0;
  return odd ? where(lt(x, 0.0), -magnitude, magnitude) : magnitude;
}

Tensor Tensor::pow(const Tensor& exponent) const {
  return (as_float(exponent) * as_float(*this).log2()).exp2();
}

Tensor Tensor::maximum(const Tensor& other) const {
  return where(lt(*this, other), other, *this);
}
Tensor Tensor::minimum(const Tensor& other) const {
  return where(lt(other, *this), other, *this);
}

}  // namespace luminal

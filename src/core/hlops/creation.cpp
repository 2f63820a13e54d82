// Tensor creation: constants, ranges, identity and seeded random initialisation.
#include <cmath>
#include <numbers>

#include "luminal/error.hpp"
#include "luminal/tensor.hpp"

namespace luminal {
namespace {

// splitmix64: a small, portable generator, so seeds give the same data everywhere
// (std:: distributions differ between standard libraries).
struct SplitMix64 {
  uint64_t state;
  uint64_t next() {
    uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }  // [0, 1)
};

size_t concrete_numel(const std::vector<Expr>& shape, const char* op) {
  int64_t n = 1;
  for (Expr d : shape) {
    auto c = d.as_const();
    LUM_CHECK(c) << op << ": shape " << to_string(shape) << " must be concrete";
    n *= *c;
  }
  return static_cast<size_t>(n);
}

bool is_integral(double v) {
  return std::floor(v) == v && std::fabs(v) < 9.0e15;
}

}  // namespace

Tensor Graph::full(const std::vector<Expr>& shape, double value, DType dtype) {
  // A copy first: `shape` may be a node's own, which adding the constant moves.
  const std::vector<Expr> dims = shape;
  Tensor c =
      is_float(dtype) ? constant(value, dtype) : constant_int(static_cast<int64_t>(value), dtype);
  return c.broadcast_to(dims);
}

Tensor Graph::zeros(const std::vector<Expr>& shape, DType dtype) {
  return full(shape, 0, dtype);
}
Tensor Graph::ones(const std::vector<Expr>& shape, DType dtype) {
  return full(shape, 1, dtype);
}

Tensor Graph::arange(double start, double end, double step, DType dtype) {
  LUM_CHECK(step != 0) << "arange: step must be non-zero";
  const double count = std::ceil((end - start) / step);
  const auto n = static_cast<int64_t>(std::max(count, 0.0));
  if (is_integral(start) && is_integral(step))
    return iota(Expr(static_cast<int64_t>(start)) + Expr("z") * static_cast<int64_t>(step), {n},
                dtype);
  Tensor z = iota(Expr("z"), {n}, DType::F64);
  return (z * step + start).cast(dtype);
}

Tensor Graph::eye(Expr n, DType dtype) {
  const Expr z = "z", r = z / n, c = z % n;
  return iota(logical_and(ge(r, c), ge(c, r)), {n, n}, dtype);
}

Tensor Graph::rand(const std::vector<Expr>& shape, uint64_t seed, double lo, double hi) {
  SplitMix64 g{seed};
  std::vector<double> v(concrete_numel(shape, "rand"));
  for (double& x : v) x = lo + (hi - lo) * g.uniform();
  Tensor t = named_tensor("rand" + std::to_string(num_nodes()), shape, DType::F32);
  t.set_buffer(Buffer::from_doubles(v, DType::F32));
  return t;
}

Tensor Graph::randn(const std::vector<Expr>& shape, uint64_t seed, double mean, double std) {
  SplitMix64 g{seed};
  std::vector<double> v(concrete_numel(shape, "randn"));
  for (size_t i = 0; i < v.size(); i += 2) {
    // Box-Muller: two uniforms give two independent normals.
    const double u1 = 1.0 - g.uniform(), u2 = g.uniform();
    const double r = std::sqrt(-2.0 * std::log(u1)), t = 2.0 * std::numbers::pi * u2;
    v[i] = mean + std * r * std::cos(t);
    if (i + 1 < v.size()) v[i + 1] = mean + std * r * std::sin(t);
  }
  Tensor t = named_tensor("randn" + std::to_string(num_nodes()), shape, DType::F32);
  t.set_buffer(Buffer::from_doubles(v, DType::F32));
  return t;
}

}  // namespace luminal

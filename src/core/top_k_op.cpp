// TopK: the builder and the reference semantics (a partial sort of each row).
#include "luminal/top_k_op.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "luminal/error.hpp"
#include "luminal/graph.hpp"
#include "luminal/tensor.hpp"

namespace luminal {

Tensor top_k(const Tensor& x, int64_t k) {
  LUM_CHECK(x.rank() >= 1) << "top_k: a scalar has no last axis";
  LUM_CHECK(x.dtype() == DType::F32 || x.dtype() == DType::F16 || x.dtype() == DType::BF16)
      << "top_k: " << dtype_name(x.dtype()) << " values (f32, f16 or bf16 only)";
  const Expr n = x.shape().back();
  LUM_CHECK(k >= 1 && (!n.as_const() || k <= *n.as_const()))
      << "top_k: k = " << k << " of " << to_string(x.shape()) << " (1 to the last axis' length)";
  std::vector<Expr> shape = x.shape();
  shape.back() = Expr(k);
  Node node;
  node.op = Op::Custom;
  node.custom = std::make_shared<TopKOp>(k);
  node.dtype = DType::I32;
  node.shape = shape;
  node.inputs = {Edge{x.id(), x.view()}};
  Graph& g = x.graph();
  return g.tensor_of(g.add_node(std::move(node)));
}

Buffer TopKOp::run(const std::vector<Buffer>& inputs,
                   const std::vector<std::vector<int64_t>>& shapes, const std::vector<int64_t>&,
                   DType out_dtype) const {
  LUM_CHECK(inputs.size() == 1 && shapes.size() == 1 && !shapes[0].empty() &&
            out_dtype == DType::I32)
      << "TopK: expects one input";
  const auto n = static_cast<size_t>(shapes[0].back());
  const auto k = static_cast<size_t>(k_);
  LUM_CHECK(k <= n) << "TopK: k = " << k << " of " << n << " values";
  const std::vector<float> x = inputs[0].to_f32();
  const size_t rows = n ? x.size() / n : 0;
  Buffer out(DType::I32, rows * k, Buffer::Uninitialized{});
  auto* ids = static_cast<int32_t*>(out.data());
  std::vector<int32_t> order(n);
  for (size_t r = 0; r < rows; ++r) {
    const float* v = x.data() + r * n;
    // Largest first, the lower position first among equal values; NaN after everything.
    auto before = [&](int32_t a, int32_t b) {
      const bool na = std::isnan(v[a]), nb = std::isnan(v[b]);
      if (na != nb) return nb;
      if (!na && v[a] != v[b]) return v[a] > v[b];
      return a < b;
    };
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(k), order.end(),
                      before);
    std::copy_n(order.begin(), k, ids + r * k);
  }
  return out;
}

}  // namespace luminal

// ExpertMatMul: the builder and the reference semantics.
#include "luminal/expert_matmul_op.hpp"

#include "luminal/error.hpp"
#include "luminal/graph.hpp"
#include "luminal/tensor.hpp"

namespace luminal {

Tensor expert_matmul(const Tensor& x, const Tensor& experts, const Tensor& ids) {
  LUM_CHECK(x.rank() == 3 && experts.rank() == 3 && ids.rank() == 2)
      << "expert_matmul: x " << to_string(x.shape()) << ", experts "
      << to_string(experts.shape()) << ", ids " << to_string(ids.shape())
      << " (expected [T, 1 or S, K], [E, N, K], [T, S])";
  LUM_CHECK(is_float(x.dtype()) && is_float(experts.dtype()))
      << "expert_matmul: x and experts must be floating point, got " << dtype_name(x.dtype())
      << " and " << dtype_name(experts.dtype());
  LUM_CHECK(ids.dtype() == DType::I32 || ids.dtype() == DType::I64)
      << "expert_matmul: ids must be i32 or i64, got " << dtype_name(ids.dtype());
  const auto same = [](const Expr& a, const Expr& b) {
    return !a.as_const() || !b.as_const() || *a.as_const() == *b.as_const();
  };
  const Expr k = x.dim(2), s = ids.dim(1);
  LUM_CHECK(same(k, experts.dim(2)) && same(x.dim(0), ids.dim(0)) &&
            (x.dim(1).as_const() == std::optional<int64_t>(1) || same(x.dim(1), s)))
      << "expert_matmul: x " << to_string(x.shape()) << ", experts "
      << to_string(experts.shape()) << " and ids " << to_string(ids.shape()) << " do not fit";
  Node node;
  node.op = Op::Custom;
  node.custom = std::make_shared<ExpertMatMulOp>();
  node.dtype = x.dtype();
  node.shape = {ids.dim(0), s, experts.dim(1)};
  node.inputs = {Edge{x.id(), x.view()}, Edge{experts.id(), experts.view()},
                 Edge{ids.id(), ids.view()}};
  Graph& g = x.graph();
  return g.tensor_of(g.add_node(std::move(node)));
}

Buffer ExpertMatMulOp::run(const std::vector<Buffer>& in,
                           const std::vector<std::vector<int64_t>>& shapes,
                           const std::vector<int64_t>& out_shape, DType out_dtype) const {
  LUM_CHECK(in.size() == 3 && shapes.size() == 3 && shapes[0].size() == 3 &&
            shapes[1].size() == 3 && shapes[2].size() == 2)
      << "ExpertMatMul: expects x, experts and ids";
  const int64_t t_len = shapes[2][0], slots = shapes[2][1], x_slots = shapes[0][1];
  const int64_t experts = shapes[1][0], n = shapes[1][1], k = shapes[1][2];
  Buffer out(out_dtype, static_cast<size_t>(t_len * slots * n));
  for (int64_t t = 0; t < t_len; ++t)
    for (int64_t s = 0; s < slots; ++s) {
      const int64_t e = in[2].get_i64(static_cast<size_t>(t * slots + s));
      LUM_CHECK(e >= 0 && e < experts)
          << "ExpertMatMul: expert id " << e << " of " << experts << " experts";
      const int64_t row = t * x_slots + (x_slots == 1 ? 0 : s);
      for (int64_t j = 0; j < n; ++j) {
        double acc = 0;
        for (int64_t p = 0; p < k; ++p)
          acc += in[0].get_f64(static_cast<size_t>(row * k + p)) *
                 in[1].get_f64(static_cast<size_t>((e * n + j) * k + p));
        out.set_f64(static_cast<size_t>((t * slots + s) * n + j), acc);
      }
    }
  (void)out_shape;
  return out;
}

}  // namespace luminal

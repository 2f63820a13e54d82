// ExpertMatMul: the builder and the reference semantics.
#include "luminal/expert_matmul_op.hpp"

#include "luminal/error.hpp"
#include "luminal/graph.hpp"
#include "luminal/tensor.hpp"

namespace luminal {

Tensor expert_matmul(const Tensor& x, const Tensor& experts, const Tensor& ids) {
  return expert_matmul(x, std::vector<Tensor>{experts}, ids);
}

Tensor expert_matmul(const Tensor& x, const std::vector<Tensor>& stacks, const Tensor& ids) {
  LUM_CHECK(!stacks.empty()) << "expert_matmul: no experts";
  const Tensor& first = stacks[0];
  LUM_CHECK(x.rank() == 3 && ids.rank() == 2)
      << "expert_matmul: x " << to_string(x.shape()) << ", ids " << to_string(ids.shape())
      << " (expected [T, 1 or S, K] and [T, S])";
  LUM_CHECK(is_float(x.dtype())) << "expert_matmul: x must be floating point, got "
                                 << dtype_name(x.dtype());
  LUM_CHECK(ids.dtype() == DType::I32 || ids.dtype() == DType::I64)
      << "expert_matmul: ids must be i32 or i64, got " << dtype_name(ids.dtype());
  const auto same = [](const Expr& a, const Expr& b) {
    return !a.as_const() || !b.as_const() || *a.as_const() == *b.as_const();
  };
  const Expr s = ids.dim(1);
  LUM_CHECK(same(x.dim(0), ids.dim(0)) &&
            (x.dim(1).as_const() == std::optional<int64_t>(1) || same(x.dim(1), s)))
      << "expert_matmul: x " << to_string(x.shape()) << " and ids " << to_string(ids.shape())
      << " do not fit";
  Expr n = 0;
  std::vector<Edge> inputs = {Edge{x.id(), x.view()}, Edge{ids.id(), ids.view()}};
  for (const Tensor& w : stacks) {
    LUM_CHECK(w.rank() == 3 && is_float(w.dtype()) && same(w.dim(2), x.dim(2)) &&
              same(w.dim(0), first.dim(0)))
        << "expert_matmul: experts " << to_string(w.shape()) << " (" << dtype_name(w.dtype())
        << ") do not fit x " << to_string(x.shape()) << " and experts " << to_string(first.shape())
        << " (expected [E, N, K], floating point)";
    n = n + w.dim(1);
    inputs.push_back(Edge{w.id(), w.view()});
  }
  Node node;
  node.op = Op::Custom;
  node.custom = std::make_shared<ExpertMatMulOp>();
  node.dtype = x.dtype();
  node.shape = {ids.dim(0), s, n};
  node.inputs = std::move(inputs);
  Graph& g = x.graph();
  return g.tensor_of(g.add_node(std::move(node)));
}

Buffer ExpertMatMulOp::run(const std::vector<Buffer>& in,
                           const std::vector<std::vector<int64_t>>& shapes,
                           const std::vector<int64_t>& out_shape, DType out_dtype) const {
  LUM_CHECK(in.size() >= 3 && shapes.size() == in.size() && shapes[0].size() == 3 &&
            shapes[1].size() == 2 && out_shape.size() == 3)
      << "ExpertMatMul: expects x, ids and experts";
  const int64_t t_len = shapes[1][0], slots = shapes[1][1], x_slots = shapes[0][1];
  const int64_t k = shapes[0][2], width = out_shape[2];
  Buffer out(out_dtype, static_cast<size_t>(t_len * slots * width));
  int64_t column = 0;  // stack i's first output column
  for (size_t i = 2; i < in.size(); ++i) {
    const int64_t experts = shapes[i][0], n = shapes[i][1];
    for (int64_t t = 0; t < t_len; ++t)
      for (int64_t s = 0; s < slots; ++s) {
        const int64_t e = in[1].get_i64(static_cast<size_t>(t * slots + s));
        LUM_CHECK(e >= 0 && e < experts)
            << "ExpertMatMul: expert id " << e << " of " << experts << " experts";
        const int64_t row = t * x_slots + (x_slots == 1 ? 0 : s);
        for (int64_t j = 0; j < n; ++j) {
          double acc = 0;
          for (int64_t p = 0; p < k; ++p)
            acc += in[0].get_f64(static_cast<size_t>(row * k + p)) *
                   in[i].get_f64(static_cast<size_t>((e * n + j) * k + p));
          out.set_f64(static_cast<size_t>((t * slots + s) * width + column + j), acc);
        }
      }
    column += n;
  }
  return out;
}

}  // namespace luminal

// The products a graph leaves as multiply-and-reduce after optimisation though a BLAS
// could run them (over copies of their operands, where it must): a graph that falls
// back to them computes the same values hundreds of times slower, which no value test
// notices.
#pragma once

#include <string>
#include <vector>

#include "luminal/compiler/matmul_op.hpp"
#include "luminal/compiler/optimize.hpp"
#include "luminal/graph.hpp"

namespace luminal::testing {

/// The [batch..., M, K, N] shapes of those products in `g`, optimised as a backend
/// with the given options would.
inline std::vector<std::string> products_left_as_reductions(
    const Graph& g, const compiler::OptimizeOptions& options = {}) {
  const compiler::Optimized opt = compiler::optimize(g, options);
  std::vector<std::string> left;
  for (uint32_t i = 0; i < opt.graph->num_nodes(); ++i) {
    const Node& n = opt.graph->node(NodeId{i});
    if (n.op != Op::SumReduce) continue;
    const Node& mul = opt.graph->node(n.inputs[0].source);
    if (mul.op == Op::Mul && n.inputs[0].view == View::contiguous(mul.shape) &&
        compiler::is_gemm_of_copies(n.axis, mul.inputs[0].view, mul.inputs[1].view, mul.dtype))
      left.push_back(to_string(mul.inputs[0].view.shape()));
  }
  return left;
}

}  // namespace luminal::testing

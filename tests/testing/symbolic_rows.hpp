// A test input whose leading dim is symbolic, so the row count reaches a backend's kernels
// as an argument rather than a constant of their code.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "luminal/luminal.hpp"

namespace luminal::testing {

/// An f32 input "x" of `shape`, its first dim the symbolic "rows" bound to shape[0]; with
/// its element count.
inline std::pair<Tensor, size_t> symbolic_rows_input(Graph& cx, const std::vector<int64_t>& shape) {
  std::vector<Expr> dims = {Expr::var("rows")};
  size_t n = static_cast<size_t>(shape[0]);
  for (size_t d = 1; d < shape.size(); ++d) {
    dims.emplace_back(shape[d]);
    n *= static_cast<size_t>(shape[d]);
  }
  cx.set_dim("rows", shape[0]);
  return {cx.named_tensor("x", dims), n};
}

}  // namespace luminal::testing

// ExpertMatMul: a mixture-of-experts product that reads only the chosen experts' weights.
// Each token's row is multiplied by the weight matrices of the experts its router chose,
// picked by id from one [experts, N, K] tensor where the ids lie (on the device, for a GPU
// backend), so a decoding step streams k experts' bytes, not all of them. Several stacks
// over the same rows and ids (a mixture's gate and up projections) are one op, their
// outputs side by side, so a backend reads and prepares the rows once for all.
#pragma once

#include <cstdint>

#include "luminal/custom_op.hpp"

namespace luminal {

class ExpertMatMulOp final : public CustomOp {
 public:
  std::string name() const override { return "ExpertMatMul"; }
  /// Inputs: x [T, 1 or S, K], ids [T, S] (integers in [0, E)), then one or more stacks
  /// of experts [E, N_i, K] (decoded); output [T, S, N_0 + N_1 + ...], stack i's part
  /// out[t, s, i's columns] = stack_i[ids[t, s]] x[t, s or 0].
  Buffer run(const std::vector<Buffer>& inputs, const std::vector<std::vector<int64_t>>& shapes,
             const std::vector<int64_t>& out_shape, DType out_dtype) const override;
};

}  // namespace luminal

// AppendRows: concat({base, rows}, 0) as an op of its own (append_rows in tensor.hpp),
// so a backend can run it in place: when `base` is an input donated to the run
// (Graph::donate), its buffer grows and only the new rows are written. A KV cache
// appended to every decoding step is the case: otherwise the whole cache is copied
// every step.
#pragma once

#include "luminal/custom_op.hpp"

namespace luminal {

class AppendRowsOp final : public CustomOp {
 public:
  std::string name() const override { return "AppendRows"; }
  Buffer run(const std::vector<Buffer>& inputs, const std::vector<std::vector<int64_t>>& shapes,
             const std::vector<int64_t>& out_shape, DType out_dtype) const override;
};

}  // namespace luminal

// Custom: an op the compiler introduces (a library kernel such as a GEMM) or a user
// extension. It states its reference semantics on host buffers so every backend,
// including the interpreter, can run a graph that contains it. It must be a function of
// its inputs: a search runs a program several times on the same inputs (other
// extractions, timed whole) and keeps one run's outputs.
#pragma once

#include <string>
#include <vector>

#include "luminal/buffer.hpp"
#include "luminal/expr.hpp"

namespace luminal {

class CustomOp {
 public:
  virtual ~CustomOp() = default;
  /// Printed name.
  virtual std::string name() const = 0;
  /// Reference semantics: `inputs` are row-major buffers of the input views' shapes
  /// (`shapes`); returns the row-major output of `out_shape`.
  virtual Buffer run(const std::vector<Buffer>& inputs,
                     const std::vector<std::vector<int64_t>>& shapes,
                     const std::vector<int64_t>& out_shape, DType out_dtype) const = 0;
};

}  // namespace luminal

// Dynamic loss scaling for half-precision (f16) training, as torch.amp.GradScaler does
// it: gradients are taken of loss * scale, so small ones do not flush to zero in f16,
// and divided back; a step whose gradients overflowed is skipped and the scale halved,
// and after `interval` good steps in a row the scale doubles.
#pragma once

#include <cstdint>
#include <vector>

#include "luminal/tensor.hpp"

namespace luminal::train {

struct LossScaleOptions {
  double initial = 65536.0, growth = 2.0, backoff = 0.5;
  int64_t interval = 2000;
};

class LossScale {
 public:
  explicit LossScale(Graph& graph, LossScaleOptions options = {});
  /// train::gradients of loss * scale (the scale a graph input), divided by the scale
  /// in each parameter's type.
  std::vector<Tensor> gradients(const Tensor& loss, const std::vector<Tensor>& params);
  /// A bool scalar: every gradient of the last gradients() call is finite. Give it to an
  /// optimizer (SgdOptions / AdamOptions::apply_if) so a step that overflowed changes
  /// nothing. Throws before gradients() (so not in the same call's arguments, whose
  /// order C++ leaves open).
  const Tensor& finite() const;
  /// After an execute(): whether that step's gradients were finite. Sets the next run's
  /// scale (halved after an overflow; grown after `interval` good steps in a row). Pass
  /// the result to Optimizer::advance so a skipped step is not counted.
  bool update();
  double scale() const { return scale_; }

 private:
  Graph* graph_;
  LossScaleOptions options_;
  Tensor scale_input_, finite_;
  double scale_;
  int64_t good_ = 0;
};

}  // namespace luminal::train

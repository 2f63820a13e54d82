// Convolution layers with torch.nn.Conv1d / Conv2d parameter names and layouts.
#pragma once

#include <vector>

#include "luminal/nn/module.hpp"

namespace luminal::nn {

/// weight [out, in / groups, k...] and optional bias [out]; one kernel size gives a
/// Conv1d over [N, C, L], two a Conv2d over [N, C, H, W].
class Conv final : public Module {
 public:
  Conv(Graph& g, const std::string& name, int64_t in, int64_t out, std::vector<int64_t> kernel,
       ConvOptions options = {}, bool bias = true);
  Tensor forward(const Tensor& x) const;
  void parameters(const std::string& prefix, NamedTensors& out) const override;
  Tensor weight, bias;
  ConvOptions options;
};

}  // namespace luminal::nn

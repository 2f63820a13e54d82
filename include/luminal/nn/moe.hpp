// A mixture-of-experts feed-forward block: a linear router scores the experts, each
// token uses its top-k (weights from the softmax, optionally renormalised over the k),
// and the output is the weighted sum of those experts' gated MLPs. Each projection's
// experts are one [experts, rows, cols] parameter, and the products read only the chosen
// experts' matrices (expert_matmul), so a token costs k experts' weights, not all of them.
#pragma once

#include "luminal/nn/layers.hpp"

namespace luminal::nn {

struct MoENames {
  std::string router = "gate";  // <block>.gate.weight
  std::string expert = "experts";
  std::string gate = "gate_proj", up = "up_proj", down = "down_proj";  // Mixtral: w1, w3, w2
};

class MoE final : public Module {
 public:
  MoE(Graph& g, const std::string& name, int64_t dim, int64_t hidden, int64_t experts,
      int64_t top_k, bool renormalize, const MoENames& names = {});
  /// x: [seq, dim] -> [seq, dim].
  Tensor forward(const Tensor& x) const;
  /// Parameters: <router>.weight [experts, dim], and <expert>.<gate|up>.weight [experts,
  /// hidden, dim] and <expert>.<down>.weight [experts, dim, hidden] (per-expert files are
  /// stacked into these by the loaders).
  void parameters(const std::string& prefix, NamedTensors& out) const override;

  Linear router;
  Tensor gates, ups, downs;
  int64_t top_k;
  bool renormalize;
  MoENames names;
};

}  // namespace luminal::nn

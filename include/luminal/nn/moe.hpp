// A mixture-of-experts feed-forward block: a linear router scores the experts, each
// token uses its top-k (weights from the softmax, optionally renormalised over the k),
// and the output is the weighted sum of those experts' gated MLPs. Every expert is
// evaluated densely and masked (correct for any routing; a sparse kernel is future work).
#pragma once

#include <vector>

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
  void parameters(const std::string& prefix, NamedTensors& out) const override;

  Linear router;
  std::vector<Linear> gates, ups, downs;
  int64_t top_k;
  bool renormalize;
  MoENames names;
};

/// A [seq, n] mask with ones at each row's k largest entries (ties may add more).
Tensor top_k_mask(const Tensor& scores, int64_t k);

}  // namespace luminal::nn

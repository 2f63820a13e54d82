// Mixture-of-experts block.
#include "luminal/nn/moe.hpp"

#include <limits>

#include "luminal/error.hpp"

namespace luminal::nn {

Tensor top_k_mask(const Tensor& scores, int64_t k) {
  LUM_CHECK(k > 0) << "top_k_mask: k must be positive, got " << k;
  Tensor remaining = scores;
  Tensor mask = scores.zeros_like();
  for (int64_t i = 0; i < k; ++i) {
    const Tensor chosen = eq(remaining, remaining.max({-1}, true));
    mask = mask + chosen.cast(scores.dtype());
    remaining = where(chosen, -std::numeric_limits<double>::infinity(), remaining);
  }
  return mask;
}

MoE::MoE(Graph& g, const std::string& name, int64_t dim, int64_t hidden, int64_t experts,
         int64_t top_k_, bool renormalize_, const MoENames& names_)
    : router(g, name + "." + names_.router, dim, experts, false),
      top_k(top_k_),
      renormalize(renormalize_),
      names(names_) {
  for (int64_t e = 0; e < experts; ++e) {
    const std::string p = name + "." + names.expert + "." + std::to_string(e) + ".";
    gates.emplace_back(g, p + names.gate, dim, hidden, false);
    ups.emplace_back(g, p + names.up, dim, hidden, false);
    downs.emplace_back(g, p + names.down, hidden, dim, false);
  }
}

Tensor MoE::forward(const Tensor& x) const {
  const Tensor probs = router.forward(x).softmax(-1);  // [seq, experts]
  Tensor weights = where(gt(top_k_mask(probs, top_k), 0.0), probs, 0.0);
  if (renormalize) weights = weights / weights.sum({-1}, true);
  Tensor out;
  for (size_t e = 0; e < gates.size(); ++e) {
    const Tensor y = downs[e].forward(gates[e].forward(x).silu() * ups[e].forward(x));
    const Tensor w =
        weights.slice(1, static_cast<int64_t>(e), static_cast<int64_t>(e) + 1);  // [seq, 1]
    out = e == 0 ? y * w : out + y * w;
  }
  return out;
}

void MoE::parameters(const std::string& prefix, NamedTensors& out) const {
  router.parameters(prefix + names.router + ".", out);
  for (size_t e = 0; e < gates.size(); ++e) {
    const std::string p = prefix + names.expert + "." + std::to_string(e) + ".";
    gates[e].parameters(p + names.gate + ".", out);
    ups[e].parameters(p + names.up + ".", out);
    downs[e].parameters(p + names.down + ".", out);
  }
}

}  // namespace luminal::nn

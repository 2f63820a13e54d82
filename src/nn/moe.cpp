// Mixture-of-experts block.
#include "luminal/nn/moe.hpp"

#include "luminal/error.hpp"

namespace luminal::nn {

MoE::MoE(Graph& g, const std::string& name, int64_t dim, int64_t hidden, int64_t experts,
         int64_t top_k_, bool renormalize_, const MoENames& names_)
    : router(g, name + "." + names_.router, dim, experts, false),
      top_k(top_k_),
      renormalize(renormalize_),
      names(names_) {
  LUM_CHECK(top_k > 0 && top_k <= experts)
      << name << ": " << top_k << " experts a token of " << experts;
  const std::string p = name + "." + names.expert + ".";
  gates = parameter(g, p + names.gate + ".weight", {experts, hidden, dim});
  ups = parameter(g, p + names.up + ".weight", {experts, hidden, dim});
  downs = parameter(g, p + names.down + ".weight", {experts, dim, hidden});
}

Tensor MoE::forward(const Tensor& x) const {
  const Tensor probs = router.forward(x).softmax(-1);  // [seq, experts]
  const Tensor ids = luminal::top_k(probs, top_k);     // [seq, k]
  Tensor weights = probs.gather_axis(1, ids);          // [seq, k]
  if (renormalize) weights = weights / weights.sum({-1}, true);
  const Tensor rows = x.unsqueeze(1);  // [seq, 1, dim]: one row for all k experts
  // The gate and up projections as one op (the rows prepared once): [seq, k, 2 hidden].
  const Tensor gate_up = expert_matmul(rows, {gates, ups}, ids);
  const int64_t hidden = *gates.dim(1).as_const();
  const Tensor h = gate_up.slice(2, 0, hidden).silu() * gate_up.slice(2, hidden, 2 * hidden);
  const Tensor y = expert_matmul(h, downs, ids);  // [seq, k, dim]
  return (y * weights.unsqueeze(-1)).sum({1});
}

void MoE::parameters(const std::string& prefix, NamedTensors& out) const {
  router.parameters(prefix + names.router + ".", out);
  const std::string p = prefix + names.expert + ".";
  out.emplace_back(p + names.gate + ".weight", gates);
  out.emplace_back(p + names.up + ".weight", ups);
  out.emplace_back(p + names.down + ".weight", downs);
}

}  // namespace luminal::nn

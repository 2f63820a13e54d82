// Value lifetimes over the kernel order (see liveness.hpp).
#include "runtime/liveness.hpp"

#include <algorithm>

namespace luminal::runtime {

Liveness plan_liveness(const Graph& g, const compiler::KernelPlan& plan) {
  Liveness l;
  l.slot_of.assign(g.num_nodes(), -1);
  for (size_t k = 0; k < plan.kernels.size(); ++k)
    l.slot_of[plan.kernels[k].root.value] = static_cast<int32_t>(k);
  std::vector<size_t> last_use(g.num_nodes(), 0);
  for (size_t k = 0; k < plan.kernels.size(); ++k)
    for (NodeId r : plan.kernels[k].reads) last_use[r.value] = k;
  for (size_t k = 0; k < plan.kernels.size(); ++k) {
    const auto begin = static_cast<uint32_t>(l.frees.size());
    l.frees_begin.push_back(begin);
    for (NodeId r : plan.kernels[k].reads) {
      const int32_t slot = l.slot_of[r.value];
      if (slot >= 0 && last_use[r.value] == k && !g.is_output(r) &&
          std::find(l.frees.begin() + begin, l.frees.end(), slot) == l.frees.end())
        l.frees.push_back(slot);
    }
  }
  l.frees_begin.push_back(static_cast<uint32_t>(l.frees.size()));
  return l;
}

}  // namespace luminal::runtime

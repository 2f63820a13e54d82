// Value lifetimes over the kernel order (see liveness.hpp).
#include "runtime/liveness.hpp"

#include <algorithm>
#include <optional>

#include "luminal/collective.hpp"

namespace luminal::runtime {

Liveness plan_liveness(const Graph& g, const compiler::KernelPlan& plan) {
  const size_t kernels = plan.kernels.size();
  Liveness l;
  l.slot_of.assign(g.num_nodes(), -1);
  for (size_t k = 0; k < kernels; ++k)
    l.slot_of[plan.kernels[k].root.value] = static_cast<int32_t>(k);
  std::vector<size_t> last_use(g.num_nodes(), 0);
  std::vector<std::optional<size_t>> first_use(g.num_nodes());
  for (size_t k = 0; k < kernels; ++k)
    for (NodeId r : plan.kernels[k].reads) {
      last_use[r.value] = k;
      if (!first_use[r.value]) first_use[r.value] = k;
    }
  // A collective may still be reading its operands while the kernels after it run (the
  // CUDA backend runs it beside them until its value is first read): they are held
  // until then, or for the whole run where no kernel reads its value.
  std::vector<std::vector<NodeId>> held_until(kernels);
  for (size_t k = 0; k < kernels; ++k) {
    const Node& n = g.node(plan.kernels[k].root);
    if (n.op != Op::Custom || !dynamic_cast<const CollectiveOp*>(n.custom.get())) continue;
    const std::optional<size_t> reader = first_use[plan.kernels[k].root.value];
    for (NodeId r : plan.kernels[k].reads) {
      if (!reader) {
        last_use[r.value] = kernels;  // never released
      } else if (last_use[r.value] < *reader) {
        last_use[r.value] = *reader;
        held_until[*reader].push_back(r);
      }
    }
  }
  for (size_t k = 0; k < kernels; ++k) {
    const auto begin = static_cast<uint32_t>(l.frees.size());
    l.frees_begin.push_back(begin);
    const auto release = [&](NodeId r) {
      const int32_t slot = l.slot_of[r.value];
      if (slot >= 0 && last_use[r.value] == k && !g.is_output(r) &&
          std::find(l.frees.begin() + begin, l.frees.end(), slot) == l.frees.end())
        l.frees.push_back(slot);
    };
    for (NodeId r : plan.kernels[k].reads) release(r);
    for (NodeId r : held_until[k]) release(r);
  }
  l.frees_begin.push_back(static_cast<uint32_t>(l.frees.size()));
  return l;
}

}  // namespace luminal::runtime

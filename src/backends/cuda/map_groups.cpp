// Independent elementwise kernels moved together (see map_groups.hpp).
#include "backends/cuda/map_groups.hpp"

#include <algorithm>
#include <unordered_map>
#include <utility>
#include <vector>

#include "backends/cuda/codegen.hpp"

namespace luminal::cudagen {

void adjoin_independent_maps(const Graph& g, compiler::KernelPlan& plan) {
  constexpr size_t kNone = ~size_t{0};
  std::vector<compiler::Kernel> order;
  order.reserve(plan.kernels.size());
  std::unordered_map<uint32_t, size_t> made_at;  // a kernel's value -> its place in `order`
  // The run of elementwise kernels that `order` ends its last such run with: [begin, end).
  size_t run_begin = kNone, run_end = kNone;
  for (compiler::Kernel& kn : plan.kernels) {
    const bool map = elementwise(g, kn);
    size_t at = order.size();
    if (map && run_begin != kNone) {
      size_t latest = 0;  // one past the place of the last kernel it reads
      for (NodeId r : kn.reads)
        if (const auto it = made_at.find(plan.canon(r).value); it != made_at.end())
          latest = std::max(latest, it->second + 1);
      // (A kernel of inputs alone stays: moved up, a large one would only hold memory longer.)
      if (latest > 0 && latest <= run_begin) at = run_end;
    }
    if (map && at != order.size()) {
      for (auto& [value, place] : made_at)
        if (place >= at) ++place;
      order.insert(order.begin() + static_cast<std::ptrdiff_t>(at), std::move(kn));
      made_at[plan.canon(order[at].root).value] = at;
      ++run_end;
      continue;
    }
    made_at[plan.canon(kn.root).value] = at;
    order.push_back(std::move(kn));
    if (!map) continue;
    if (run_end != at) run_begin = at;  // a new run
    run_end = at + 1;
  }
  plan.kernels = std::move(order);
}

}  // namespace luminal::cudagen

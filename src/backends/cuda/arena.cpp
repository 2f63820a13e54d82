#include "backends/cuda/arena.hpp"

#include <iterator>
#include <map>

namespace luminal::cudagen {

ArenaPlan plan_arena(const std::vector<size_t>& sizes,
                     const std::vector<std::pair<uint32_t, uint32_t>>& releases,
                     const std::vector<int32_t>& frees) {
  constexpr size_t kAlign = 256;
  ArenaPlan plan;
  plan.offsets.assign(sizes.size(), 0);
  std::vector<size_t> placed(sizes.size(), 0);  // aligned sizes
  std::map<size_t, size_t> holes;               // free ranges below plan.bytes: offset -> size
  for (size_t k = 0; k < sizes.size(); ++k) {
    if (sizes[k] > 0) {
      const size_t need = (sizes[k] + kAlign - 1) / kAlign * kAlign;
      placed[k] = need;
      auto hole = holes.begin();
      while (hole != holes.end() && hole->second < need) ++hole;
      if (hole != holes.end()) {
        plan.offsets[k] = hole->first;
        if (hole->second > need) holes.emplace(hole->first + need, hole->second - need);
        holes.erase(hole);
      } else if (!holes.empty() &&
                 std::prev(holes.end())->first + std::prev(holes.end())->second == plan.bytes) {
        // The last hole reaches the end: the value starts there and the arena grows.
        auto last = std::prev(holes.end());
        plan.offsets[k] = last->first;
        plan.bytes = last->first + need;
        holes.erase(last);
      } else {
        plan.offsets[k] = plan.bytes;
        plan.bytes += need;
      }
    }
    for (uint32_t i = releases[k].first; i < releases[k].second; ++i) {
      const auto v = static_cast<size_t>(frees[i]);
      if (placed[v] == 0) continue;
      // Give the range back, merged with the holes on either side.
      size_t at = plan.offsets[v], size = placed[v];
      auto next = holes.lower_bound(at);
      if (next != holes.end() && next->first == at + size) {
        size += next->second;
        next = holes.erase(next);
      }
      if (next != holes.begin()) {
        auto before = std::prev(next);
        if (before->first + before->second == at) {
          at = before->first;
          size += before->second;
          holes.erase(before);
        }
      }
      holes.emplace(at, size);
    }
  }
  return plan;
}

size_t with_headroom(size_t bytes) {
  return bytes + bytes / 8;
}

}  // namespace luminal::cudagen

// Where each computed value of a run lives in one device allocation (private to
// src/backends/cuda): values are placed first-fit in kernel order and their space is
// reused once their last reader has run, so the arena is close to the peak of what is
// live at once, and a run's addresses are the same whenever its sizes are (which a
// captured CUDA graph needs).
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace luminal::cudagen {

struct ArenaPlan {
  std::vector<size_t> offsets;  // by kernel (meaningless where its size is 0)
  size_t bytes = 0;             // the arena's size
};

/// Offsets for values of `sizes[k]` bytes (0: not in the arena), each 256-byte aligned:
/// value k is placed when kernel k runs, and after it the values
/// frees[releases[k].first .. releases[k].second) are released.
ArenaPlan plan_arena(const std::vector<size_t>& sizes,
                     const std::vector<std::pair<uint32_t, uint32_t>>& releases,
                     const std::vector<int32_t>& frees);

/// The room planned for a value of `bytes` whose size follows the dims: an eighth more, so
/// it can grow that much in its place.
size_t with_headroom(size_t bytes);

}  // namespace luminal::cudagen

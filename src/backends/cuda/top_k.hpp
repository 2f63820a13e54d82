// TopK on the GPU (luminal/top_k_op.hpp; private to src/backends/cuda): a block selects
// the k largest by the radix of their order-preserving 32-bit keys, then sorts those k; a
// long row is cut into slices whose picks one block then selects from. A sampled token's candidates
// are picked where the logits lie. Compiled by NVRTC on first use, like the generated kernels.
#pragma once

#include <memory>
#include <string>

#include "backends/cuda/device.hpp"
#include "backends/cuda/nvrtc.hpp"
#include "luminal/dtype.hpp"
#include "luminal/view.hpp"

namespace luminal::cudagen {

/// The most positions one launch picks a row.
constexpr int64_t kTopKMost = 1024;
/// Rows of at most kTopKWarpMost values with at most kTopKWarpPicks picks take a warp a
/// row (LUM_TK_WARP_MOST; four rows a block), k rounds of a warp-wide maximum: a router
/// picking 8 of 128 experts took 10 us in the block-a-row kernel.
constexpr int64_t kTopKWarpMost = 1024, kTopKWarpPicks = 16;
/// The fewest values a slice of a long row takes (and at least 4 k).
constexpr int64_t kTopKSliceLeast = 8192;

/// The kernels' CUDA source (CI compiles it for sm_90).
std::string top_k_source();

class TopK {
 public:
  explicit TopK(const Device& device) : device_(device) {}

  /// out[row, :k] = the positions of row's k largest values (TopKOp's order) for rows of
  /// `x` (f32, f16 or bf16) over device memory. False, launching nothing, where the view
  /// is not dense or k is past kTopKMost: the caller runs the op elsewhere.
  bool run(const ConcreteView& x, const void* data, DType type, int64_t k, void* out);

 private:
  const Device& device_;
  std::unique_ptr<Module> module_;  // loaded on first use
  DeviceBuffer candidates_;         // the slices' picks: keys, then positions
};

}  // namespace luminal::cudagen

// Tensor maps: the descriptors Hopper's tensor memory accelerator (TMA) copies tiles of
// global memory into shared memory by, encoded on the host through the driver's
// cuTensorMapEncodeTiled (found at run time, so that nothing links libcuda).
#pragma once

#include <cstdint>
#include <vector>

namespace luminal::cudagen {

/// The encoded map as a kernel takes it (a __grid_constant__ parameter of 128 bytes).
struct alignas(64) TensorMap {
  uint64_t words[16] = {};
};

/// A map of 16-bit elements at `base`: dims[0] contiguous, dims[i] `strides[i - 1]`
/// elements apart (1 to 5 dims), copied in boxes of `box` elements a dim; rows of the
/// box 128 bytes long (box[0] = 64) land swizzled in 16-byte pieces, piece j of row r at
/// j ^ (r % 8); elements past a dim's end read as zero. False where the driver refuses
/// (a stride or the base not a multiple of 16 bytes, no driver entry point).
bool encode_swizzled_map(TensorMap& map, const void* base, const std::vector<uint64_t>& dims,
                         const std::vector<uint64_t>& strides, const std::vector<uint32_t>& box);

}  // namespace luminal::cudagen

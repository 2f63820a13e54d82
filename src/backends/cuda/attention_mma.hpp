// Attention on tensor cores (private to src/backends/cuda): the kernel Attention runs
// when many query rows share each key head (a prompt), keys and values are f16 or bf16
// and the GPU has sm_80's matrix instructions. Same parameter block and split pieces as
// the kernel on CUDA cores (attention_common.hpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "luminal/dtype.hpp"

namespace luminal::cudagen {

/// Query rows of a block (16 a warp) and keys of a tile.
constexpr int64_t kMmaAttentionRows = 64, kMmaAttentionKeys = 64;

/// What one compiled specialisation fixes. Keys and values are f16 or bf16, each the
/// type of its product's operands; queries are of the keys' type, or f32, which is then
/// split into two of the keys' type (and the weights into two of the values'), so that
/// the products keep f32's precision at twice the work.
struct MmaAttentionKernel {
  DType q = DType::F32, k = DType::F16, v = DType::F16, out = DType::F32;
  int64_t d = 0, dv = 0;  // multiples of 16, at most 256
};

/// Whether the kernel takes these types and head dims.
bool mma_attention_supports(DType q, DType k, DType v, int64_t d, int64_t dv);

/// The kernel's CUDA source (lum_attention_mma and the combine kernel).
std::string mma_attention_source(const MmaAttentionKernel& spec);

/// Dynamic shared memory a block takes.
size_t mma_attention_shared_bytes(const MmaAttentionKernel& spec);

}  // namespace luminal::cudagen

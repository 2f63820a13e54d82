// Attention streamed through shared memory (private to src/backends/cuda): the kernel
// Attention runs when few query rows share each key head (decoding, and prompts too
// short for the tensor-core kernel) and every key and value row is read in 16-byte
// pieces. Same parameter block and splits as the other two kernels
// (attention_common.hpp), and the same combine of split pieces (lum_attention_combine).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "luminal/dtype.hpp"

namespace luminal::cudagen {

/// What one compiled specialisation fixes.
struct StreamAttentionKernel {
  DType q = DType::F32, k = DType::F16, v = DType::F16, out = DType::F32;
  int64_t d = 0, dv = 0;  // query/key and value head dims
  int rows = 1;           // query rows of a block, up to stream_attention_max_rows
  /// The products on tensor cores (the tensor-core kernel's types and head dims, and a
  /// positive scale: mma_attention_supports), else on CUDA cores.
  bool tensor_cores = false;
};

/// Query rows of a block at most: 16 on tensor cores (their products' rows), else 8.
constexpr int64_t stream_attention_max_rows(bool tensor_cores) {
  return tensor_cores ? 16 : 8;
}

/// Whether the kernel takes these types and head dims: a key row and a value row of as
/// many 16-byte pieces, a power of two up to 32 of them.
bool stream_attention_supports(DType k, DType v, int64_t d, int64_t dv);

/// The kernel's CUDA source (lum_attention_stream), for sm_80 on.
std::string stream_attention_source(const StreamAttentionKernel& spec);

/// Dynamic shared memory a block takes.
size_t stream_attention_shared_bytes(const StreamAttentionKernel& spec);

/// The keys of a warp's stage: a split's keys come in whole stages.
int64_t stream_attention_stage_keys(const StreamAttentionKernel& spec);

}  // namespace luminal::cudagen

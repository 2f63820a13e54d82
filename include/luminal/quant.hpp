// Block-quantised weight formats (the ggml family: Q4_0 ... Q6_K) as a core numeric
// capability: layouts and exact decoding. Loaders read them; kernels compute on them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace luminal {

/// Node::quant of an input stored as plain elements of its dtype.
inline constexpr uint32_t kPlainStorage = UINT32_MAX;

/// Name ("Q4_K", ...) or "type N" for an unknown ggml type number.
std::string ggml_type_name(uint32_t type);
/// Elements per block and bytes per block; false for a type we cannot decode.
bool ggml_block_layout(uint32_t type, size_t& block_elems, size_t& block_bytes);
/// Decodes `n` elements (whole blocks) of `type` from `src` into floats; throws for an
/// unsupported type.
void dequantize(uint32_t type, const std::byte* src, size_t n, float* dst);
/// Bytes of `n` elements (whole blocks) of `type`; throws for an unsupported type or a
/// partial block.
size_t quantized_bytes(uint32_t type, size_t n);

}  // namespace luminal

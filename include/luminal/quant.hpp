// Block-quantised weight formats (the ggml family: Q4_0 ... Q6_K) as a core numeric
// capability: layouts and exact decoding. Loaders read them; kernels compute on them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "luminal/dtype.hpp"

namespace luminal {

/// ggml tensor types (the numbers are the format's).
enum class GgmlType : uint32_t {
  F32 = 0,
  F16 = 1,
  Q4_0 = 2,
  Q4_1 = 3,
  Q5_0 = 6,
  Q5_1 = 7,
  Q8_0 = 8,
  Q8_1 = 9,
  Q2_K = 10,
  Q3_K = 11,
  Q4_K = 12,
  Q5_K = 13,
  Q6_K = 14,
  Q8_K = 15,
  BF16 = 30,
};

/// The 6-bit scale and min of sub-block j (0..7) in a Q4_K / Q5_K block's packed 12-byte
/// scale table.
inline void ggml_k4_scale_min(int j, const uint8_t* s, int& sc, int& m) {
  if (j < 4) {
    sc = s[j] & 63;
    m = s[j + 4] & 63;
  } else {
    sc = (s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4);
    m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
}

/// Node::quant of an input stored as plain elements of its dtype.
inline constexpr uint32_t kPlainStorage = UINT32_MAX;

/// The ggml type that stores plain elements of `dtype` as they are (F32, F16, BF16), or
/// nullopt for any other dtype.
std::optional<uint32_t> ggml_type_of(DType dtype);

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

// Weights in ggml's block formats for the benchmarks (bench_quant, bench_cuda): random
// quant bits, with the f16 scale fields (where random bits could be NaN or huge) set to
// 0.01. Their speed does not depend on the values.
#pragma once

#include <cstdint>
#include <cstring>
#include <random>

#include "luminal/luminal.hpp"

namespace luminal::bench {

/// rows x k elements of ggml type `type` (k a whole number of blocks).
inline Buffer random_blocks(uint32_t type, int64_t rows, int64_t k, uint32_t seed) {
  size_t elems = 0, bytes = 0;
  ggml_block_layout(type, elems, bytes);
  const size_t count = static_cast<size_t>(rows * k) / elems;
  Buffer raw(DType::U8, count * bytes);
  auto* p = static_cast<uint8_t*>(raw.data());
  std::mt19937 rng(seed);
  for (size_t i = 0; i < raw.numel(); ++i) p[i] = static_cast<uint8_t>(rng());
  const uint16_t scale = f16_bits_from_double(0.01);
  const size_t at = type == 14 ? 208 : 0;  // Q6_K keeps d at the end
  for (size_t b = 0; b < count; ++b) {
    std::memcpy(p + b * bytes + at, &scale, 2);
    if (type == 12 || type == 13 || type == 3 || type == 7)  // and a min: Q4_K, Q5_K, Q4_1, Q5_1
      std::memcpy(p + b * bytes + 2, &scale, 2);
  }
  return raw;
}

}  // namespace luminal::bench

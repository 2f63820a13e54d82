// Random weights in ggml's block formats for tests: random quant bits, with the f16
// scale fields (where random bits could be NaN or huge) set to small finite values; plain
// float formats get random values in [-1, 1].
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "luminal/buffer.hpp"
#include "luminal/dtype.hpp"
#include "luminal/quant.hpp"

namespace luminal::testing {

inline void put_half(std::byte* p, double v) {
  const uint16_t h = f16_bits_from_double(v);
  std::memcpy(p, &h, 2);
}

/// rows x cols elements of ggml type `type` (cols a whole number of blocks).
inline Buffer random_blocks(uint32_t type, size_t rows, size_t cols, uint64_t seed) {
  size_t elems = 0, bytes = 0;
  EXPECT_TRUE(ggml_block_layout(type, elems, bytes));
  const size_t blocks = rows * cols / elems;
  Buffer raw(DType::U8, blocks * bytes);
  auto* p = static_cast<std::byte*>(raw.data());
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> scale(0.001, 0.02), value(-1, 1);
  for (size_t i = 0; i < raw.numel(); ++i) p[i] = static_cast<std::byte>(rng() & 0xFF);
  for (size_t b = 0; b < blocks; ++b) {
    std::byte* blk = p + b * bytes;
    switch (type) {
      case 0: {
        const float v = static_cast<float>(value(rng));
        std::memcpy(blk, &v, 4);
        break;
      }
      case 1:
        put_half(blk, value(rng));
        break;
      case 30: {
        const uint16_t h = bf16_bits_from_double(value(rng));
        std::memcpy(blk, &h, 2);
        break;
      }
      case 2:
      case 6:
      case 8:
        put_half(blk, scale(rng));
        break;
      case 3:
      case 7:
      case 12:
      case 13:
        put_half(blk, scale(rng));
        put_half(blk + 2, scale(rng));
        break;
      case 14:
        put_half(blk + 208, scale(rng) * 0.05);
        break;
      default:
        ADD_FAILURE() << "no generator for type " << type;
    }
  }
  return raw;
}

}  // namespace luminal::testing

// DTypes: the table, and half-precision rounding checked against IEEE edge values,
// the compiler's own _Float16 conversion, and the classic bf16 rounding formula.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "luminal/buffer.hpp"
#include "luminal/dtype.hpp"
#include "luminal/error.hpp"

namespace luminal {
namespace {

TEST(DType, Table) {
  EXPECT_EQ(dtype_size(DType::F32), 4u);
  EXPECT_EQ(dtype_size(DType::BF16), 2u);
  EXPECT_EQ(dtype_size(DType::F64), 8u);
  EXPECT_EQ(dtype_size(DType::I64), 8u);
  EXPECT_EQ(dtype_size(DType::Bool), 1u);
  EXPECT_EQ(dtype_c_type(DType::I32), "int32_t");
  for (DType t : kAllDTypes) EXPECT_EQ(dtype_from_name(dtype_name(t)), t);
  EXPECT_THROW(dtype_from_name("f8"), Error);
  EXPECT_TRUE(is_float(DType::BF16));
  EXPECT_FALSE(is_float(DType::I8));
  EXPECT_TRUE(is_integer(DType::U8));
  EXPECT_FALSE(is_integer(DType::Bool));
}

TEST(DType, F16EdgeValues) {
  EXPECT_EQ(f16_bits_from_double(0.0), 0x0000);
  EXPECT_EQ(f16_bits_from_double(-0.0), 0x8000);
  EXPECT_EQ(f16_bits_from_double(1.0), 0x3C00);
  EXPECT_EQ(f16_bits_from_double(65504.0), 0x7BFF);                  // largest finite
  EXPECT_EQ(f16_bits_from_double(65519.99), 0x7BFF);                 // just below the overflow tie
  EXPECT_EQ(f16_bits_from_double(65520.0), 0x7C00);                  // tie rounds to even: infinity
  EXPECT_EQ(f16_bits_from_double(std::ldexp(1.0, -24)), 0x0001);     // smallest subnormal
  EXPECT_EQ(f16_bits_from_double(std::ldexp(1.0, -25)), 0x0000);     // tie to even: zero
  EXPECT_EQ(f16_bits_from_double(std::ldexp(3.0, -26)), 0x0001);     // 0.75 ulp rounds up
  EXPECT_EQ(f16_bits_from_double(std::ldexp(1023.5, -24)), 0x0400);  // rounds into normals
  EXPECT_EQ(f16_bits_from_double(1.0 + std::ldexp(1.0, -11)), 0x3C00);  // tie, even
  EXPECT_EQ(f16_bits_from_double(1.0 + std::ldexp(3.0, -11)), 0x3C02);  // tie, even up
  EXPECT_EQ(f16_bits_from_double(-std::numeric_limits<double>::infinity()), 0xFC00);
  const uint16_t nan = f16_bits_from_double(std::nan(""));
  EXPECT_EQ(nan & 0x7C00, 0x7C00);
  EXPECT_NE(nan & 0x03FF, 0);
}

TEST(DType, F16AllPatternsRoundTrip) {
  for (uint32_t b = 0; b < 65536; ++b) {
    const auto bits = static_cast<uint16_t>(b);
    const float f = f16_bits_to_float(bits);
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(f16_bits_to_float(f16_bits_from_double(f))));
      continue;
    }
    ASSERT_EQ(f16_bits_from_double(f), bits) << std::hex << b;
  }
}

TEST(DType, F16MatchesCompilerConversion) {
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> mant(1.0, 2.0);
  std::uniform_int_distribution<int> exp(-30, 17);
  for (int k = 0; k < 200000; ++k) {
    double d = std::ldexp(mant(rng), exp(rng));
    if (k % 2) d = -d;
    const _Float16 h = static_cast<_Float16>(d);
    uint16_t want;
    std::memcpy(&want, &h, 2);
    ASSERT_EQ(f16_bits_from_double(d), want) << d;
  }
}

uint16_t bf16_reference(float f) {
  const uint32_t bits = std::bit_cast<uint32_t>(f);
  return static_cast<uint16_t>((bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16);
}

TEST(DType, BF16MatchesRoundingFormula) {
  std::mt19937 rng(11);
  for (int k = 0; k < 200000; ++k) {
    const uint32_t bits = static_cast<uint32_t>(rng());
    const float f = std::bit_cast<float>(bits);
    if (std::isnan(f)) continue;
    ASSERT_EQ(bf16_bits_from_double(f), bf16_reference(f)) << std::hex << bits;
  }
  EXPECT_EQ(bf16_bits_from_double(1.0 + std::ldexp(1.0, -8)), 0x3F80);  // tie, even
  EXPECT_EQ(bf16_bits_from_double(1.0 + std::ldexp(3.0, -8)), 0x3F82);  // tie, even up
  EXPECT_EQ(bf16_bits_from_double(std::numeric_limits<float>::max()), 0x7F80);
  // Just above a tie: rounding directly from double goes up, where a detour through
  // float would land exactly on the tie and round down to even.
  EXPECT_EQ(bf16_bits_from_double(1.0 + std::ldexp(1.0, -8) + std::ldexp(1.0, -40)), 0x3F81);
  EXPECT_EQ(bf16_bits_from_double(std::nan("")) & 0x7FC0, 0x7FC0);
}

TEST(DType, BF16AllPatternsRoundTrip) {
  for (uint32_t b = 0; b < 65536; ++b) {
    const auto bits = static_cast<uint16_t>(b);
    const float f = bf16_bits_to_float(bits);
    if (std::isnan(f)) continue;
    ASSERT_EQ(bf16_bits_from_double(f), bits) << std::hex << b;
  }
}

TEST(DType, StorageTypes) {
  EXPECT_EQ(static_cast<float>(f16(0.5)), 0.5f);
  EXPECT_EQ(static_cast<float>(bf16(-2.0)), -2.0f);
  EXPECT_EQ(f16::from_bits(0x3C00).bits, 0x3C00);
}

// A half-precision matrix becomes block storage's bytes in place: the same memory, read
// as bytes, and it still grows like any buffer.
TEST(Buffer, IntoBytesKeepsTheMemory) {
  Buffer b(DType::BF16, 5);
  for (size_t i = 0; i < 5; ++i) b.set_f64(i, 1.5 * static_cast<double>(i) - 2);
  const Buffer copy = b;
  const void* memory = b.data();
  Buffer bytes = std::move(b).into_bytes();
  EXPECT_EQ(bytes.dtype(), DType::U8);
  EXPECT_EQ(bytes.numel(), 10u);
  EXPECT_EQ(bytes.data(), memory);
  EXPECT_EQ(std::memcmp(bytes.data(), copy.data(), 10), 0);
  EXPECT_EQ(b.numel(), 0u);
  bytes.resize(4000);
  EXPECT_EQ(std::memcmp(bytes.data(), copy.data(), 10), 0);
}

// Growth leaves room: a buffer grown by a prompt's rows takes the next rows where it lies,
// and rows added one at a time move it a logarithmic number of times.
TEST(Buffer, GrowthLeavesRoomForTheNextRows) {
  Buffer b(DType::F32, 0);
  b.resize(1101 * 256);
  b.set_f64(0, 7.0);
  const void* memory = b.data();
  b.resize(1102 * 256);
  EXPECT_EQ(b.data(), memory) << "the first row after the prompt moved the cache";
  int moves = 0;
  for (size_t rows = 1103; rows <= 100000; ++rows) {
    const void* before = b.data();
    b.resize(rows * 256);
    moves += b.data() != before;
  }
  EXPECT_LE(moves, 12);
  EXPECT_EQ(b.get_f64(0), 7.0);
}

}  // namespace
}  // namespace luminal

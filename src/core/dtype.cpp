// Element type table and half-precision rounding.
#include "luminal/dtype.hpp"

#include <bit>
#include <cmath>
#include <cstring>

#include "luminal/error.hpp"

namespace luminal {
namespace {

struct DTypeInfo {
  DType type;
  size_t size;
  std::string_view name;
  std::string_view c_type;
  bool is_float;
  bool is_integer;
};

constexpr DTypeInfo kInfo[] = {
    {DType::F32, 4, "f32", "float", true, false},
    {DType::F16, 2, "f16", "uint16_t", true, false},
    {DType::BF16, 2, "bf16", "uint16_t", true, false},
    {DType::F64, 8, "f64", "double", true, false},
    {DType::I32, 4, "i32", "int32_t", false, true},
    {DType::I64, 8, "i64", "int64_t", false, true},
    {DType::I8, 1, "i8", "int8_t", false, true},
    {DType::U8, 1, "u8", "uint8_t", false, true},
    {DType::Bool, 1, "bool", "uint8_t", false, false},
};

const DTypeInfo& info(DType t) {
  auto i = static_cast<size_t>(t);
  LUM_ASSERT(i < std::size(kInfo)) << "bad dtype " << i;
  return kInfo[i];
}

// Rounds x to the nearest value of a binary format with `exp_bits` exponent bits and
// `man_bits` stored mantissa bits (ties to even) and returns its bit pattern. Working
// from the double directly avoids the double rounding of double -> float -> half.
uint16_t round_to_half_format(double x, int exp_bits, int man_bits) {
  const uint32_t sign = std::signbit(x) ? 1u << (exp_bits + man_bits) : 0u;
  const uint32_t exp_all_ones = ((1u << exp_bits) - 1) << man_bits;
  if (std::isnan(x)) return static_cast<uint16_t>(sign | exp_all_ones | (1u << (man_bits - 1)));
  double a = std::fabs(x);
  const int bias = (1 << (exp_bits - 1)) - 1;
  const int emin = 1 - bias;
  if (std::isinf(a)) return static_cast<uint16_t>(sign | exp_all_ones);
  if (a == 0.0) return static_cast<uint16_t>(sign);
  int e2;
  std::frexp(a, &e2);  // a = f * 2^e2, f in [0.5, 1): leading bit has weight 2^(e2-1)
  int e = e2 - 1;
  if (e < emin) e = emin;  // subnormal range shares the quantum of the smallest normal
  // Mantissa units of 2^(e - man_bits); rint uses the default ties-to-even mode.
  double units = std::rint(std::ldexp(a, man_bits - e));
  // units in [2^man, 2^(man+1)] for normals; [0, 2^man] for subnormals. Reaching
  // 2^(man+1) moves to the next binade, which the encoding below absorbs.
  uint64_t u = static_cast<uint64_t>(units);
  uint64_t bits;
  if (u < (1ull << man_bits)) {
    bits = u;  // subnormal (or rounded to zero); exponent field 0
  } else {
    int biased = e - emin + 1;
    if (u == (1ull << (man_bits + 1))) {
      u >>= 1;
      ++biased;
    }
    if (biased >= (1 << exp_bits) - 1) return static_cast<uint16_t>(sign | exp_all_ones);
    bits = (static_cast<uint64_t>(biased) << man_bits) | (u - (1ull << man_bits));
  }
  return static_cast<uint16_t>(sign | bits);
}

}  // namespace

size_t dtype_size(DType t) {
  return info(t).size;
}
std::string_view dtype_name(DType t) {
  return info(t).name;
}
std::string_view dtype_c_type(DType t) {
  return info(t).c_type;
}
bool is_float(DType t) {
  return info(t).is_float;
}
bool is_integer(DType t) {
  return info(t).is_integer;
}

DType dtype_from_name(std::string_view name) {
  for (const auto& i : kInfo)
    if (i.name == name) return i.type;
  LUM_FAIL() << "unknown dtype '" << name
             << "' (expected one of f32, f16, bf16, f64, i32, i64, i8, u8, bool)";
}

uint16_t f16_bits_from_double(double x) {
  return round_to_half_format(x, 5, 10);
}
uint16_t bf16_bits_from_double(double x) {
  return round_to_half_format(x, 8, 7);
}

float bf16_bits_to_float(uint16_t b) {
  return std::bit_cast<float>(static_cast<uint32_t>(b) << 16);
}

}  // namespace luminal

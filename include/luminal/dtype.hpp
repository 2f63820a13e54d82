// Element types: sizes, names, C types, and the f16/bf16 storage types with
// round-to-nearest-even conversions.
#pragma once

#include <bit>
#include <cstdint>
#include <string>
#include <string_view>

namespace luminal {

enum class DType : uint8_t { F32, F16, BF16, F64, I32, I64, I8, U8, Bool };

inline constexpr DType kAllDTypes[] = {DType::F32, DType::F16, DType::BF16, DType::F64, DType::I32,
                                       DType::I64, DType::I8,  DType::U8,   DType::Bool};

/// Bytes per element.
size_t dtype_size(DType t);
/// Short name as printed and parsed: "f32", "bf16", "bool", ...
std::string_view dtype_name(DType t);
/// The C type a kernel uses to store the element ("float", "uint16_t", ...).
std::string_view dtype_c_type(DType t);
/// Parses a name from dtype_name; throws luminal::Error for an unknown name.
DType dtype_from_name(std::string_view name);
bool is_float(DType t);
/// True for the integer types (bool excluded).
bool is_integer(DType t);

/// Round-to-nearest-even conversions to half formats (NaN stays NaN, overflow
/// becomes infinity, tiny values become subnormals or signed zero).
uint16_t f16_bits_from_double(double x);
uint16_t bf16_bits_from_double(double x);
/// Exact widening conversions. The f16 one is inline, by bit assembly without libm:
/// quantised kernels call it for every block scale.
inline float f16_bits_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  const uint32_t exp = (h >> 10) & 0x1f;
  const uint32_t man = h & 0x3ff;
  if (exp == 0)  // zero or subnormal: man * 2^-24, exact in f32
    return std::bit_cast<float>(std::bit_cast<uint32_t>(static_cast<float>(man) * 0x1p-24f) | sign);
  if (exp == 31) return std::bit_cast<float>(sign | 0x7f800000u | (man << 13));
  return std::bit_cast<float>(sign | ((exp + 112) << 23) | (man << 13));
}
float bf16_bits_to_float(uint16_t bits);

/// IEEE binary16 storage type.
struct f16 {
  uint16_t bits = 0;
  f16() = default;
  explicit f16(double x) : bits(f16_bits_from_double(x)) {}
  static f16 from_bits(uint16_t b) {
    f16 h;
    h.bits = b;
    return h;
  }
  explicit operator float() const { return f16_bits_to_float(bits); }
};

/// bfloat16 storage type (the top half of an f32).
struct bf16 {
  uint16_t bits = 0;
  bf16() = default;
  explicit bf16(double x) : bits(bf16_bits_from_double(x)) {}
  static bf16 from_bits(uint16_t b) {
    bf16 h;
    h.bits = b;
    return h;
  }
  explicit operator float() const { return bf16_bits_to_float(bits); }
};

/// Maps a C++ element type to its DType (used by typed data accessors).
template <class T>
struct dtype_of;
template <>
struct dtype_of<float> {
  static constexpr DType value = DType::F32;
};
template <>
struct dtype_of<f16> {
  static constexpr DType value = DType::F16;
};
template <>
struct dtype_of<bf16> {
  static constexpr DType value = DType::BF16;
};
template <>
struct dtype_of<double> {
  static constexpr DType value = DType::F64;
};
template <>
struct dtype_of<int32_t> {
  static constexpr DType value = DType::I32;
};
template <>
struct dtype_of<int64_t> {
  static constexpr DType value = DType::I64;
};
template <>
struct dtype_of<int8_t> {
  static constexpr DType value = DType::I8;
};
template <>
struct dtype_of<uint8_t> {
  static constexpr DType value = DType::U8;
};
template <>
struct dtype_of<bool> {
  static constexpr DType value = DType::Bool;
};

}  // namespace luminal

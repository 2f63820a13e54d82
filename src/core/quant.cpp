// Dequantisation of ggml block formats, following the format definitions (the
// arithmetic order matches ggml's reference decoders, so results are bit-exact).
#include <cstring>

#include "luminal/dtype.hpp"
#include "luminal/error.hpp"
#include "luminal/quant.hpp"

namespace luminal {
namespace {

float half(const std::byte* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return f16_bits_to_float(h);
}

uint8_t u8(const std::byte* p) {
  return static_cast<uint8_t>(*p);
}

void q4_0(const std::byte* b, float* y) {
  const float d = half(b);
  for (int j = 0; j < 16; ++j) {
    const uint8_t q = u8(b + 2 + j);
    y[j] = static_cast<float>((q & 0x0F) - 8) * d;
    y[j + 16] = static_cast<float>((q >> 4) - 8) * d;
  }
}

void q4_1(const std::byte* b, float* y) {
  const float d = half(b), m = half(b + 2);
  for (int j = 0; j < 16; ++j) {
    const uint8_t q = u8(b + 4 + j);
    y[j] = static_cast<float>(q & 0x0F) * d + m;
    y[j + 16] = static_cast<float>(q >> 4) * d + m;
  }
}

void q5_0(const std::byte* b, float* y) {
  const float d = half(b);
  uint32_t qh;
  std::memcpy(&qh, b + 2, 4);
  for (int j = 0; j < 16; ++j) {
    const uint8_t q = u8(b + 6 + j);
    const int hi0 = static_cast<int>(((qh >> j) << 4) & 0x10);
    const int hi1 = static_cast<int>((qh >> (j + 12)) & 0x10);
    y[j] = static_cast<float>(((q & 0x0F) | hi0) - 16) * d;
    y[j + 16] = static_cast<float>(((q >> 4) | hi1) - 16) * d;
  }
}

void q5_1(const std::byte* b, float* y) {
  const float d = half(b), m = half(b + 2);
  uint32_t qh;
  std::memcpy(&qh, b + 4, 4);
  for (int j = 0; j < 16; ++j) {
    const uint8_t q = u8(b + 8 + j);
    const int hi0 = static_cast<int>(((qh >> j) << 4) & 0x10);
    const int hi1 = static_cast<int>((qh >> (j + 12)) & 0x10);
    y[j] = static_cast<float>((q & 0x0F) | hi0) * d + m;
    y[j + 16] = static_cast<float>((q >> 4) | hi1) * d + m;
  }
}

void q8_0(const std::byte* b, float* y) {
  const float d = half(b);
  for (int j = 0; j < 32; ++j) y[j] = static_cast<float>(static_cast<int8_t>(u8(b + 2 + j))) * d;
}

// The 6-bit scale and min of sub-block j (quant.hpp's table reader, on std::byte).
void scale_min_k4(int j, const std::byte* s, int& sc, int& m) {
  ggml_k4_scale_min(j, reinterpret_cast<const uint8_t*>(s), sc, m);
}

void q4_k(const std::byte* b, float* y) {
  const float d = half(b), dmin = half(b + 2);
  const std::byte* scales = b + 4;
  const std::byte* q = b + 16;
  for (int j = 0, is = 0; j < 256; j += 64, is += 2) {
    int sc, m;
    scale_min_k4(is, scales, sc, m);
    const float d1 = d * sc, m1 = dmin * m;
    scale_min_k4(is + 1, scales, sc, m);
    const float d2 = d * sc, m2 = dmin * m;
    for (int l = 0; l < 32; ++l) y[l] = d1 * static_cast<float>(u8(q + l) & 0xF) - m1;
    for (int l = 0; l < 32; ++l) y[32 + l] = d2 * static_cast<float>(u8(q + l) >> 4) - m2;
    q += 32;
    y += 64;
  }
}

void q5_k(const std::byte* b, float* y) {
  const float d = half(b), dmin = half(b + 2);
  const std::byte* scales = b + 4;
  const std::byte* qh = b + 16;
  const std::byte* ql = b + 48;
  uint8_t u1 = 1, u2 = 2;
  for (int j = 0, is = 0; j < 256; j += 64, is += 2) {
    int sc, m;
    scale_min_k4(is, scales, sc, m);
    const float d1 = d * sc, m1 = dmin * m;
    scale_min_k4(is + 1, scales, sc, m);
    const float d2 = d * sc, m2 = dmin * m;
    for (int l = 0; l < 32; ++l)
      y[l] = d1 * static_cast<float>((u8(ql + l) & 0xF) + (u8(qh + l) & u1 ? 16 : 0)) - m1;
    for (int l = 0; l < 32; ++l)
      y[32 + l] = d2 * static_cast<float>((u8(ql + l) >> 4) + (u8(qh + l) & u2 ? 16 : 0)) - m2;
    ql += 32;
    y += 64;
    u1 = static_cast<uint8_t>(u1 << 2);
    u2 = static_cast<uint8_t>(u2 << 2);
  }
}

void q6_k(const std::byte* b, float* y) {
  const std::byte* ql = b;
  const std::byte* qh = b + 128;
  const std::byte* sc = b + 192;
  const float d = half(b + 208);
  for (int n = 0; n < 256; n += 128) {
    for (int l = 0; l < 32; ++l) {
      const int is = l / 16;
      const int q1 = static_cast<int>((u8(ql + l) & 0xF) | (((u8(qh + l) >> 0) & 3) << 4)) - 32;
      const int q2 =
          static_cast<int>((u8(ql + l + 32) & 0xF) | (((u8(qh + l) >> 2) & 3) << 4)) - 32;
      const int q3 = static_cast<int>((u8(ql + l) >> 4) | (((u8(qh + l) >> 4) & 3) << 4)) - 32;
      const int q4 = static_cast<int>((u8(ql + l + 32) >> 4) | (((u8(qh + l) >> 6) & 3) << 4)) - 32;
      auto s = [&](int k) { return static_cast<float>(static_cast<int8_t>(u8(sc + k))); };
      y[l] = d * s(is) * static_cast<float>(q1);
      y[l + 32] = d * s(is + 2) * static_cast<float>(q2);
      y[l + 64] = d * s(is + 4) * static_cast<float>(q3);
      y[l + 96] = d * s(is + 6) * static_cast<float>(q4);
    }
    y += 128;
    ql += 64;
    qh += 32;
    sc += 8;
  }
}

struct Format {
  uint32_t type;
  const char* name;
  size_t elems, bytes;
  void (*decode)(const std::byte*, float*);
};

void f32(const std::byte* b, float* y) {
  std::memcpy(y, b, 4);
}
void f16(const std::byte* b, float* y) {
  *y = half(b);
}
void bf16(const std::byte* b, float* y) {
  uint16_t h;
  std::memcpy(&h, b, 2);
  *y = bf16_bits_to_float(h);
}

constexpr Format kFormats[] = {
    {0, "F32", 1, 4, f32},        {1, "F16", 1, 2, f16},        {30, "BF16", 1, 2, bf16},
    {2, "Q4_0", 32, 18, q4_0},    {3, "Q4_1", 32, 20, q4_1},    {6, "Q5_0", 32, 22, q5_0},
    {7, "Q5_1", 32, 24, q5_1},    {8, "Q8_0", 32, 34, q8_0},    {12, "Q4_K", 256, 144, q4_k},
    {13, "Q5_K", 256, 176, q5_k}, {14, "Q6_K", 256, 210, q6_k},
};

const Format* format(uint32_t type) {
  for (const Format& f : kFormats)
    if (f.type == type) return &f;
  return nullptr;
}

}  // namespace

std::optional<uint32_t> ggml_type_of(DType dtype) {
  switch (dtype) {
    case DType::F32:
      return static_cast<uint32_t>(GgmlType::F32);
    case DType::F16:
      return static_cast<uint32_t>(GgmlType::F16);
    case DType::BF16:
      return static_cast<uint32_t>(GgmlType::BF16);
    default:
      return std::nullopt;
  }
}

std::string ggml_type_name(uint32_t type) {
  static const std::pair<uint32_t, const char*> kNames[] = {
      {9, "Q8_1"},    {10, "Q2_K"},    {11, "Q3_K"},  {15, "Q8_K"},   {16, "IQ2_XXS"},
      {17, "IQ2_XS"}, {18, "IQ3_XXS"}, {19, "IQ1_S"}, {20, "IQ4_NL"}, {21, "IQ3_S"},
      {22, "IQ2_S"},  {23, "IQ4_XS"},  {24, "I8"},    {25, "I16"},    {26, "I32"},
      {27, "I64"},    {28, "F64"},     {29, "IQ1_M"}};
  if (const Format* f = format(type)) return f->name;
  for (const auto& [t, n] : kNames)
    if (t == type) return n;
  return "type " + std::to_string(type);
}

bool ggml_block_layout(uint32_t type, size_t& block_elems, size_t& block_bytes) {
  const Format* f = format(type);
  if (!f) return false;
  block_elems = f->elems;
  block_bytes = f->bytes;
  return true;
}

size_t quantized_bytes(uint32_t type, size_t n) {
  const Format* f = format(type);
  LUM_CHECK(f) << "unsupported GGUF tensor type " << ggml_type_name(type);
  LUM_CHECK(n % f->elems == 0) << f->name << ": " << n << " elements is not a whole number of "
                               << f->elems << "-element blocks";
  return n / f->elems * f->bytes;
}

void dequantize(uint32_t type, const std::byte* src, size_t n, float* dst) {
  const Format* f = format(type);
  quantized_bytes(type, n);  // validates the type and the block count
  for (size_t i = 0; i < n / f->elems; ++i) f->decode(src + i * f->bytes, dst + i * f->elems);
}

}  // namespace luminal

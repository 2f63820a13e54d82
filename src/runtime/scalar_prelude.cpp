// The scalar helpers every generated kernel calls, one text for g++ and NVRTC, so that
// the two backends round, wrap and decode exactly alike (see element_writer.hpp for what
// a backend defines before it).
#include "runtime/element_writer.hpp"

namespace luminal::runtime {

std::string_view scalar_prelude() {
  return R"PRELUDE(
#ifndef LUM_NATIVE_HALF  // a backend may convert with its own instructions instead
LUM_FN float lum_h2f(uint16_t h) {
  const uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
  if (exp == 0) return lum_u2f(lum_f2u((float)man * 0x1p-24f) | sign);
  if (exp == 31) return lum_u2f(sign | 0x7f800000u | (man << 13));
  return lum_u2f(sign | ((exp + 112) << 23) | (man << 13));
}
// Round-to-nearest-even float -> binary16.
LUM_FN uint16_t lum_f2h(float f) {
  const uint32_t x = lum_f2u(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t a = x & 0x7fffffffu;
  if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u);
  if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);  // rounds to infinity
  if (a < 0x38800000u)  // subnormal or zero in half
    return (uint16_t)(sign | (uint32_t)rintf(lum_u2f(a) * 16777216.0f));
  const uint32_t mant_odd = (a >> 13) & 1u;
  a += 0xc8000fffu + mant_odd;  // rebias exponent (-112 << 23) and round
  return (uint16_t)(sign | (a >> 13));
}
#endif
#ifndef LUM_NATIVE_BF16
LUM_FN float lum_bf2f(uint16_t b) { return lum_u2f((uint32_t)b << 16); }
LUM_FN uint16_t lum_f2bf(float f) {
  const uint32_t x = lum_f2u(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40u);
  return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}
#endif
LUM_FN float lum_round_f16(float f) { return lum_h2f(lum_f2h(f)); }
LUM_FN float lum_round_bf16(float f) { return lum_bf2f(lum_f2bf(f)); }
// Float -> integer: truncate toward zero, saturate, NaN -> 0.
LUM_FN int64_t lum_f2i(double v, double lo, double hi) {
  if (v != v) return 0;
  v = trunc(v);
  if (v <= lo) return (int64_t)lo;
  if (v >= hi) return v >= 9.2233720368547758e18 ? (int64_t)0x7fffffffffffffffLL : (int64_t)hi;
  return (int64_t)v;
}
LUM_FN int64_t lum_wrap_add(int64_t a, int64_t b) { return (int64_t)((uint64_t)a + (uint64_t)b); }
LUM_FN int64_t lum_wrap_mul(int64_t a, int64_t b) { return (int64_t)((uint64_t)a * (uint64_t)b); }
LUM_FN int64_t lum_imod(int64_t a, int64_t b, int64_t* err, int64_t pos) {
  if (b == 0) { lum_fail(err, 3, a, pos); return 0; }
  return b == -1 ? 0 : a % b;
}
template <class T> LUM_FN T lum_max(T acc, T v) { return (acc != acc) ? acc : ((v != v || v > acc) ? v : acc); }
// One element of a block-stored (ggml format) input, as luminal::dequantize decodes it.
// Block data has no alignment, so multi-byte fields are read byte by byte.
LUM_FN uint32_t lum_ld16(const uint8_t* p) { return (uint32_t)p[0] | ((uint32_t)p[1] << 8); }
LUM_FN uint32_t lum_ld32(const uint8_t* p) { return lum_ld16(p) | (lum_ld16(p + 2) << 16); }
LUM_FN float lum_dq_half(const uint8_t* p) { return lum_h2f((uint16_t)lum_ld16(p)); }
LUM_FN float lum_dq_f32(const uint8_t* p, int64_t i) { return lum_u2f(lum_ld32(p + 4 * i)); }
LUM_FN float lum_dq_f16(const uint8_t* p, int64_t i) { return lum_dq_half(p + 2 * i); }
LUM_FN float lum_dq_bf16(const uint8_t* p, int64_t i) { return lum_bf2f((uint16_t)lum_ld16(p + 2 * i)); }
LUM_FN float lum_dq_q4_0(const uint8_t* p, int64_t i) {
  const uint8_t* b = p + (i / 32) * 18; const int j = (int)(i % 32);
  const uint8_t q = b[2 + j % 16];
  return (float)((j < 16 ? q & 0xF : q >> 4) - 8) * lum_dq_half(b);
}
LUM_FN float lum_dq_q4_1(const uint8_t* p, int64_t i) {
  const uint8_t* b = p + (i / 32) * 20; const int j = (int)(i % 32);
  const uint8_t q = b[4 + j % 16];
  return (float)(j < 16 ? q & 0xF : q >> 4) * lum_dq_half(b) + lum_dq_half(b + 2);
}
LUM_FN int lum_q5_value(const uint8_t* qh_at, const uint8_t* qs, int j) {
  const uint32_t qh = lum_ld32(qh_at);
  const uint8_t q = qs[j % 16];
  return (j < 16 ? q & 0xF : q >> 4) | (int)(((qh >> j) & 1u) << 4);
}
LUM_FN float lum_dq_q5_0(const uint8_t* p, int64_t i) {
  const uint8_t* b = p + (i / 32) * 22; const int j = (int)(i % 32);
  return (float)(lum_q5_value(b + 2, b + 6, j) - 16) * lum_dq_half(b);
}
LUM_FN float lum_dq_q5_1(const uint8_t* p, int64_t i) {
  const uint8_t* b = p + (i / 32) * 24; const int j = (int)(i % 32);
  return (float)lum_q5_value(b + 4, b + 8, j) * lum_dq_half(b) + lum_dq_half(b + 2);
}
LUM_FN float lum_dq_q8_0(const uint8_t* p, int64_t i) {
  const uint8_t* b = p + (i / 32) * 34;
  return (float)(int8_t)b[2 + i % 32] * lum_dq_half(b);
}
LUM_FN void lum_k4_scale_min(int j, const uint8_t* s, int* sc, int* m) {
  if (j < 4) { *sc = s[j] & 63; *m = s[j + 4] & 63; }
  else { *sc = (s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4); *m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4); }
}
LUM_FN float lum_dq_k4(const uint8_t* b, const uint8_t* qh, const uint8_t* qs, int j) {
  const int c = j / 64, l = j % 64, sub = 2 * c + (l >= 32);
  int sc, m; lum_k4_scale_min(sub, b + 4, &sc, &m);
  const uint8_t q = qs[32 * c + l % 32];
  int v = l < 32 ? q & 0xF : q >> 4;
  if (qh && ((qh[l % 32] >> sub) & 1)) v += 16;
  return lum_dq_half(b) * (float)sc * (float)v - lum_dq_half(b + 2) * (float)m;
}
LUM_FN float lum_dq_q4_k(const uint8_t* p, int64_t i) {
  const uint8_t* b = p + (i / 256) * 144;
  return lum_dq_k4(b, 0, b + 16, (int)(i % 256));
}
LUM_FN float lum_dq_q5_k(const uint8_t* p, int64_t i) {
  const uint8_t* b = p + (i / 256) * 176;
  return lum_dq_k4(b, b + 16, b + 48, (int)(i % 256));
}
LUM_FN float lum_dq_q6_k(const uint8_t* p, int64_t i) {
  const uint8_t* b = p + (i / 256) * 210; const int j = (int)(i % 256);
  const int h = j / 128, e = j % 128, l = e % 32, k = e / 32;
  const uint8_t lo = b[64 * h + l + 32 * (k & 1)];
  const int q = ((k < 2 ? lo & 0xF : lo >> 4) | (((b[128 + 32 * h + l] >> (2 * k)) & 3) << 4)) - 32;
  return lum_dq_half(b + 208) * (float)(int8_t)b[192 + 8 * h + l / 16 + 2 * k] * (float)q;
}
)PRELUDE";
}

}  // namespace luminal::runtime

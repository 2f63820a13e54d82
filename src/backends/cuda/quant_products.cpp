// Products over ggml block formats on the GPU (see quant_products.hpp).
#include "backends/cuda/quant_products.hpp"

#include <algorithm>

#include "backends/cuda/codegen.hpp"
#include "backends/cuda/device_trials.hpp"
#include "luminal/error.hpp"
#include "luminal/quant.hpp"

namespace luminal::cudagen {
namespace {

// The decoders follow src/core/quant.cpp (the format definitions) value for value. A
// 32-element sub-block is the unit: the whole block of the 32-element formats, one of
// eight of a K-format's 256.
constexpr const char* kSource = R"QUANT(
constexpr int kQSubs = LUM_Q_ELEMS / 32;  // sub-blocks a block

// What a sub-block's decode reads, loaded first into LUM_Q_WORDS 32-bit words (so that a
// lane has several sub-blocks' loads on their way before it decodes any). The 32-element
// formats' blocks and Q6_K's are only 2-byte aligned: read two bytes at a time. Q4_K's and
// Q5_K's keep rows 16-byte aligned: their quants are read 16 bytes at a time.
LUM_FN unsigned lum_q_u16(const unsigned char* p) { return *(const unsigned short*)p; }
// N bytes (even) from p into words r[at / 4 ...], little-endian, `at` a multiple of 4.
template <int N>
LUM_FN void lum_q_pairs(const unsigned char* p, unsigned* r) {
#pragma unroll
  for (int i = 0; i < (N + 3) / 4; ++i)
    r[i] = lum_q_u16(p + 4 * i) | (4 * i + 2 < N ? lum_q_u16(p + 4 * i + 2) << 16 : 0u);
}
LUM_FN void lum_q_quads(const unsigned char* p, unsigned* r) {  // 32 bytes, 16-aligned
  const uint4 a = ((const uint4*)p)[0], b = ((const uint4*)p)[1];
  r[0] = a.x, r[1] = a.y, r[2] = a.z, r[3] = a.w, r[4] = b.x, r[5] = b.y, r[6] = b.z, r[7] = b.w;
}
// Byte i of the loaded words (i known at compile time once the loops unroll).
LUM_FN unsigned lum_q_byte(const unsigned* r, int i) { return (r[i >> 2] >> (8 * (i & 3))) & 0xFF; }
// Byte i of the first four words, i known only at run time: chosen by selects, since
// indexing the words at run time would put them in local memory.
LUM_FN unsigned lum_q_head_byte(const unsigned* r, int i) {
  const unsigned w = i < 4 ? r[0] : i < 8 ? r[1] : i < 12 ? r[2] : r[3];
  return (w >> (8 * (i & 3))) & 0xFF;
}
LUM_FN float lum_q_half(unsigned bits) { return lum_h2f((uint16_t)(bits & 0xFFFF)); }

#if LUM_Q_FORMAT == 12
#define LUM_Q_WORDS 12
#elif LUM_Q_FORMAT == 13
#define LUM_Q_WORDS 20
#elif LUM_Q_FORMAT == 14
#define LUM_Q_WORDS 17
#else
#define LUM_Q_WORDS ((LUM_Q_BYTES + 3) / 4)
#endif

// The words sub-block s of the block at b decodes from.
LUM_FN void lum_q_load(const unsigned char* b, int s, unsigned (&r)[LUM_Q_WORDS]) {
#if LUM_Q_FORMAT == 12 || LUM_Q_FORMAT == 13  // Q4_K, Q5_K
  // d and dmin; the 12-byte scale table; the 32 quant bytes of sub-blocks 2p and 2p + 1
  // (the low and the high nibbles); Q5_K: the 32 bytes of high bits.
  r[0] = *(const unsigned*)b;
  r[1] = ((const unsigned*)b)[1], r[2] = ((const unsigned*)b)[2], r[3] = ((const unsigned*)b)[3];
  lum_q_quads(b + (LUM_Q_FORMAT == 13 ? 48 : 16) + 32 * (s / 2), r + 4);
#if LUM_Q_FORMAT == 13
  lum_q_quads(b + 16, r + 12);
#endif
#elif LUM_Q_FORMAT == 14  // Q6_K
  // Halves of 128 elements, each four groups of 32: group g takes its low four bits from
  // the low or high nibbles of 32 of the half's 64 bytes, its top two from bits 2g of the
  // half's 32 high-bit bytes, and a scale per 16 elements; d at the end.
  const int half = s / 4, g = s % 4;
  lum_q_pairs<32>(b + 64 * half + (g & 1) * 32, r);
  lum_q_pairs<32>(b + 128 + 32 * half, r + 8);
  r[16] = lum_q_u16(b + 192 + 8 * half + 2 * g) | lum_q_u16(b + 208) << 16;
#else  // the 32-element formats: the whole block
  lum_q_pairs<LUM_Q_BYTES>(b, r);
#endif
}

// Sub-block s decoded into w from its words, by the arithmetic of src/core/quant.cpp.
LUM_FN void lum_q_decode(const unsigned (&r)[LUM_Q_WORDS], int s, float (&w)[32]) {
#if LUM_Q_FORMAT == 2 || LUM_Q_FORMAT == 3  // Q4_0, Q4_1
  constexpr bool kMin = LUM_Q_FORMAT == 3;
  constexpr int kAt = kMin ? 4 : 2;
  const float d = lum_q_half(r[0]), m = kMin ? lum_q_half(r[0] >> 16) : 0.0f;
#pragma unroll
  for (int j = 0; j < 16; ++j) {
    const unsigned q = lum_q_byte(r, kAt + j);
    if (kMin) {
      w[j] = (float)(q & 0xF) * d + m, w[j + 16] = (float)(q >> 4) * d + m;
    } else {
      w[j] = (float)((int)(q & 0xF) - 8) * d, w[j + 16] = (float)((int)(q >> 4) - 8) * d;
    }
  }
#elif LUM_Q_FORMAT == 6 || LUM_Q_FORMAT == 7  // Q5_0, Q5_1
  constexpr bool kMin = LUM_Q_FORMAT == 7;
  const float d = lum_q_half(r[0]), m = kMin ? lum_q_half(r[0] >> 16) : 0.0f;
  const unsigned qh = kMin ? r[1] : (r[0] >> 16) | (r[1] << 16);
  constexpr int kAt = kMin ? 8 : 6;
#pragma unroll
  for (int j = 0; j < 16; ++j) {
    const unsigned q = lum_q_byte(r, kAt + j);
    const int hi0 = (int)(((qh >> j) << 4) & 0x10), hi1 = (int)((qh >> (j + 12)) & 0x10);
    if (kMin) {
      w[j] = (float)((q & 0xF) | hi0) * d + m, w[j + 16] = (float)((q >> 4) | hi1) * d + m;
    } else {
      w[j] = (float)((int)((q & 0xF) | hi0) - 16) * d;
      w[j + 16] = (float)((int)((q >> 4) | hi1) - 16) * d;
    }
  }
#elif LUM_Q_FORMAT == 8  // Q8_0
  const float d = lum_q_half(r[0]);
#pragma unroll
  for (int j = 0; j < 32; ++j) w[j] = (float)(signed char)lum_q_byte(r, 2 + j) * d;
#elif LUM_Q_FORMAT == 12 || LUM_Q_FORMAT == 13  // Q4_K, Q5_K
  const float d = lum_q_half(r[0]), dmin = lum_q_half(r[0] >> 16);
  // The 6-bit scale and min of sub-block s from the table (bytes 4..15 of the block).
  int sc, m;
  if (s < 4) {
    sc = lum_q_head_byte(r, 4 + s) & 63, m = lum_q_head_byte(r, 8 + s) & 63;
  } else {
    sc = (lum_q_head_byte(r, 8 + s) & 0xF) | ((lum_q_head_byte(r, s) >> 6) << 4);
    m = (lum_q_head_byte(r, 8 + s) >> 4) | ((lum_q_head_byte(r, 4 + s) >> 6) << 4);
  }
  const float d1 = d * (float)sc, m1 = dmin * (float)m;
  const int shift = (s & 1) * 4;
#pragma unroll
  for (int l = 0; l < 32; ++l) {
    const int at = 8 * (l % 4);
    const int hi = LUM_Q_FORMAT == 13 ? (int)((r[12 + l / 4] >> (at + s)) & 1) * 16 : 0;
    w[l] = d1 * (float)((int)((r[4 + l / 4] >> (at + shift)) & 0xF) + hi) - m1;
  }
#elif LUM_Q_FORMAT == 14  // Q6_K
  const int g = s % 4, nibble = (g >> 1) * 4;
  const float d = lum_q_half(r[16] >> 16);
#pragma unroll
  for (int l = 0; l < 32; ++l) {
    const int q = (int)(((lum_q_byte(r, l) >> nibble) & 0xF) |
                        (((lum_q_byte(r, 32 + l) >> (2 * g)) & 3) << 4)) - 32;
    w[l] = d * (float)(signed char)((r[16] >> (8 * (l / 16))) & 0xFF) * (float)q;
  }
#else
#error "no decoder for this format"
#endif
}

// y[m, j] = x[m] . W[j] for activation rows m < M and the block's kQRows weight rows j:
// its threads over the rows' sub-blocks (a thread takes the same sub-block of all
// kQRows, their words loaded before any is decoded), each sub-block of x read once into
// registers for all kQRows rows; the threads' sums meet through shuffles and shared
// memory. Reading x once per four weight rows, not once per row, is what matters: at a
// warp per row the reads of x through L1 were seven times the weights' bytes and L1 was
// 87% busy (Q4_K 4096 x 14336: 0.077 ms). x's rows are f32, `x_row` apart, 16-byte
// aligned.
constexpr int kQRows = LUM_Q_WEIGHT_ROWS, kQThreads = LUM_Q_THREADS;
template <int M>
LUM_FN void lum_qgemv(const unsigned char* __restrict__ w, const float* __restrict__ x,
                      float* __restrict__ y, long long n, long long k, long long rows,
                      long long x_row, long long row_bytes, long long block) {
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const long long j0 = block * kQRows;
  const long long subs = k / 32;
  float acc[M][kQRows];
#pragma unroll
  for (int m = 0; m < M; ++m)
#pragma unroll
    for (int r = 0; r < kQRows; ++r) acc[m][r] = 0.0f;
  for (long long sb = tid; sb < subs; sb += kQThreads) {
    const int s = (int)(sb % kQSubs);
    const long long at = sb / kQSubs * LUM_Q_BYTES;
    unsigned words[kQRows][LUM_Q_WORDS];
#pragma unroll
    for (int r = 0; r < kQRows; ++r)
      if (j0 + r < n) lum_q_load(w + (j0 + r) * row_bytes + at, s, words[r]);
#pragma unroll
    for (int m = 0; m < M; ++m) {
      if (m >= rows) break;
      const float4* xp = (const float4*)(x + m * x_row + sb * 32);
      float xv[32];
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        const float4 t = __ldg(xp + i);
        xv[4 * i] = t.x, xv[4 * i + 1] = t.y, xv[4 * i + 2] = t.z, xv[4 * i + 3] = t.w;
      }
#pragma unroll
      for (int r = 0; r < kQRows; ++r) {
        if (j0 + r >= n) break;
        float v[32];
        lum_q_decode(words[r], s, v);
        float sum = 0.0f;
#pragma unroll
        for (int e = 0; e < 32; ++e) sum = fmaf(v[e], xv[e], sum);
        acc[m][r] += sum;
      }
    }
  }
  __shared__ float part[kQThreads / 32][M][kQRows];
#pragma unroll
  for (int m = 0; m < M; ++m)
#pragma unroll
    for (int r = 0; r < kQRows; ++r) {
      float a = acc[m][r];
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) a += __shfl_xor_sync(0xffffffffu, a, o);
      if (lane == 0) part[warp][m][r] = a;
    }
  __syncthreads();
  if (tid < M * kQRows) {
    const int m = tid / kQRows, r = tid % kQRows;
    if (m < rows && j0 + r < n) {
      float sum = 0.0f;
#pragma unroll
      for (int q = 0; q < kQThreads / 32; ++q) sum += part[q][m][r];
      y[m * n + j0 + r] = sum;
    }
  }
}
// One activation row (decoding), and up to eight.
extern "C" __global__ void __launch_bounds__(kQThreads)
    lum_qgemv1(const unsigned char* __restrict__ w, const float* __restrict__ x,
               float* __restrict__ y, long long n, long long k, long long rows, long long x_row,
               long long row_bytes) {
  lum_after_prior_grids();
  lum_qgemv<1>(w, x, y, n, k, rows, x_row, row_bytes, blockIdx.x);
}
extern "C" __global__ void __launch_bounds__(kQThreads)
    lum_qgemv8(const unsigned char* __restrict__ w, const float* __restrict__ x,
               float* __restrict__ y, long long n, long long k, long long rows, long long x_row,
               long long row_bytes) {
  lum_after_prior_grids();
  lum_qgemv<8>(w, x, y, n, k, rows, x_row, row_bytes, blockIdx.x);
}

// ExpertMatMul's products (expert_matmul in tensor.hpp): output row `slot` (first +
// blockIdx.y) of [rows * slots, width] is, for each stack m of up to LUM_STACKS (blockIdx.x
// numbers the stacks' blocks one after another: lum_part_of), the expert ids[slot]'s
// [n, k] matrix of stack m times x's row for that slot, at columns col[m]...; the id is
// read here on the device. An id outside the stack gives NaN outputs.
extern "C" __global__ void __launch_bounds__(kQThreads)
    lum_qgemv_experts(LumStacks st, const void* __restrict__ ids, int ids64,
                      long long experts, long long slots, long long x_slots,
                      const float* __restrict__ x, float* __restrict__ y, long long width,
                      long long k, long long row_bytes, long long first) {
  lum_after_prior_grids();
  long long block;
  const int m = lum_part_of(st.end, block);
  const long long slot = first + blockIdx.y, e = lum_expert_of(ids, ids64, slot);
  const long long n = lum_pick(st.n, m);
  float* out = y + slot * width + lum_pick(st.col, m);
  if (e < 0 || e >= experts) {
    const long long j = block * kQRows + threadIdx.x;
    if (threadIdx.x < kQRows && j < n) out[j] = __int_as_float(0x7fc00000);
    return;
  }
  lum_qgemv<1>((const unsigned char*)lum_pick(st.w, m) + e * n * row_bytes,
               x + lum_expert_row(slot, slots, x_slots) * k, out, n, k, 1, k, row_bytes, block);
}

// Weight rows [0, n) decoded into f16, row-major [n, k]: a thread per sub-block.
extern "C" __global__ void __launch_bounds__(256)
    lum_qdecode_f16(const unsigned char* __restrict__ w, uint16_t* __restrict__ out, long long n,
                    long long k, long long row_bytes) {
  lum_after_prior_grids();
  const long long subs = k / 32, total = n * subs;
  for (long long i = (long long)blockIdx.x * 256 + threadIdx.x; i < total;
       i += (long long)gridDim.x * 256) {
    const long long row = i / subs, sb = i % subs;
    unsigned words[LUM_Q_WORDS];
    lum_q_load(w + row * row_bytes + sb / kQSubs * LUM_Q_BYTES, (int)(sb % kQSubs), words);
    float v[32];
    lum_q_decode(words, (int)(sb % kQSubs), v);
    uint4* o = (uint4*)(out + row * k + sb * 32);
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      unsigned p[4];
#pragma unroll
      for (int e = 0; e < 4; ++e)
        p[e] = (unsigned)lum_f2h(v[8 * q + 2 * e]) | (unsigned)lum_f2h(v[8 * q + 2 * e + 1]) << 16;
      o[q] = make_uint4(p[0], p[1], p[2], p[3]);
    }
  }
}

// Sub-block sb of an activation row (its 32 values v) quantised for the integer kernels:
// to int8 with its own scale (x ~ d q, d = max |x| / 127), as llama.cpp's Q8_1
// activations.
LUM_FN void lum_q8_sub(const float (&v)[32], signed char* __restrict__ q, float* __restrict__ d,
                       long long sb) {
  float amax = 0.0f;
#pragma unroll
  for (int i = 0; i < 32; ++i) amax = fmaxf(amax, fabsf(v[i]));
  const float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
  unsigned packed[8];
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    packed[i] = 0;
#pragma unroll
    for (int e = 0; e < 4; ++e)
      packed[i] |= ((unsigned)__float2int_rn(v[4 * i + e] * inv) & 0xFFu) << (8 * e);
  }
  uint4* qp = (uint4*)(q + sb * 32);
  qp[0] = make_uint4(packed[0], packed[1], packed[2], packed[3]);
  qp[1] = make_uint4(packed[4], packed[5], packed[6], packed[7]);
  d[sb] = amax / 127.0f;
}

// One activation row quantised for the integer kernels, a thread per sub-block; x
// 16-byte aligned.
extern "C" __global__ void __launch_bounds__(256)
    lum_q8_row(const float* __restrict__ x, signed char* __restrict__ q, float* __restrict__ d,
               long long k) {
  lum_after_prior_grids();
  const long long sb = (long long)blockIdx.x * 256 + threadIdx.x;
  if (sb >= k / 32) return;
  const float4* xp = (const float4*)(x + sb * 32);
  float v[32];
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const float4 t = __ldg(xp + i);
    v[4 * i] = t.x, v[4 * i + 1] = t.y, v[4 * i + 2] = t.z, v[4 * i + 3] = t.w;
  }
  lum_q8_sub(v, q, d, sb);
}

// The sum of every thread's s over the block (once a kernel: its partials' shared array
// is not waited on again), in every thread.
LUM_FN float lum_block_sum(float s) {
  __shared__ float part[32];
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
  if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = s;
  __syncthreads();
  s = 0.0f;
  for (int w = 0; w < (int)(blockDim.x >> 5); ++w) s += part[w];
  return s;
}
// RMSNorm's scale for a row of k whose squares sum to `squares`: 1 / sqrt(mean + eps),
// each step rounded as the norm's own kernels round it (the mean a sum times 1 / k).
LUM_FN float lum_rms_of(float squares, long long k, float eps) {
  return 1.0f / sqrtf(squares * (1.0f / (float)k) + eps);
}
// The same for a row of k at x, the sum over the block.
LUM_FN float lum_rms_scale(const float* __restrict__ x, long long k, float eps) {
  float s = 0.0f;
  for (long long i = threadIdx.x; i < k; i += blockDim.x) {
    const float v = __ldg(x + i);
    s += v * v;
  }
  return lum_rms_of(lum_block_sum(s), k, eps);
}

// A NormQMatMul's activation row: RMSNorm's output x * r * g, quantised as lum_q8_row
// quantises a row. One block of 1024 threads, k a multiple of 256 up to 16384: a thread
// keeps four adjacent values of each 4096 in registers through both passes (the mean
// square, then the quantisation), eight threads a sub-block, so a warp's 128 values are
// all in the row or all past it.
#define LUM_NQ_CHUNKS 4
extern "C" __global__ void __launch_bounds__(1024)
    lum_q8_row_norm(const float* __restrict__ x, const float* __restrict__ g, float eps,
                    signed char* __restrict__ q, float* __restrict__ d, long long k) {
  lum_after_prior_grids();
  float4 v[LUM_NQ_CHUNKS], w[LUM_NQ_CHUNKS];
  float s = 0.0f;
#pragma unroll
  for (int c = 0; c < LUM_NQ_CHUNKS; ++c) {
    const long long e = 4 * (threadIdx.x + 1024ll * c);
    if (e < k) {  // (g, computed for Gemma's norms, may be only 4-byte aligned)
      w[c] = make_float4(__ldg(g + e), __ldg(g + e + 1), __ldg(g + e + 2), __ldg(g + e + 3));
      v[c] = __ldg((const float4*)(x + e));
      s += v[c].x * v[c].x + v[c].y * v[c].y + v[c].z * v[c].z + v[c].w * v[c].w;
    }
  }
  const float r = lum_rms_of(lum_block_sum(s), k, eps);
#pragma unroll
  for (int c = 0; c < LUM_NQ_CHUNKS; ++c) {
    const long long e = 4 * (threadIdx.x + 1024ll * c);
    if (e >= k) break;  // (the same for the whole warp)
    const float u[4] = {v[c].x * r * w[c].x, v[c].y * r * w[c].y, v[c].z * r * w[c].z,
                        v[c].w * r * w[c].w};
    float amax = fmaxf(fmaxf(fabsf(u[0]), fabsf(u[1])), fmaxf(fabsf(u[2]), fabsf(u[3])));
#pragma unroll
    for (int o = 1; o < 8; o <<= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    const float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
    unsigned packed = 0;
#pragma unroll
    for (int i = 0; i < 4; ++i) packed |= ((unsigned)__float2int_rn(u[i] * inv) & 0xFFu) << (8 * i);
    *(unsigned*)(q + e) = packed;
    if ((threadIdx.x & 7) == 0) d[e / 32] = amax / 127.0f;
  }
}

// A NormQMatMul's activation rows normalised for the other paths: out = x * r * g, a
// block a row of k.
extern "C" __global__ void __launch_bounds__(256)
    lum_rms_rows(const float* __restrict__ x, const float* __restrict__ g, float eps,
                 float* __restrict__ out, long long k) {
  lum_after_prior_grids();
  const float* xr = x + blockIdx.x * k;
  const float r = lum_rms_scale(xr, k, eps);
  for (long long i = threadIdx.x; i < k; i += blockDim.x)
    out[blockIdx.x * k + i] = __ldg(xr + i) * r * __ldg(g + i);
}

#if LUM_Q_FORMAT == 8 || LUM_Q_FORMAT == 12 || LUM_Q_FORMAT == 13 || LUM_Q_FORMAT == 14
// y[j] = x . W[j] for one quantised activation row (lum_q8_row) and a group of weight
// rows, in integer dot products (dp4a): a few instructions a weight row per 16 to 32
// quant bytes, where decoding to floats takes 32 multiply-adds and conversions, and x
// read as 1.1 bytes an element instead of 4. A thread takes piece p = tid % 8 of 256
// elements of each of the group's rows (the eight threads read its pieces side by
// side), and the same 32 elements of x for all of them:
// - Q8_0 (eight blocks of 34 bytes, two-byte aligned: d, then 32 int8): block p, its
//   quants read as nine aligned words shifted into place where they start two bytes in.
// - Q4_K (144 bytes: a 16-byte header of d, dmin and the scale table, then the quants):
//   16-byte piece p + 1, half p % 2 of the 32 bytes whose low nibbles are sub-block
//   2 (p / 2) and high nibbles 2 (p / 2) + 1. Every thread loads the header too.
// - Q5_K (176 bytes: the same header, 32 bytes of fifth bits, the quants): as Q4_K, and
//   half p % 2 of the fifth bits (bit s of byte l is element l's of sub-block s).
// - Q6_K (210 bytes, two-byte aligned: 128 of low nibbles, 64 of high bits, 16 scales,
//   d): half h = p / 4 of the block, bytes 8 (p % 4) .. + 8 of its low-nibble and
//   high-bit rows, which give elements 128 h + 8 (p % 4) + 32 g + [0, 8) for g < 4.
LUM_FN int lum_dp4a(int a, int b, int c) { return __dp4a(a, b, c); }
constexpr int kOnes = 0x01010101;
LUM_FN int lum_dp4a_sum(const int4& v) {  // the sum of 16 int8
  return lum_dp4a(v.w, kOnes, lum_dp4a(v.z, kOnes, lum_dp4a(v.y, kOnes, lum_dp4a(v.x, kOnes, 0))));
}
#if LUM_Q_FORMAT == 12 || LUM_Q_FORMAT == 13
// The 6-bit scale and min of sub-block s from the header's words 1..3 (the scale table).
LUM_FN void lum_q4k_scale(const uint4& head, int s, float& sc, float& m) {
  const int t = 8 * (s & 3);
  const unsigned a = (head.y >> t) & 0xFF, b = (head.z >> t) & 0xFF, c = (head.w >> t) & 0xFF;
  const bool hi = s >= 4;
  sc = (float)(hi ? (c & 0xF) | ((a >> 6) << 4) : a & 63);
  m = (float)(hi ? (c >> 4) | ((b >> 6) << 4) : b & 63);
}
#endif
// The kernel's shape: a block of kQThreads threads takes kQThreads / (32 Split) groups
// of Rows weight rows, Split warps a group, its threads over the rows' pieces.
// Up to LUM_Q_MATS matrices of one format and K over the same row x, as one launch (a
// layer's q/k/v or gate/up products): their blocks numbered one after the other (end:
// each matrix's last block + 1 in that numbering, the unused ones the total).
#define LUM_Q_MATS 4
struct LumQMats {
  const unsigned char* w[LUM_Q_MATS];
  float* y[LUM_Q_MATS];
  const float* r[LUM_Q_MATS];  // residuals added to y, or null
  long long n[LUM_Q_MATS], end[LUM_Q_MATS];
};
// Matrix m of `mats`; `block`: the block's number among the matrix's. Its output and
// residual are picked where they are stored.
template <int Split, int Rows>
LUM_FN void lum_qdot(const LumQMats& mats, int m, const signed char* __restrict__ xq,
                     const float* __restrict__ xd, long long k, long long row_bytes,
                     long long block) {
  const unsigned char* __restrict__ w = lum_pick(mats.w, m);
  const long long n = lum_pick(mats.n, m);
  constexpr int kRows = Rows, kGroup = 32 * Split, kGroups = kQThreads / kGroup;
  const int tid = threadIdx.x % kGroup, group = threadIdx.x / kGroup, lane = tid % 32,
            warp = tid / 32;
  const long long j0 = (block * kGroups + group) * kRows;
  const int p = tid % 8;  // constant along the loop (kGroup % 8 == 0)
  const long long pieces = k / 256 * 8;
  float acc[kRows];
#pragma unroll
  for (int r = 0; r < kRows; ++r) acc[r] = 0.0f;
#pragma unroll 2
  for (long long at = tid; at < pieces; at += kGroup) {
    const long long b = at / 8;
#if LUM_Q_FORMAT == 8
    // Block p's quants start at byte 34 p + 2 of the 272: on a word boundary for odd p,
    // two bytes past one for even p (a shift constant per thread).
    const int start = 34 * p + 2, shift = 8 * (start & 3);
    unsigned qw[kRows][8], dw[kRows];
#pragma unroll
    for (int r = 0; r < kRows; ++r)
      if (j0 + r < n) {
        const unsigned char* blk = w + (j0 + r) * row_bytes + b * 8 * LUM_Q_BYTES;
        const unsigned* words = (const unsigned*)(blk + (start & ~3));
        unsigned raw[9];
#pragma unroll
        for (int i = 0; i < 8; ++i) raw[i] = __ldg(words + i);
        // Shifted, the quants end two bytes into a ninth word (block p + 1's d, in the 272).
        raw[8] = shift ? __ldg(words + 8) : 0u;
#pragma unroll
        for (int i = 0; i < 8; ++i) qw[r][i] = __funnelshift_r(raw[i], raw[i + 1], shift);
        dw[r] = lum_q_u16(blk + 34 * p);
      }
    const int4 x0 = __ldg((const int4*)(xq + b * 256 + 32 * p)),
               x1 = __ldg((const int4*)(xq + b * 256 + 32 * p + 16));
    const int xw[8] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w};
    const float dx = __ldg(xd + b * 8 + p);
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      if (j0 + r >= n) break;
      int dot = 0;
#pragma unroll
      for (int i = 0; i < 8; ++i) dot = lum_dp4a((int)qw[r][i], xw[i], dot);
      acc[r] += lum_q_half(dw[r]) * dx * (float)dot;
    }
#elif LUM_Q_FORMAT == 12 || LUM_Q_FORMAT == 13
    constexpr bool kFifth = LUM_Q_FORMAT == 13;  // Q5_K's fifth bits
    const int s0 = 2 * (p / 2);
    uint4 head[kRows], qs[kRows], fifth[kRows] = {};
#pragma unroll
    for (int r = 0; r < kRows; ++r)
      if (j0 + r < n) {
        const uint4* blk = (const uint4*)(w + (j0 + r) * row_bytes + b * LUM_Q_BYTES);
        head[r] = __ldg(blk), qs[r] = __ldg(blk + (kFifth ? 3 : 1) + p);
        if (kFifth) fifth[r] = __ldg(blk + 1 + p % 2);
      }
    // x's 16 elements under the low nibbles (sub-block s0) and the 16 under the high.
    const long long e = b * 256 + 32 * s0 + 16 * (p % 2);
    const int4 x0 = __ldg((const int4*)(xq + e)), x1 = __ldg((const int4*)(xq + e + 32));
    const float2 dx = __ldg((const float2*)(xd + b * 8 + s0));
    const int sum0 = lum_dp4a_sum(x0), sum1 = lum_dp4a_sum(x1);  // for the mins
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      if (j0 + r >= n) break;
      // The low nibbles against x0, the high against x1.
      const unsigned q[4] = {qs[r].x, qs[r].y, qs[r].z, qs[r].w},
                     f[4] = {fifth[r].x, fifth[r].y, fifth[r].z, fifth[r].w};
      const int x0w[4] = {x0.x, x0.y, x0.z, x0.w}, x1w[4] = {x1.x, x1.y, x1.z, x1.w};
      int dot0 = 0, dot1 = 0;
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        unsigned lo = q[i] & 0x0F0F0F0Fu, hi = (q[i] >> 4) & 0x0F0F0F0Fu;
        if (kFifth) {  // bits s0 and s0 + 1 of each byte, to bit 4
          lo |= ((f[i] >> s0) & 0x01010101u) << 4, hi |= ((f[i] >> (s0 + 1)) & 0x01010101u) << 4;
        }
        dot0 = lum_dp4a((int)lo, x0w[i], dot0);
        dot1 = lum_dp4a((int)hi, x1w[i], dot1);
      }
      float sc0, m0, sc1, m1;
      lum_q4k_scale(head[r], s0, sc0, m0);
      lum_q4k_scale(head[r], s0 + 1, sc1, m1);
      const float d = lum_q_half(head[r].x), dmin = lum_q_half(head[r].x >> 16);
      acc[r] += dx.x * (d * sc0 * (float)dot0 - dmin * m0 * (float)sum0) +
                dx.y * (d * sc1 * (float)dot1 - dmin * m1 * (float)sum1);
    }
#else  // Q6_K
    const int h = p / 4, l0 = 8 * (p % 4);
    // Per row: low nibbles of bytes l0.. and l0 + 32.. of the half's 64, their high bits
    // (bytes l0.. of the half's 32), the half's eight scales, d.
    unsigned ql[kRows][4], qh[kRows][2], sc[kRows][2], dw[kRows];
#pragma unroll
    for (int r = 0; r < kRows; ++r)
      if (j0 + r < n) {
        const unsigned char* blk = w + (j0 + r) * row_bytes + b * LUM_Q_BYTES;
        lum_q_pairs<8>(blk + 64 * h + l0, ql[r]);
        lum_q_pairs<8>(blk + 64 * h + 32 + l0, ql[r] + 2);
        lum_q_pairs<8>(blk + 128 + 32 * h + l0, qh[r]);
        lum_q_pairs<8>(blk + 192 + 8 * h, sc[r]);
        dw[r] = lum_q_u16(blk + 208);
      }
    // x's groups g < 4: 8 elements at 128 h + l0 + 32 g, in sub-block 4 h + g.
    int2 xg[4];
    int xs[4];
#pragma unroll
    for (int g = 0; g < 4; ++g) {
      xg[g] = __ldg((const int2*)(xq + b * 256 + 128 * h + l0 + 32 * g));
      xs[g] = lum_dp4a(xg[g].y, kOnes, lum_dp4a(xg[g].x, kOnes, 0));
    }
    const float4 dx = __ldg((const float4*)(xd + b * 8 + 4 * h));
    const float dxs[4] = {dx.x, dx.y, dx.z, dx.w};
    const int is = (p % 4) / 2;  // the scale of 16 elements: is + 2 g in the half's eight
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      if (j0 + r >= n) break;
      float sum = 0.0f;
#pragma unroll
      for (int g = 0; g < 4; ++g) {
        int dot = 0;
#pragma unroll
        for (int i = 0; i < 2; ++i) {
          const unsigned low = (ql[r][2 * (g & 1) + i] >> (4 * (g >> 1))) & 0x0F0F0F0Fu;
          const unsigned high = ((qh[r][i] >> (2 * g)) << 4) & 0x30303030u;
          dot = lum_dp4a((int)(low | high), i ? xg[g].y : xg[g].x, dot);
        }
        const int at_sc = is + 2 * g;  // byte at_sc of the eight
        const float scale = (float)(signed char)((sc[r][at_sc >> 2] >> (8 * (at_sc & 3))) & 0xFF);
        sum += dxs[g] * scale * (float)(dot - 32 * xs[g]);
      }
      acc[r] += lum_q_half(dw[r]) * sum;
    }
#endif
  }
#pragma unroll
  for (int r = 0; r < kRows; ++r)
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) acc[r] += __shfl_xor_sync(0xffffffffu, acc[r], o);
  if (Split == 1) {
    if (lane < kRows && j0 + lane < n) {
      float a = acc[0];
#pragma unroll
      for (int r = 1; r < kRows; ++r) a = lane == r ? acc[r] : a;
      const float* r = lum_pick(mats.r, m);
      lum_pick(mats.y, m)[j0 + lane] = r ? a + r[j0 + lane] : a;
    }
    return;
  }
  __shared__ float part[kGroups][Split][kRows];
  if (lane == 0)
#pragma unroll
    for (int r = 0; r < kRows; ++r) part[group][warp][r] = acc[r];
  __syncthreads();
  if (tid < kRows && j0 + tid < n) {
    float sum = 0.0f;
#pragma unroll
    for (int q = 0; q < Split; ++q) sum += part[group][q][tid];
    const float* r = lum_pick(mats.r, m);
    lum_pick(mats.y, m)[j0 + tid] = r ? sum + r[j0 + tid] : sum;
  }
}
#define LUM_QDOT(S, R)                                                                        \
  extern "C" __global__ void __launch_bounds__(kQThreads) lum_qdot_s##S##_r##R(              \
      LumQMats mats, const signed char* __restrict__ xq, const float* __restrict__ xd,        \
      long long k, long long row_bytes) {                                                     \
    lum_after_prior_grids();                                                                  \
    long long block;                                                                          \
    const int m = lum_part_of(mats.end, block);                                               \
    lum_qdot<S, R>(mats, m, xq, xd, k, row_bytes, block);                                     \
  }
// ExpertMatMul's products in the integer kernels (see lum_qgemv_experts): x's rows
// quantised one after another, `k` apart, their scales k / 32 apart; in each of the
// shapes the search tries (kQDotShapes).
template <int Split, int Rows>
LUM_FN void lum_qdot_experts(const LumStacks& st, const void* __restrict__ ids, int ids64,
                             long long experts, long long slots, long long x_slots,
                             const signed char* __restrict__ xq, const float* __restrict__ xd,
                             float* __restrict__ y, long long width, long long k,
                             long long row_bytes, long long first) {
  long long block;
  const int m = lum_part_of(st.end, block);
  const long long slot = first + blockIdx.y, e = lum_expert_of(ids, ids64, slot);
  LumQMats mats = {};
  mats.y[0] = y + slot * width + lum_pick(st.col, m), mats.n[0] = lum_pick(st.n, m);
  if (e < 0 || e >= experts) {
    constexpr int kRowsABlock = kQThreads / (32 * Split) * Rows;
    if (threadIdx.x < kRowsABlock && block * kRowsABlock + threadIdx.x < mats.n[0])
      mats.y[0][block * kRowsABlock + threadIdx.x] = __int_as_float(0x7fc00000);
    return;
  }
  mats.w[0] = (const unsigned char*)lum_pick(st.w, m) + e * mats.n[0] * row_bytes;
  const long long row = lum_expert_row(slot, slots, x_slots);
  lum_qdot<Split, Rows>(mats, 0, xq + row * k, xd + row * (k / 32), k, row_bytes, block);
}
#define LUM_QDOT_EXPERTS(S, R)                                                                \
  extern "C" __global__ void __launch_bounds__(kQThreads) lum_qdot_experts_s##S##_r##R(      \
      LumStacks st, const void* __restrict__ ids, int ids64, long long experts,               \
      long long slots, long long x_slots, const signed char* __restrict__ xq,                 \
      const float* __restrict__ xd, float* __restrict__ y, long long width, long long k,       \
      long long row_bytes, long long first) {                                                 \
    lum_after_prior_grids();                                                                  \
    lum_qdot_experts<S, R>(st, ids, ids64, experts, slots, x_slots, xq, xd, y, width, k,      \
                           row_bytes, first);                                                 \
  }
LUM_QDOT_EXPERTS(4, 4)
LUM_QDOT_EXPERTS(2, 4)
LUM_QDOT_EXPERTS(1, 4)
LUM_QDOT_EXPERTS(1, 2)
LUM_QDOT_EXPERTS(4, 8)
LUM_QDOT_EXPERTS(1, 8)

LUM_QDOT(4, 4)
LUM_QDOT(2, 4)
LUM_QDOT(1, 4)
LUM_QDOT(1, 2)
LUM_QDOT(4, 8)
LUM_QDOT(1, 8)
#endif
)QUANT";

// A [rows, k, cols] product operand view: strides along each.
ConcreteView operand(int64_t rows, int64_t k, int64_t cols, int64_t s_rows, int64_t s_k,
                     int64_t s_cols) {
  ConcreteView v;
  v.dims = {rows, k, cols};
  v.strides = {s_rows, s_k, s_cols};
  v.mask_lo = {0, 0, 0};
  v.mask_hi = v.dims;
  return v;
}

}  // namespace

bool quant_products_support(uint32_t format) {
  switch (static_cast<GgmlType>(format)) {
    case GgmlType::Q4_0:
    case GgmlType::Q4_1:
    case GgmlType::Q5_0:
    case GgmlType::Q5_1:
    case GgmlType::Q8_0:
    case GgmlType::Q4_K:
    case GgmlType::Q5_K:
    case GgmlType::Q6_K:
      return true;
    default:
      return false;
  }
}

std::string quant_products_source(uint32_t format) {
  size_t elems = 0, bytes = 0;
  LUM_CHECK(quant_products_support(format) && ggml_block_layout(format, elems, bytes))
      << "internal: no GPU decoder for " << ggml_type_name(format);
  return std::string(cuda_prelude()) + "#define LUM_Q_FORMAT " + std::to_string(format) +
         "\n#define LUM_Q_ELEMS " + std::to_string(elems) + "\n#define LUM_Q_BYTES " +
         std::to_string(bytes) + "\n#define LUM_Q_WEIGHT_ROWS " +
         std::to_string(kQuantGemvWeightRows) + "\n#define LUM_Q_THREADS " +
         std::to_string(kQuantGemvThreads) + "\n" + kSource;
}

const void* QuantProducts::kernel(uint32_t format, const char* name) {
  std::unique_ptr<Module>& m = modules_[format];
  if (!m)
    m = std::make_unique<Module>(compile_cubin(quant_products_source(format), device_.arch()).code);
  return m->kernel(name);
}

int64_t QDotShape::rows_a_block() const {
  return kQuantGemvThreads / (32 * split) * rows;
}

std::string QDotShape::kernel_name(const std::string& family) const {
  return family + "_s" + std::to_string(split) + "_r" + std::to_string(rows);
}

QuantProducts::QDotChoice QuantProducts::searched_shape(
    uint32_t format, const std::string& family, std::string signature,
    const std::function<void(const void*, int64_t)>& launch, const void* out, size_t count) {
  size_t pick = 0;
  if (searcher_.settings().mode != runtime::SearchMode::Off) {
    runtime::SearchProblem p;
    p.signature = std::move(signature);
    for (const QDotShape& s : kQDotShapes) {
      const std::string name = s.kernel_name(family);
      p.candidates.push_back(
          {name, [&, s, name] { launch(kernel(format, name.c_str()), s.rows_a_block()); }});
    }
    DeviceTrials trials(device_);
    // The shapes differ only in the order partial sums meet: a few ulps of the largest terms.
    trials.judge(p, out, count, DType::F32, 1e-4);
    pick = searcher_.choose(p).winner;
  }
  const QDotShape& s = kQDotShapes[pick];
  return {kernel(format, s.kernel_name(family).c_str()), s.rows_a_block()};
}

bool integer_products_support(uint32_t format) {
  const auto type = static_cast<GgmlType>(format);
  return type == GgmlType::Q8_0 || type == GgmlType::Q4_K || type == GgmlType::Q5_K ||
         type == GgmlType::Q6_K;
}

bool QuantProducts::integer_products(uint32_t format, int64_t k) const {
  return integer_products_ && k % 256 == 0 && integer_products_support(format);
}

void QuantProducts::quantize_row(uint32_t format, const float* x, int64_t k, const RowNorm* norm) {
  // x's int8 values, then a scale per 32 (k is a whole number of 256-element blocks, so
  // the scales stay 16-byte aligned).
  const void*& quantize = quantize_kernel_[{format, norm != nullptr}];
  if (!quantize) quantize = kernel(format, norm ? "lum_q8_row_norm" : "lum_q8_row");
  auto* q = static_cast<signed char*>(grown(device_, quantized_, static_cast<size_t>(k + k / 8)));
  auto* d = reinterpret_cast<float*>(q + k);
  long long k_arg = k;
  if (norm) {  // one block: the row's mean square first
    const float* g = norm->weight;
    float eps = norm->eps;
    void* args[] = {&x, &g, &eps, &q, &d, &k_arg};
    check(device_.launch(quantize, dim3(1), dim3(1024), args, 0),
          "launching an activation row's norm and quantisation");
    return;
  }
  void* args[] = {&x, &q, &d, &k_arg};
  check(device_.launch(quantize, dim3(static_cast<unsigned>((k / 32 + 255) / 256)), dim3(256), args,
                       0),
        "launching an activation row's quantisation");
}

const float* QuantProducts::normalised(uint32_t format, const float* x, int64_t rows, int64_t k,
                                       const RowNorm& norm) {
  auto* out =
      static_cast<float*>(grown(device_, normed_, static_cast<size_t>(rows * k) * sizeof(float)));
  const float* g = norm.weight;
  float eps = norm.eps;
  long long k_arg = k;
  void* args[] = {&x, &g, &eps, &out, &k_arg};
  check(device_.launch(kernel(format, "lum_rms_rows"), dim3(static_cast<unsigned>(rows)), dim3(256),
                       args, 0),
        "launching a product's activation norm");
  return out;
}

void QuantProducts::integer_product(uint32_t format, int64_t k,
                                    std::span<const QDotMatrix> matrices) {
  LUM_CHECK(!matrices.empty() && matrices.size() <= kQDotMatrices)
      << "internal: " << matrices.size() << " matrices for one integer product";
  auto* q = static_cast<signed char*>(quantized_.data());
  auto* d = reinterpret_cast<float*>(q + k);
  QDotKey key{format, k, {}};
  for (size_t i = 0; i < matrices.size(); ++i) std::get<2>(key)[i] = matrices[i].n;
  // The kernel's parameters (LumQMats) for a shape of `rows_a_block` rows a block.
  struct Mats {
    const unsigned char* w[kQDotMatrices];
    float* y[kQDotMatrices];
    const float* r[kQDotMatrices];
    long long n[kQDotMatrices], end[kQDotMatrices];
  } mats{};
  long long k_arg = k, bytes_arg = matrices[0].row_bytes;  // (the same for one format and K)
  void* args[] = {&mats, &q, &d, &k_arg, &bytes_arg};
  auto launch = [&](const void* product, int64_t rows_a_block) {
    long long blocks = 0;
    for (size_t i = 0; i < kQDotMatrices; ++i) {
      if (i < matrices.size()) {
        mats.w[i] = matrices[i].rows, mats.y[i] = matrices[i].y, mats.n[i] = matrices[i].n;
        mats.r[i] = matrices[i].residual;
        blocks += (matrices[i].n + rows_a_block - 1) / rows_a_block;
      }
      mats.end[i] = blocks;
    }
    check(device_.launch(product, dim3(static_cast<unsigned>(blocks)), dim3(kQuantGemvThreads),
                         args, 0),
          "launching a quantised product");
  };
  auto chosen = choice_.find(key);
  if (chosen == choice_.end()) {
    std::string signature = "qdot " + ggml_type_name(format) + " n=";
    for (size_t i = 0; i < matrices.size(); ++i)
      signature += (i ? "+" : "") + std::to_string(matrices[i].n);
    signature += " k=" + std::to_string(k);
    // (Judged on the last matrix's outputs: its blocks come after the others', so a wrong
    // numbering shows there.)
    chosen =
        choice_
            .emplace(key, searched_shape(format, "lum_qdot", std::move(signature), launch,
                                         matrices.back().y, static_cast<size_t>(matrices.back().n)))
            .first;
  }
  launch(chosen->second.product, chosen->second.rows_a_block);
}

const unsigned char* QuantProducts::block_rows(uint32_t format, const ConcreteView& w,
                                               const void* w_data, int64_t& row_bytes) {
  size_t block_elems = 0, block_bytes = 0;
  if (!quant_products_support(format) || !ggml_block_layout(format, block_elems, block_bytes))
    return nullptr;
  if (w.dims.size() != 2 || w.has_mask()) return nullptr;
  const int64_t k = w.dims[1], elems = static_cast<int64_t>(block_elems);
  if (w.strides[1] != 1 || w.strides[0] != k || k % elems != 0 || w.offset % k != 0) return nullptr;
  row_bytes = k / elems * static_cast<int64_t>(block_bytes);
  return static_cast<const unsigned char*>(w_data) + w.offset / k * row_bytes;
}

const float* QuantProducts::dense_rows(const ConcreteView& x, const void* x_data, int64_t rows,
                                       int64_t k) {
  // Each row once (its broadcast dims unbroadcast), read where it lies if that is dense.
  if (unbroadcast_is_dense(x) && x.offset % 4 == 0)
    return static_cast<const float*>(x_data) + x.offset;
  void* packed_rows = grown(device_, rows_, static_cast<size_t>(rows * k) * sizeof(float));
  return copy_.run(unbroadcast(x), x_data, sizeof(float), packed_rows)
             ? static_cast<const float*>(packed_rows)
             : nullptr;
}

bool QuantProducts::run_shared(const ConcreteView& x, const void* x_data,
                               const std::vector<QuantMatrix>& weights, const RowNorm* norm) {
  const size_t rank = x.dims.size();
  if (weights.empty() || rank < 3 || x.has_mask() ||
      x.numel() != x.dims[rank - 2] * x.dims[rank - 1])
    return false;  // one activation row
  const int64_t k = x.dims[rank - 2];
  if (norm && k > kNormRowMost) return false;
  // Each matrix's rows, then one launch for each run of up to kQDotMatrices matrices of
  // the same format (Q4_K_M files keep some layers' value projection in Q6_K).
  std::vector<QDotMatrix>& rows = shared_rows_;
  rows.clear();
  for (const QuantMatrix& w : weights) {
    int64_t row_bytes = 0;
    const unsigned char* data =
        integer_products(w.format, k) ? block_rows(w.format, w.view, w.data, row_bytes) : nullptr;
    if (!data || w.view.dims[1] != k) return false;
    rows.push_back({data, w.view.dims[0], row_bytes, static_cast<float*>(w.out)});
  }
  const float* xp = dense_rows(x, x_data, 1, k);
  if (!xp) return false;
  quantize_row(weights[0].format, xp, k, norm);
  for (size_t first = 0, last = 0; first < weights.size(); first = last) {
    last = first + 1;
    while (last < weights.size() && last - first < kQDotMatrices &&
           weights[last].format == weights[first].format)
      ++last;
    integer_product(weights[first].format, k,
                    std::span<const QDotMatrix>(rows).subspan(first, last - first));
  }
  return true;
}

bool QuantProducts::run(uint32_t format, const ConcreteView& x, const void* x_data,
                        const ConcreteView& w, const void* w_data, void* y, const RowNorm* norm,
                        const float* residual) {
  int64_t row_bytes = 0;
  const unsigned char* weights = block_rows(format, w, w_data, row_bytes);
  const size_t rank = x.dims.size();
  if (!weights || rank < 3 || x.has_mask()) return false;
  const int64_t k = w.dims[1], n = w.dims[0];
  if (x.dims[rank - 2] != k || x.dims[rank - 1] != n) return false;
  for (size_t d = 0; d + 2 < rank; ++d)  // rows read once each (no broadcast batch dim)
    if (x.dims[d] > 1 && x.strides[d] == 0) return false;
  const int64_t rows = x.numel() / (k * n);
  if (rows == 0 || n == 0) return true;
  const bool integer = rows == 1 && integer_products(format, k) && (!norm || k <= kNormRowMost);
  if (residual && !integer) {  // the product, then the residual added
    if (!run(format, x, x_data, w, w_data, y, norm)) return false;
    copy_.add(static_cast<float*>(y), residual, rows * n);
    return true;
  }
  if (norm && !integer) {  // the rows normalised, then multiplied as any others
    const float* xp = dense_rows(x, x_data, rows, k);
    return xp && run(format, operand(rows, k, n, k, 1, 0), normalised(format, xp, rows, k, *norm),
                     w, w_data, y);
  }

  if (rows <= kQuantGemvRows) {
    const float* xp = dense_rows(x, x_data, rows, k);
    if (!xp) return false;
    if (integer) {
      quantize_row(format, xp, k, norm);
      const QDotMatrix m{weights, n, row_bytes, static_cast<float*>(y), residual};
      integer_product(format, k, std::span<const QDotMatrix>(&m, 1));
      return true;
    }
    const void* gemv = kernel(format, rows == 1 ? "lum_qgemv1" : "lum_qgemv8");
    for (int64_t r0 = 0; r0 < rows; r0 += 8) {
      const float* xr = xp + r0 * k;
      float* yr = static_cast<float*>(y) + r0 * n;
      long long n_arg = n, k_arg = k, rows_arg = std::min<int64_t>(8, rows - r0), x_row = k,
                bytes_arg = row_bytes;
      void* args[] = {&weights, &xr, &yr, &n_arg, &k_arg, &rows_arg, &x_row, &bytes_arg};
      check(device_.launch(
                gemv,
                dim3(static_cast<unsigned>((n + kQuantGemvWeightRows - 1) / kQuantGemvWeightRows)),
                dim3(kQuantGemvThreads), args, 0),
            "launching a quantised product");
    }
    return true;
  }

  // A prompt: x rounded to f16 once, then each chunk of weight rows decoded and
  // multiplied, its output columns put in place.
  const ConcreteView x_rows = unbroadcast(x);  // each row once
  void* rounded = grown(device_, rows_, static_cast<size_t>(rows * k) * 2);
  if (!copy_.run_converted(x_rows, x_data, DType::F32, DType::F16, rounded)) return false;
  const int64_t chunk = std::clamp<int64_t>(kQuantChunkBytes / (2 * k), 1, n);
  void* decoded = grown(device_, decoded_, static_cast<size_t>(chunk * k) * 2);
  void* out =
      chunk < n ? grown(device_, out_, static_cast<size_t>(rows * chunk) * sizeof(float)) : y;
  const void* decode = kernel(format, "lum_qdecode_f16");
  for (int64_t j0 = 0; j0 < n; j0 += chunk) {
    const int64_t c = std::min(chunk, n - j0);
    const unsigned char* wj = weights + j0 * row_bytes;
    long long c_arg = c, k_arg = k, bytes_arg = row_bytes;
    void* args[] = {&wj, &decoded, &c_arg, &k_arg, &bytes_arg};
    const int64_t blocks =
        std::min<int64_t>((c * (k / 32) + 255) / 256, int64_t{device_.multiprocessors()} * 16);
    check(device_.launch(decode, dim3(static_cast<unsigned>(blocks)), dim3(256), args, 0),
          "launching a weight decode");
    if (!gemm_.run(operand(rows, k, c, k, 1, 0), rounded, operand(rows, k, c, 0, 1, k), decoded,
                   DType::F16, out, DType::F32))
      return false;
    if (chunk < n)
      check(cudaMemcpy2DAsync(static_cast<float*>(y) + j0, static_cast<size_t>(n) * sizeof(float),
                              out, static_cast<size_t>(c) * sizeof(float),
                              static_cast<size_t>(c) * sizeof(float), static_cast<size_t>(rows),
                              cudaMemcpyDeviceToDevice, device_.stream()),
            "placing a quantised product's columns");
  }
  return true;
}

int64_t stack_params(const Experts& e, int64_t rows_a_block, StackParams& out) {
  int64_t blocks = 0;
  for (size_t i = 0; i < kExpertStacks; ++i) {
    if (i < e.stacks) {
      out.w[i] = e.stack[i].weights, out.n[i] = e.stack[i].n, out.col[i] = e.stack[i].column;
      blocks += (e.stack[i].n + rows_a_block - 1) / rows_a_block;
    }
    out.end[i] = blocks;
  }
  return blocks;
}

bool QuantProducts::run_experts(uint32_t format, const Experts& e, const float* x, int64_t x_rows,
                                void* y) {
  size_t block_elems = 0, block_bytes = 0;
  if (!quant_products_support(format) || !ggml_block_layout(format, block_elems, block_bytes) ||
      e.k % static_cast<int64_t>(block_elems) != 0 || e.k % 32 != 0 ||
      reinterpret_cast<uintptr_t>(x) % 16 != 0)
    return false;
  const int64_t slots_total = e.rows * e.slots;
  if (slots_total == 0 || e.width == 0) return true;
  const bool integer = integer_products(format, e.k);
  StackParams st{};
  long long experts = e.count, slots = e.slots, x_slots = e.x_slots, width = e.width, k = e.k,
            row_bytes = e.k / static_cast<int64_t>(block_elems) * static_cast<int64_t>(block_bytes),
            first = 0, blocks = 0;
  int ids64 = e.ids64 ? 1 : 0;
  const void* ids = e.ids;
  signed char* q = nullptr;
  float* d = nullptr;
  if (integer) {
    // Every row of x quantised in one pass: the scales are per 32 elements, so the rows'
    // values and scales lie one row after another.
    quantize_row(format, x, x_rows * e.k, nullptr);
    q = static_cast<signed char*>(quantized_.data());
    d = reinterpret_cast<float*>(q + x_rows * e.k);
  }
  void* integer_args[] = {&st, &ids, &ids64, &experts, &slots,     &x_slots, &q,
                          &d,  &y,   &width, &k,       &row_bytes, &first};
  void* float_args[] = {&st, &ids, &ids64, &experts, &slots,     &x_slots,
                        &x,  &y,   &width, &k,       &row_bytes, &first};
  auto launch = [&](const void* product, int64_t rows_a_block) {
    blocks = stack_params(e, rows_a_block, st);
    for (first = 0; first < slots_total; first += kMostGridY)
      check(device_.launch(
                product,
                dim3(static_cast<unsigned>(blocks),
                     static_cast<unsigned>(std::min<int64_t>(kMostGridY, slots_total - first))),
                dim3(kQuantGemvThreads),
                integer ? std::span<void* const>(integer_args) : std::span<void* const>(float_args),
                0),
            "launching an expert product");
  };
  if (!integer) {
    launch(kernel(format, "lum_qgemv_experts"), kQuantGemvWeightRows);
    return true;
  }
  // The integer kernel's shape, searched per format, K, stacks and whether the rows are
  // a decoding step's few (their experts' matrices each read by about one pair) or a
  // prompt's many.
  const bool few = slots_total <= kExpertFewPairs;
  ExpertKey key{format, e.k, {}, few};
  for (size_t i = 0; i < e.stacks; ++i) std::get<2>(key)[i] = e.stack[i].n;
  auto chosen = expert_choice_.find(key);
  if (chosen == expert_choice_.end()) {
    std::string signature = "qdot experts " + ggml_type_name(format) + " n=";
    for (size_t i = 0; i < e.stacks; ++i)
      signature += (i ? "+" : "") + std::to_string(e.stack[i].n);
    signature += " k=" + std::to_string(e.k) + " of " + std::to_string(e.count) +
                 (few ? " few rows" : " many rows");
    chosen =
        expert_choice_
            .emplace(key, searched_shape(format, "lum_qdot_experts", std::move(signature), launch,
                                         y, static_cast<size_t>(slots_total * e.width)))
            .first;
  }
  launch(chosen->second.product, chosen->second.rows_a_block);
  return true;
}

}  // namespace luminal::cudagen

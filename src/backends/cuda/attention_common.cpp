// What the two attention kernels share (see attention_common.hpp).
#include "backends/cuda/attention_common.hpp"

#include "backends/cuda/codegen.hpp"
#include "backends/cuda/tensor_cores.hpp"
#include "runtime/element_writer.hpp"

namespace luminal::cudagen {
namespace {

constexpr const char* kCommonSource = R"ATTN(
struct LumAttnArgs {
  const void *q, *k, *v; const unsigned char* mask;
  void* out; float* partials;
  long long q_off, k_off, v_off, m_off;
  long long q_d, k_d, v_d;
  long long k_t, v_t, m_t;
  long long keys, keys_per_split, splits, shared_rows, row_tiles, early_keys;
  long long kv_rank, sh_rank;
  unsigned char* tiles;
  unsigned* tile_bits;
  long long key_tiles, mask_points;
  long long kv_dim[4], kv_q[4], kv_k[4], kv_v[4], kv_m[4], kv_o[4];
  long long sh_dim[4], sh_q[4], sh_m[4], sh_o[4];
  long long mask_dims[LUM_AT_MASK_DIMS];
  float scale, unused;
};
// A split's piece of a row in `partials` (attention_piece_floats): its outputs, its max
// and sum from float kAtMax, kAtWidth floats in all.
constexpr int kAtMax = LUM_AT_PIECE_MAX, kAtWidth = LUM_AT_PIECE_FLOATS;
// Whether mask row m keeps key t: m is the row's offset into the mask's bytes, or, where
// the mask is computed from its index expression (LUM_AT_KEEP over lum_m, lum_t and the
// dims LUM_AT_KEEP_DIMS declares), the row's coordinate (its offsets then count rows).
#ifdef LUM_AT_KEEP
#define LUM_AT_MASK_BYTES 0
LUM_FN bool lum_at_keep(const LumAttnArgs& lum_a, long long lum_m, long long lum_t) {
  LUM_AT_KEEP_DIMS
  return (LUM_AT_KEEP) != 0;
}
// Whether rows lum_m_lo..lum_m_hi keep keys lum_t_lo..lum_t_hi: 1 all of them, 0 none,
// -1 some, or not decided by the bounds of the mask's expression over that box
// (LUM_AT_KEEP_BOUNDS, Expr::to_c_bounds).
LUM_FN int lum_at_keep_over(const LumAttnArgs& lum_a, long long lum_m_lo, long long lum_m_hi,
                            long long lum_t_lo, long long lum_t_hi) {
  LUM_AT_KEEP_DIMS
  LUM_AT_KEEP_BOUNDS
  if (!lum_keep_known) return -1;
  return lum_keep_lo > 0 || lum_keep_hi < 0 ? 1 : lum_keep_lo == 0 && lum_keep_hi == 0 ? 0 : -1;
}
#else
#define LUM_AT_MASK_BYTES 1
LUM_FN bool lum_at_keep(const LumAttnArgs& a, long long m, long long t) {
  return a.mask[m + t * a.m_t] != 0;
}
LUM_FN int lum_at_keep_over(const LumAttnArgs&, long long, long long, long long, long long) {
  return -1;  // (bytes are read)
}
#endif
struct lum_at_f32 {
  typedef float T;
  static __device__ __forceinline__ float get(float x) { return x; }
  static __device__ __forceinline__ void put(void* p, long long i, float x) { ((float*)p)[i] = x; }
};
struct lum_at_f16 {
  typedef uint16_t T;
  static __device__ __forceinline__ float get(uint16_t x) { return lum_h2f(x); }
  static __device__ __forceinline__ void put(void* p, long long i, float x) { ((uint16_t*)p)[i] = lum_f2h(x); }
};
struct lum_at_bf16 {
  typedef uint16_t T;
  static __device__ __forceinline__ float get(uint16_t x) { return lum_bf2f(x); }
  static __device__ __forceinline__ void put(void* p, long long i, float x) { ((uint16_t*)p)[i] = lum_f2bf(x); }
};

// 2^x by the hardware's approximation (2 ulp; results below 2^-126 flush to 0, which
// weights so far below the largest do not miss).
LUM_FN float lum_at_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
#if __CUDA_ARCH__ >= 800
// (The tensor-core pieces and the asynchronous copies: tensor_cores.hpp.)
// c0, c1 += the A operand (hi, and lo when split) times the 16 x 16 B operand at `at`
// in shared memory (rows of k, or with kTrans rows of n): two 8-wide tiles of columns.
template <bool kBf16, bool kTrans>
LUM_FN void lum_fa_product(float (&c0)[4], float (&c1)[4], const uint32_t (&hi)[4],
                           const uint32_t (&lo)[4], uint32_t at) {
  uint32_t b[4];
  if constexpr (kTrans) lum_ldsm_t(b, at);
  else lum_ldsm(b, at);
  lum_mma<kBf16>(c0, hi, b[0], b[1]);
  lum_mma<kBf16>(c1, hi, b[2], b[3]);
#if LUM_FA_SPLIT
  lum_mma<kBf16>(c0, lo, b[0], b[1]);
  lum_mma<kBf16>(c1, lo, b[2], b[3]);
#endif
}
// Two floats in one register (tensor_cores.hpp: lum_pack_half2), and back.
template <bool kBf16> LUM_FN float lum_fa_low(uint32_t r) {
  return kBf16 ? __uint_as_float(r << 16) : lum_h2f((uint16_t)(r & 0xffffu));
}
template <bool kBf16> LUM_FN float lum_fa_high(uint32_t r) {
  return kBf16 ? __uint_as_float(r & 0xffff0000u) : lum_h2f((uint16_t)(r >> 16));
}
// x0, x1 as a register of two halves and, split, the remainders as another.
template <bool kBf16> LUM_FN void lum_fa_split(float x0, float x1, uint32_t& hi, uint32_t& lo) {
  hi = lum_pack_half2<kBf16>(x0, x1);
#if LUM_FA_SPLIT
  lo = lum_pack_half2<kBf16>(x0 - lum_fa_low<kBf16>(hi), x1 - lum_fa_high<kBf16>(hi));
#endif
}
// Query rows staged for the products by the whole block: `n` rows of LUM_AT_D + 8
// halves at qs, the first `rows` of them the queries at offsets row_q in the keys' type
// (and, split, the remainders at ql), the rest zeros.
template <bool kBf16>
LUM_FN void lum_fa_stage_queries(const LumAttnArgs& a, const long long* row_q, int rows, int n,
                                 uint16_t* qs, uint16_t* ql) {
  constexpr int kQs = LUM_AT_D + 8;
  const typename LUM_AT_Q::T* qp = (const typename LUM_AT_Q::T*)a.q;
  for (int i = 2 * threadIdx.x; i < n * LUM_AT_D; i += 2 * LUM_AT_THREADS) {
    const int r = i / LUM_AT_D, d = i % LUM_AT_D;
    const float x0 = r < rows ? LUM_AT_Q::get(qp[row_q[r] + d * a.q_d]) : 0.0f;
    const float x1 = r < rows ? LUM_AT_Q::get(qp[row_q[r] + (d + 1) * a.q_d]) : 0.0f;
    uint32_t hi, lo;
    lum_fa_split<kBf16>(x0, x1, hi, lo);
    *(uint32_t*)(qs + r * kQs + d) = hi;
#if LUM_FA_SPLIT
    *(uint32_t*)(ql + r * kQs + d) = lo;
#endif
  }
}
// A warp's 16 staged query rows from `first` as the scores' A fragments (and the
// remainders', split).
template <int NQ, int NL>
LUM_FN void lum_fa_load_queries(uint32_t (&qf)[NQ][4], uint32_t (&qlf)[NL][4], const uint16_t* qs,
                                const uint16_t* ql, int first) {
  constexpr int kQs = LUM_AT_D + 8;
  const int lane = threadIdx.x % 32;
  const int r = first + lane % 8 + (lane / 8 % 2) * 8, c = (lane / 16) * 8;
#pragma unroll
  for (int kk = 0; kk < NQ; ++kk) {
    lum_ldsm(qf[kk], lum_smem_addr(qs + r * kQs + kk * 16 + c));
#if LUM_FA_SPLIT
    lum_ldsm(qlf[kk], lum_smem_addr(ql + r * kQs + kk * 16 + c));
#endif
  }
}
// One step of the online softmax over a warp's score fragments s[N][4] (N * 8 keys of
// rows g and g + 8: s[n] holds keys 8n + 2 t4 (+1) of row g in 0, 1, of row g + 8 in 2,
// 3): each row's running max m and sum l move on, the scores become the weights
// 2^(s scale - max) (the scale, positive, inside the exponent), and alpha is what the
// row's output so far must be multiplied by (1 where the max stayed).
template <int N>
LUM_FN void lum_fa_softmax_step(float (&s)[N][4], float (&m)[2], float (&l)[2], float (&alpha)[2], float scale) {
  const float kNegInf = __int_as_float(0xff800000);
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    float top = kNegInf;
#pragma unroll
    for (int n = 0; n < N; ++n) top = fmaxf(top, fmaxf(s[n][2 * h], s[n][2 * h + 1]));
    top = fmaxf(top, __shfl_xor_sync(0xffffffffu, top, 1));
    top = fmaxf(top, __shfl_xor_sync(0xffffffffu, top, 2));
    const float m_new = fmaxf(m[h], top * scale);
    // A row with no key kept yet subtracts 0: its -inf scores still give 0.
    const float base = m_new == kNegInf ? 0.0f : m_new;
    alpha[h] = lum_at_exp2(m[h] - base);
    m[h] = m_new;
    float sum = 0.0f;
#pragma unroll
    for (int n = 0; n < N; ++n)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        float& x = s[n][2 * h + e];
        x = lum_at_exp2(fmaf(x, scale, -base));
        sum += x;
      }
    l[h] = l[h] * alpha[h] + sum;
  }
}
// The output fragments acc rescaled by each row's alpha (once the max settles, most
// steps leave it: no rescaling then).
template <int NV> LUM_FN void lum_fa_rescale(float (&acc)[NV][4], const float (&alpha)[2]) {
#pragma unroll
  for (int h = 0; h < 2; ++h)
    if (__any_sync(0xffffffffu, alpha[h] != 1.0f))
#pragma unroll
      for (int j = 0; j < NV; ++j) acc[j][2 * h] *= alpha[h], acc[j][2 * h + 1] *= alpha[h];
}
// Both, on output fragments that are not being written meanwhile.
template <int N, int NV>
LUM_FN void lum_fa_softmax(float (&s)[N][4], float (&m)[2], float (&l)[2], float (&acc)[NV][4], float scale) {
  float alpha[2];
  lum_fa_softmax_step(s, m, l, alpha, scale);
  lum_fa_rescale(acc, alpha);
}
// The weights s[N][4] as the value product's A operand: pf[kk] (and, split, the
// remainders plf[kk]) holds keys 16 kk .. 16 kk + 15.
template <bool kBf16, int N, int NL>
LUM_FN void lum_fa_weights(const float (&s)[N][4], uint32_t (&pf)[N / 2][4], uint32_t (&plf)[NL][4]) {
#pragma unroll
  for (int kk = 0; kk < N / 2; ++kk) {
    const int lo = NL > 1 ? kk : 0;
    lum_fa_split<kBf16>(s[2 * kk][0], s[2 * kk][1], pf[kk][0], plf[lo][0]);
    lum_fa_split<kBf16>(s[2 * kk][2], s[2 * kk][3], pf[kk][1], plf[lo][1]);
    lum_fa_split<kBf16>(s[2 * kk + 1][0], s[2 * kk + 1][1], pf[kk][2], plf[lo][2]);
    lum_fa_split<kBf16>(s[2 * kk + 1][2], s[2 * kk + 1][3], pf[kk][3], plf[lo][3]);
  }
}
// A tile's 64 rows (of keys, values, queries) of W halves, `stride` apart from `src`, copied to
// `dst` (rows padded to W + 8), as one copy group: thread `tid` takes 16-byte pieces
// tid, tid + threads, ... (W / 16 of them: a tile has W / 2 threads' worth); rows at or
// past `valid` are zeros. Addresses advance by constants, no division in the loop.
template <int W>
LUM_FN void lum_fa_fetch(uint32_t dst, const uint16_t* src, long long stride, int valid, int tid) {
  constexpr int kPieces = W / 8, kStep = LUM_AT_THREADS / kPieces, kCarry = LUM_AT_THREADS % kPieces;
  int row = tid / kPieces, c = tid % kPieces;
  const uint16_t* p = src + row * stride + c * 8;
  uint32_t d = dst + (row * (W + 8) + c * 8) * 2;
#pragma unroll
  for (int i = 0; i < kPieces / 2; ++i) {
    const bool in = row < valid;
    lum_cp16(d, in ? p : src, in ? 16 : 0);
    row += kStep, c += kCarry;
    p += kStep * stride + kCarry * 8;
    d += (kStep * (W + 8) + kCarry * 8) * 2;
    if (kCarry != 0 && c >= kPieces) {
      c -= kPieces, ++row;
      p += stride - kPieces * 8;
      d += (W + 8 - kPieces * 8) * 2;
    }
  }
  lum_cp_commit();
}
#endif

// A row's offsets of q, mask and output, given its kv point's: the row decomposed over
// the dims keys and values do not vary along.
LUM_FN void lum_at_row(const LumAttnArgs& a, long long row, long long& q, long long& m, long long& o) {
  for (long long i = a.sh_rank - 1; i >= 0; --i) {
    const long long x = row % a.sh_dim[i];
    row /= a.sh_dim[i];
    q += x * a.sh_q[i], m += x * a.sh_m[i], o += x * a.sh_o[i];
  }
}
// Offsets of a kv point (index `p`): q, k, v, mask and output.
LUM_FN void lum_at_point(const LumAttnArgs& a, long long p, long long& q, long long& k, long long& v,
                          long long& m, long long& o) {
  q = a.q_off, k = a.k_off, v = a.v_off, m = a.m_off, o = 0;
  for (long long i = a.kv_rank - 1; i >= 0; --i) {
    const long long x = p % a.kv_dim[i];
    p /= a.kv_dim[i];
    k += x * a.kv_k[i], v += x * a.kv_v[i], q += x * a.kv_q[i], m += x * a.kv_m[i], o += x * a.kv_o[i];
  }
}

// Where a block of the kernels whose blocks run split fastest, then row tile, then kv
// point stands: its key split, (kv point, row tile) pair and tile, and the kv point's
// offsets of q, k, v, mask and output.
struct LumAtBlock {
  long long split, pair, tile, q, k, v, m, o;
};
LUM_FN LumAtBlock lum_at_block(const LumAttnArgs& a) {
  LumAtBlock b;
  const long long id = blockIdx.x;
  b.split = id % a.splits;
  b.pair = id / a.splits;
  b.tile = b.pair % a.row_tiles;
  lum_at_point(a, b.pair / a.row_tiles, b.q, b.k, b.v, b.m, b.o);
  return b;
}

// The split pieces combined, after the kernel that wrote them: a block a row, whose warps
// take the row's pieces in turn (warp w pieces w, w + warps, ...), a lane four elements of
// each. All of a warp's loads for up to kHeld pieces go out before any is waited for, and
// the first warp reads every piece's max and sum meanwhile: the pieces' weights (2^(their
// max - the largest)) are ready about when the pieces are. The warps' sums meet in shared
// memory. A piece without kept keys (max -inf, sum 0, output 0) weighs 0; a row without
// any comes out NaN, as the decomposition's 0 / 0 does.
extern "C" __global__ void __launch_bounds__(LUM_AT_THREADS)
    lum_attention_combine(const float* __restrict__ partials, void* __restrict__ out,
                          long long rows, long long splits) {
  lum_after_prior_grids();
  constexpr int kWarps = LUM_AT_THREADS / 32;
  constexpr int kOut = ((LUM_AT_DV + 3) / 4 + 31) / 32;  // a lane's 16-byte pieces of a row
  constexpr int kHeld = kOut < 16 ? 16 / kOut : 1;  // pieces a warp has on their way
  __shared__ float weight[LUM_AT_MAX_SPLITS], sums[LUM_AT_MAX_SPLITS];
  __shared__ float4 part[kWarps][32 * kOut];
  __shared__ float scale;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  for (long long row = blockIdx.x; row < rows; row += gridDim.x) {
    const float* p = partials + row * splits * kAtWidth;
    float4 x[kHeld][kOut];
    auto load = [&](long long first) {
#pragma unroll
      for (int h = 0; h < kHeld; ++h)
#pragma unroll
        for (int i = 0; i < kOut; ++i) {
          const long long s = first + h * kWarps;
          x[h][i] = s < splits && 4 * (lane + 32 * i) < LUM_AT_DV
                        ? __ldcg(reinterpret_cast<const float4*>(p + s * kAtWidth) + lane + 32 * i)
                        : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        }
    };
    load(warp);
    if (warp == 0) {
      float top = __int_as_float(0xff800000), total = 0.0f;
      for (long long s = lane; s < splits; s += 32) {
        const float2 ms = __ldcg(reinterpret_cast<const float2*>(p + s * kAtWidth + kAtMax));
        weight[s] = ms.x, sums[s] = ms.y;
        top = fmaxf(top, ms.x);
      }
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) top = fmaxf(top, __shfl_xor_sync(0xffffffffu, top, o));
      for (long long s = lane; s < splits; s += 32) {
        const float w = lum_at_exp2(weight[s] - top);
        weight[s] = w;
        total = fmaf(w, sums[s], total);
      }
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) total += __shfl_xor_sync(0xffffffffu, total, o);
      if (lane == 0) scale = 1.0f / total;
    }
    __syncthreads();
    float4 o[kOut];
#pragma unroll
    for (int i = 0; i < kOut; ++i) o[i] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    for (long long first = warp;;) {
#pragma unroll
      for (int h = 0; h < kHeld; ++h) {
        const long long s = first + h * kWarps;
        const float w = s < splits ? weight[s] : 0.0f;
#pragma unroll
        for (int i = 0; i < kOut; ++i) {
          o[i].x = fmaf(w, x[h][i].x, o[i].x), o[i].y = fmaf(w, x[h][i].y, o[i].y);
          o[i].z = fmaf(w, x[h][i].z, o[i].z), o[i].w = fmaf(w, x[h][i].w, o[i].w);
        }
      }
      first += kWarps * kHeld;
      if (first >= splits) break;
      load(first);
    }
#pragma unroll
    for (int i = 0; i < kOut; ++i) part[warp][lane + 32 * i] = o[i];
    __syncthreads();
    for (int j = tid; 4 * j < LUM_AT_DV; j += LUM_AT_THREADS) {
      float4 sum = part[0][j];
#pragma unroll
      for (int w = 1; w < kWarps; ++w)
        sum.x += part[w][j].x, sum.y += part[w][j].y, sum.z += part[w][j].z, sum.w += part[w][j].w;
      const float v[4] = {sum.x * scale, sum.y * scale, sum.z * scale, sum.w * scale};
#pragma unroll
      for (int e = 0; e < 4; ++e)  // (a row's last piece may run into its max and sum)
        if (4 * j + e < LUM_AT_DV) LUM_AT_O::put(out, row * LUM_AT_DV + 4 * j + e, v[e]);
    }
    __syncthreads();  // weight, sums and part are rewritten for the next row
  }
}
)ATTN";

constexpr const char* kTilesSource = R"ATTN(
constexpr int kFaRows = LUM_FA_ROWS, kFaKeys = LUM_FA_KEYS;

// The mask's tiles, before a tensor-core attention kernel: for each (mask point, row
// tile, key tile) of LUM_FA_ROWS x LUM_FA_KEYS, whether any row keeps a key (bit 0) and
// whether every row keeps every key (bit 1); with LUM_FA_TILE_BITS, a mixed tile's keep
// bits, four words a row (bit b of word w: key 8 (b / 2) + 2 w + b % 2, as a thread's
// score fragments hold them). Mask points are the kv points where the mask varies along
// those dims, else one. The attention kernel then skips dropped tiles without reading
// them, and reads the bits of mixed ones only.
// A warp takes 32 rows of a row tile (a lane a row, its offsets worked out once) over
// LUM_FA_MASK_CHUNK key tiles; the warps of a row tile's rows are in one block, and meet
// in shared memory at each key tile. A computed mask is bounded over the warp's rows and
// the tile's keys at once first (lum_at_keep_over): under a causal mask, only the
// diagonal's keys are evaluated one by one.
extern "C" __global__ void __launch_bounds__(LUM_AT_THREADS) lum_attention_mask_tiles(const LumAttnArgs a) {
  lum_after_prior_grids();
  constexpr int kSlices = kFaRows / 32, kWarps = LUM_AT_THREADS / 32;
  static_assert(kFaRows % 32 == 0 && kWarps % kSlices == 0, "a row tile's warps in one block");
  __shared__ int slice_flags[2][kWarps];  // by key tile's parity
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, slice = warp % kSlices;
  const long long chunks = (a.key_tiles + LUM_FA_MASK_CHUNK - 1) / LUM_FA_MASK_CHUNK;
  const long long group = blockIdx.x * (long long)(kWarps / kSlices) + warp / kSlices;
  const bool live = group < a.mask_points * a.row_tiles * chunks;
  const long long chunk = group % chunks, tile = group / chunks % a.row_tiles;
  const long long point = a.mask_points > 1 ? group / chunks / a.row_tiles : 0;
  const int r = slice * 32 + lane;  // the lane's row of the tile
  const bool row = live && r < (int)min((long long)kFaRows, a.shared_rows - tile * kFaRows);
  long long m = 0;
  if (live) {
    long long q, k, v, o, qr = 0, orow = 0;
    lum_at_point(a, point, q, k, v, m, o);
    if (row) lum_at_row(a, tile * kFaRows + r, qr, m, orow);
  }
  long long lo = row ? m : 0x7fffffffffffffffLL, hi = row ? m : -0x7fffffffffffffffLL;
  for (int i = 16; i > 0; i >>= 1)
    lo = min(lo, __shfl_xor_sync(0xffffffffu, lo, i)), hi = max(hi, __shfl_xor_sync(0xffffffffu, hi, i));
  for (int i = 0; i < LUM_FA_MASK_CHUNK; ++i) {
    const long long kt = chunk * LUM_FA_MASK_CHUNK + i;
    const bool tile_live = live && kt < a.key_tiles;
    uint32_t words[4] = {0u, 0u, 0u, 0u};
    if (tile_live && lo <= hi) {
      const long long t0 = kt * kFaKeys;
      const int n = (int)min((long long)kFaKeys, a.keys - t0);
      const int keep = lum_at_keep_over(a, lo, hi, t0, t0 + n - 1);
      if (row && keep == 1 && n == kFaKeys) {
        words[0] = words[1] = words[2] = words[3] = 0xffffffffu;
      } else if (row && keep != 0) {
#pragma unroll
        for (int t = 0; t < 4; ++t)
#pragma unroll 4
          for (int b = 0; b < 32; ++b) {
            const int j = 8 * (b / 2) + 2 * t + b % 2;
            if (j < n && (keep == 1 || lum_at_keep(a, m, t0 + j))) words[t] |= 1u << b;
          }
      }
    }
    const bool any = (words[0] | words[1] | words[2] | words[3]) != 0u;
    const bool all = (words[0] & words[1] & words[2] & words[3]) == 0xffffffffu;
    const unsigned kept = __ballot_sync(0xffffffffu, any), whole = __ballot_sync(0xffffffffu, all);
    if (lane == 0) slice_flags[i % 2][warp] = (kept != 0u ? 1 : 0) | (whole == 0xffffffffu ? 2 : 0);
    __syncthreads();
    if (!tile_live) continue;
    int any_kept = 0, all_kept = 2;
    for (int s = 0; s < kSlices; ++s) {
      const int f = slice_flags[i % 2][warp - slice + s];
      any_kept |= f & 1, all_kept &= f;
    }
    const int flags = any_kept | all_kept;
    const long long w = (point * a.row_tiles + tile) * a.key_tiles + kt;
    if (slice == 0 && lane == 0) a.tiles[w] = flags;
#if LUM_FA_TILE_BITS
    if (flags == 1)  // mixed: each row's bits (rows past the end keep nothing)
      *(uint4*)(a.tile_bits + (w * kFaRows + r) * 4) = make_uint4(words[0], words[1], words[2], words[3]);
#endif
  }
}

// A tensor-core kernel's block (or work item `bid`): its key split, row tile (the last
// rows first: under a causal mask they see the most keys) and kv point, kv points
// fastest.
struct LumFaBlock {
  long long split, tile, point;
};
LUM_FN LumFaBlock lum_fa_block(const LumAttnArgs& a, long long bid) {
  long long kv_points = 1;
  for (int i = 0; i < a.kv_rank; ++i) kv_points *= a.kv_dim[i];
  LumFaBlock b;
  b.split = bid % a.splits;
  bid /= a.splits;
  b.tile = a.row_tiles - 1 - bid / kv_points;
  b.point = bid % kv_points;
  return b;
}
LUM_FN LumFaBlock lum_fa_block(const LumAttnArgs& a) { return lum_fa_block(a, blockIdx.x); }
// The rows of tile `tile` (at most kFaRows) of the kv point at offsets qo, mo, oo; the
// thread of index i < kFaRows writes row i's offsets of q, mask and output (rows past
// the end repeat the last).
LUM_FN int lum_fa_rows(const LumAttnArgs& a, long long tile, int i, long long qo, long long mo,
                       long long oo, long long* row_q, long long* row_m, long long* row_o) {
  const int rows = (int)min((long long)kFaRows, a.shared_rows - tile * kFaRows);
  if (i < kFaRows) {
    long long q = qo, m = mo, o = oo;
    lum_at_row(a, tile * kFaRows + min(i, rows - 1), q, m, o);
    row_q[i] = q, row_m[i] = m, row_o[i] = o;
  }
  return rows;
}

#if __CUDA_ARCH__ >= 800
// A warp's output rows r0 and r0 + 8 of the block (rows past `rows` are not written)
// from its accumulators o[NV][4] (columns 8j + 2 t4 (+1)), running maxima m and sums l:
// each row's sum over its quad, then out = o / sum, or the split's piece. With
// LUM_FA_PAIRED_OUT an output of the keys' half type takes two adjacent elements in one
// 32-bit store.
template <bool kBf16, int NV>
LUM_FN void lum_fa_store(const LumAttnArgs& a, const float (&o)[NV][4], const float (&m)[2],
                         float (&l)[2], int r0, int rows, const long long* row_o, long long split) {
  const int t4 = threadIdx.x % 4;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    l[h] += __shfl_xor_sync(0xffffffffu, l[h], 1);
    l[h] += __shfl_xor_sync(0xffffffffu, l[h], 2);
    const int r = r0 + 8 * h;
    if (r >= rows) continue;
    if (a.splits == 1) {
      const float inv = 1.0f / l[h];
#pragma unroll
      for (int j = 0; j < NV; ++j) {
        const long long at = row_o[r] * LUM_AT_DV + j * 8 + 2 * t4;  // (even)
#if LUM_FA_PAIRED_OUT
        *(uint32_t*)((uint16_t*)a.out + at) = lum_pack_half2<kBf16>(o[j][2 * h] * inv, o[j][2 * h + 1] * inv);
#else
        LUM_AT_O::put(a.out, at, o[j][2 * h] * inv);
        LUM_AT_O::put(a.out, at + 1, o[j][2 * h + 1] * inv);
#endif
      }
    } else {
      float* p = a.partials + (row_o[r] * a.splits + split) * kAtWidth;
#pragma unroll
      for (int j = 0; j < NV; ++j) p[j * 8 + 2 * t4] = o[j][2 * h], p[j * 8 + 2 * t4 + 1] = o[j][2 * h + 1];
      if (t4 == 0) p[kAtMax] = m[h], p[kAtMax + 1] = l[h];
    }
  }
}
#endif

// One (mask point, row tile)'s flags, read by a whole warp: the first tile from kt on
// that keeps a key, and its flags. Each lane holds one tile's flags of a window of 32,
// loaded when the window moves.
struct LumFaTiles {
  long long first;  // the index of the row tile's first key tile among all tiles
  const unsigned char* flags;
  long long end, window = -1;
  int window_flags = 0;
  __device__ LumFaTiles(const LumAttnArgs& a, long long point, long long tile, long long key_tiles_end)
      : first(((a.mask_points > 1 ? point : 0) * a.row_tiles + tile) * a.key_tiles),
        flags(a.tiles + first),
        end(key_tiles_end) {}
  __device__ long long next_kept(long long kt, int& tile_flags) {
    const int lane = threadIdx.x % 32;
    while (kt < end) {
      if (kt - window >= 32 || window < 0) {
        window = kt;
        window_flags = kt + lane < end ? flags[kt + lane] : 0;
      }
      const int from = (int)(kt - window);
      const unsigned kept = __ballot_sync(0xffffffffu, (window_flags & 1) && lane >= from);
      if (kept != 0u) {
        const int i = __ffs(kept) - 1;
        tile_flags = __shfl_sync(0xffffffffu, window_flags, i);
        return window + i;
      }
      kt = window + 32;
    }
    return end;
  }
};
)ATTN";

const char* element(DType t) {
  return t == DType::F32 ? "lum_at_f32" : t == DType::F16 ? "lum_at_f16" : "lum_at_bf16";
}

}  // namespace

int vector_width(const ConcreteView& view, size_t head_axis, int64_t head_dim, DType t,
                 const void* data) {
  const auto n = static_cast<int64_t>(16 / dtype_size(t));
  if (view.strides[head_axis] != 1 || head_dim % n != 0 || view.offset % n != 0 ||
      reinterpret_cast<uintptr_t>(data) % 16 != 0)
    return 1;
  for (size_t i = 0; i < view.dims.size(); ++i)
    if (i != head_axis && view.dims[i] > 1 && view.strides[i] % n != 0) return 1;
  return static_cast<int>(n);
}

std::string_view attention_tiles_source() {
  return kTilesSource;
}

std::string attention_program(const AttentionOperands& operands,
                              const std::vector<std::pair<std::string, std::string>>& defines,
                              std::string_view kernel, int threads) {
  std::string source = std::string(cuda_prelude()) + std::string(runtime::scalar_prelude());
  auto define = [&](const std::string& name, const std::string& value) {
    source += "#define " + name + " " + value + "\n";
  };
  define("LUM_AT_Q", element(operands.q));
  define("LUM_AT_K", element(operands.k));
  define("LUM_AT_V", element(operands.v));
  define("LUM_AT_O", element(operands.out));
  define("LUM_AT_D", std::to_string(operands.d));
  define("LUM_AT_DV", std::to_string(operands.dv));
  define("LUM_AT_PIECE_MAX", std::to_string(attention_piece_max(operands.dv)));
  define("LUM_AT_PIECE_FLOATS", std::to_string(attention_piece_floats(operands.dv)));
  define("LUM_AT_THREADS", std::to_string(threads));
  define("LUM_AT_MAX_SPLITS", std::to_string(kAttentionMaxSplits));
  define("LUM_FA_MASK_CHUNK", std::to_string(kMaskTileChunk));
  define("LUM_AT_MASK_DIMS", std::to_string(compiler::kMaxComputedMaskDims));
  define("LUM_FA_KBF16", operands.k == DType::BF16 ? "true" : "false");
  define("LUM_FA_VBF16", operands.v == DType::BF16 ? "true" : "false");
  for (const auto& [name, value] : defines) define(name, value);
  return source + std::string(tensor_core_source()) + kCommonSource + std::string(kernel);
}

}  // namespace luminal::cudagen

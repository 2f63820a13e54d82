// Attention's backward pass on tensor cores (see attention_grad.hpp).
//
// Flash-attention's backward pass with sm_80's warp-level matrix instructions
// (mma.m16n8k16, f32 accumulators), in three kernels over tiles of 64 query rows and 64
// keys. The pass over the mask that the forward kernel uses first marks each tile
// dropped, kept whole or mixed: dropped tiles are skipped (half a causal prompt's work),
// only mixed ones look at their mask.
// - Stats (a block a row tile, four warps of 16 rows): the scores s = q.k scale and the
//   output gradient's products with the values dp = dout.v, tile by tile; each row's
//   running max, sum of 2^s and sum of 2^s dp, rescaled as the max moves. Out: the
//   log2-sum-exp2 and delta = sum p dp, the row's weights p = 2^(s - lse).
// - Queries (the same blocks): s and dp again, p from the row's lse, ds = p (dp - delta),
//   dq += ds k.
// - KeysValues (a block a tile of 64 keys, 16 a warp, their keys and values held in
//   registers as the products' A operand): over the row tiles that keep any of its keys,
//   the transposed scores s^T = k.q and dp^T = v.dout, p^T and ds^T from each row's
//   stats, dv += p^T dout and dk += ds^T q.
// Each recomputes the products of the others instead of exchanging tiles: no atomics,
// and the results do not depend on the order blocks run in.
#include "backends/cuda/attention_grad.hpp"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "backends/cuda/attention_common.hpp"
#include "backends/cuda/codegen.hpp"

namespace luminal::cudagen {
namespace {

constexpr int64_t kTile = 64;  // query rows and keys of a tile

constexpr const char* kSource = R"ATTN(
constexpr int kAgQs = LUM_AT_D + 8, kAgVs = LUM_AT_DV + 8;  // halves a row in shared memory
constexpr int kAgNd = LUM_AT_D / 16, kAgNv = LUM_AT_DV / 16;  // 16-wide steps over the head dims
constexpr bool kAgBf16 = LUM_FA_KBF16;

// A warp's 16 rows from `first` of a staged tile of W halves a row as A fragments.
template <int W, int N>
LUM_FN void lum_ag_load_a(uint32_t (&f)[N][4], const uint16_t* tile, int first) {
  const int lane = threadIdx.x % 32;
  const int r = first + lane % 8 + (lane / 8 % 2) * 8, c = (lane / 16) * 8;
#pragma unroll
  for (int kk = 0; kk < N; ++kk) lum_ldsm(f[kk], lum_smem_addr(tile + r * (W + 8) + kk * 16 + c));
}
// Each lane's row of the matrix loads of a staged tile of W halves a row read as the B
// operand: across its rows (n) and along them (k), or transposed (k across rows).
template <int W> LUM_FN uint32_t lum_ag_b_lane(const uint16_t* tile) {
  const int lane = threadIdx.x % 32;
  return lum_smem_addr(tile + (lane % 8 + (lane / 16) * 8) * (W + 8) + (lane / 8 % 2) * 8);
}
template <int W> LUM_FN uint32_t lum_ag_bt_lane(const uint16_t* tile) {
  const int lane = threadIdx.x % 32;
  return lum_smem_addr(tile + (lane % 8 + (lane / 8 % 2) * 8) * (W + 8) + (lane / 16) * 8);
}
// c[8][4] (64 columns of the warp's 16 rows) = a (16 x K, fragments) times the staged
// tile at b_lane (64 rows of K halves) transposed.
template <int W, int N>
LUM_FN void lum_ag_scores(float (&c)[8][4], const uint32_t (&a)[N][4], uint32_t b_lane) {
  const uint32_t none[4] = {0u, 0u, 0u, 0u};
#pragma unroll
  for (int n = 0; n < 8; ++n) c[n][0] = c[n][1] = c[n][2] = c[n][3] = 0.0f;
#pragma unroll
  for (int kk = 0; kk < N; ++kk)
#pragma unroll
    for (int n2 = 0; n2 < 4; ++n2)
      lum_fa_product<kAgBf16, false>(c[2 * n2], c[2 * n2 + 1], a[kk], none,
                                     b_lane + (n2 * 16 * (W + 8) + kk * 16) * 2);
}
// acc[W / 8][4] += w (16 x 64, as scores) times the staged tile at bt_lane (64 rows of W).
template <int W>
LUM_FN void lum_ag_accumulate(float (&acc)[W / 8][4], const float (&w)[8][4], uint32_t bt_lane) {
  uint32_t wf[4][4], unused[1][4];
  lum_fa_weights<kAgBf16>(w, wf, unused);
#pragma unroll
  for (int kk = 0; kk < 4; ++kk)
#pragma unroll
    for (int n2 = 0; n2 < W / 16; ++n2)
      lum_fa_product<kAgBf16, true>(acc[2 * n2], acc[2 * n2 + 1], wf[kk], unused[0],
                                    bt_lane + (kk * 16 * (W + 8) + n2 * 16) * 2);
}

// Stats (kStats) or the queries' gradient for a tile of query rows.
template <bool kStats>
LUM_FN void lum_ag_rows(const LumAttnArgs& a, const uint16_t* dout, const float* stats, float scale) {
  lum_after_prior_grids();
  extern __shared__ __align__(16) unsigned char lum_ag_shared[];
  // The query rows' tiles, then two buffers of a key tile's keys and values (the next
  // kept tile's arrive while this one's products run).
  uint16_t* const qs = (uint16_t*)lum_ag_shared;
  uint16_t* const os = qs + kFaRows * kAgQs;
  uint16_t* const kv = os + kFaRows * kAgVs;
  constexpr int kAgKv = kFaKeys * (kAgQs + kAgVs);  // halves a buffer
  long long* const row_m = (long long*)(kv + 2 * kAgKv);
  const float kNegInf = __int_as_float(0xff800000);
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, t4 = lane % 4;

  const LumFaBlock block = lum_fa_block(a);
  const long long tile = block.tile;
  long long qo, ko, vo, mo, oo;
  lum_at_point(a, block.point, qo, ko, vo, mo, oo);
  const int rows = (int)min((long long)kFaRows, a.shared_rows - tile * kFaRows);
  const long long first = block.point * a.shared_rows + tile * kFaRows;  // the tile's first row
  if (tid < kFaRows) row_m[tid] = mo + (tile * kFaRows + min(tid, rows - 1)) * a.sh_m[0];
  lum_fa_fetch<LUM_AT_D>(lum_smem_addr(qs), (const uint16_t*)a.q + qo + tile * kFaRows * a.sh_q[0],
                         a.sh_q[0], rows, tid);
  lum_fa_fetch<LUM_AT_DV>(lum_smem_addr(os), dout + oo + tile * kFaRows * a.sh_o[0], a.sh_o[0], rows, tid);
  lum_cp_wait<0>();
  __syncthreads();
  uint32_t qf[kAgNd][4], of[kAgNv][4];
  lum_ag_load_a<LUM_AT_D>(qf, qs, warp * 16);
  lum_ag_load_a<LUM_AT_DV>(of, os, warp * 16);
  // Rows g and g + 8 of the warp's: the running max (of 2^s's exponents), sums of 2^s
  // and of 2^s dp (each thread its keys; the quad's summed at the end) or, for the
  // queries' gradient, the row's stats.
  float m[2] = {kNegInf, kNegInf}, l[2] = {0.0f, 0.0f}, u[2] = {0.0f, 0.0f};
  float lse[2], delta[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int r = warp * 16 + g + 8 * h;
    lse[h] = !kStats && r < rows ? stats[(first + r) * 2] : kNegInf;
    delta[h] = !kStats && r < rows ? stats[(first + r) * 2 + 1] : 0.0f;
  }
  float dq[LUM_AT_D / 8][4];
#pragma unroll
  for (int j = 0; j < LUM_AT_D / 8; ++j) dq[j][0] = dq[j][1] = dq[j][2] = dq[j][3] = 0.0f;

  // Buffer b's keys at kv + b kAgKv, its values after them: lanes' addresses in buffer 0.
  const uint32_t k_lane = lum_ag_b_lane<LUM_AT_D>(kv), v_lane = lum_ag_b_lane<LUM_AT_DV>(kv + kFaKeys * kAgQs);
  const uint32_t kt_lane = lum_ag_bt_lane<LUM_AT_D>(kv);
  const uint16_t* kp = (const uint16_t*)a.k + ko;
  const uint16_t* vp = (const uint16_t*)a.v + vo;
  const long long key_tiles = (a.keys + kFaKeys - 1) / kFaKeys;
  auto fetch = [&](long long kt, int buf) {  // two copy groups
    const int valid = (int)min((long long)kFaKeys, a.keys - kt * kFaKeys);
    uint16_t* const at = kv + buf * kAgKv;
    lum_fa_fetch<LUM_AT_D>(lum_smem_addr(at), kp + kt * kFaKeys * a.k_t, a.k_t, valid, tid);
    lum_fa_fetch<LUM_AT_DV>(lum_smem_addr(at + kFaKeys * kAgQs), vp + kt * kFaKeys * a.v_t, a.v_t, valid, tid);
  };
  LumFaTiles tiles(a, block.point, tile, key_tiles);
  int flags = 0, buf = 0;
  long long kt = tiles.next_kept(0, flags);
  if (kt < key_tiles) fetch(kt, 0);
  while (kt < key_tiles) {
    int next_flags = 0;
    const long long next = tiles.next_kept(kt + 1, next_flags);
    if (next < key_tiles) {
      fetch(next, buf ^ 1);
      lum_cp_wait<2>();
    } else {
      lum_cp_wait<0>();
    }
    __syncthreads();  // this tile's keys and values are in
    const int valid = (int)min((long long)kFaKeys, a.keys - kt * kFaKeys);
    const uint32_t shift = buf * kAgKv * 2;  // bytes
    float s[8][4], dp[8][4];
    lum_ag_scores<LUM_AT_D>(s, qf, k_lane + shift);
    lum_ag_scores<LUM_AT_DV>(dp, of, v_lane + shift);
    const bool whole = flags & 2;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = warp * 16 + g + 8 * h;
#pragma unroll
      for (int n = 0; n < 8; ++n)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int key = 8 * n + 2 * t4 + e;
          const bool keep = whole || (r < rows && key < valid && lum_at_keep(a, row_m[r], kt * kFaKeys + key));
          float& x = s[n][2 * h + e];
          x = keep ? x * a.scale : kNegInf;
        }
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      if (kStats) {
        float top = kNegInf;
#pragma unroll
        for (int n = 0; n < 8; ++n) top = fmaxf(top, fmaxf(s[n][2 * h], s[n][2 * h + 1]));
        top = fmaxf(top, __shfl_xor_sync(0xffffffffu, top, 1));
        top = fmaxf(top, __shfl_xor_sync(0xffffffffu, top, 2));
        const float m_new = fmaxf(m[h], top);
        const float base = m_new == kNegInf ? 0.0f : m_new;  // (no key kept yet: all 0)
        const float alpha = lum_at_exp2(m[h] - base);
        float sum = 0.0f, weighted = 0.0f;
#pragma unroll
        for (int n = 0; n < 8; ++n)
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const float p = lum_at_exp2(s[n][2 * h + e] - base);
            sum += p;
            weighted = fmaf(p, dp[n][2 * h + e], weighted);
          }
        m[h] = m_new;
        l[h] = l[h] * alpha + sum;
        u[h] = u[h] * alpha + weighted;
      } else {
        // (A row that keeps no key has lse -inf and no kept score: its weights are 0.)
        const float base = lse[h] == kNegInf ? 0.0f : lse[h];
#pragma unroll
        for (int n = 0; n < 8; ++n)
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const float p = lum_at_exp2(s[n][2 * h + e] - base);
            s[n][2 * h + e] = p * (dp[n][2 * h + e] - delta[h]);
          }
      }
    }
    if (!kStats) lum_ag_accumulate<LUM_AT_D>(dq, s, kt_lane + shift);
    __syncthreads();  // every warp is past this buffer before the next tile but one fills it
    kt = next, flags = next_flags, buf ^= 1;
  }

#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int r = warp * 16 + g + 8 * h;
    if (kStats) {
#pragma unroll
      for (int i = 1; i < 4; i <<= 1) {
        l[h] += __shfl_xor_sync(0xffffffffu, l[h], i);
        u[h] += __shfl_xor_sync(0xffffffffu, u[h], i);
      }
      if (t4 == 0 && r < rows) {
        float* o = (float*)a.out + (first + r) * 2;
        o[0] = l[h] > 0.0f ? m[h] + __log2f(l[h]) : kNegInf;
        o[1] = l[h] > 0.0f ? u[h] / l[h] : 0.0f;
      }
    } else if (r < rows) {
#pragma unroll
      for (int j = 0; j < LUM_AT_D / 8; ++j) {
        const long long at = (first + r) * LUM_AT_D + j * 8 + 2 * t4;
        *(uint32_t*)((uint16_t*)a.out + at) = lum_pack_half2<kAgBf16>(dq[j][2 * h] * scale, dq[j][2 * h + 1] * scale);
      }
    }
  }
}

extern "C" __global__ void __launch_bounds__(LUM_AT_THREADS)
    lum_attention_grad_stats(const LumAttnArgs a, const uint16_t* dout, const float* stats, float scale) {
  lum_ag_rows<true>(a, dout, stats, scale);
}
extern "C" __global__ void __launch_bounds__(LUM_AT_THREADS)
    lum_attention_grad_q(const LumAttnArgs a, const uint16_t* dout, const float* stats, float scale) {
  lum_ag_rows<false>(a, dout, stats, scale);
}

// The keys' and values' gradients for a tile of keys (the heaviest, the first under a
// causal mask, first), side by side in each key's row of the output.
extern "C" __global__ void __launch_bounds__(LUM_AT_THREADS)
    lum_attention_grad_kv(const LumAttnArgs a, const uint16_t* dout, const float* stats, float scale) {
  lum_after_prior_grids();
  extern __shared__ __align__(16) unsigned char lum_ag_shared[];
  // The keys' and values' tiles, then two buffers of a row tile's queries and output
  // gradients (the next one's arrive while this one's products run), and each buffer's
  // rows' mask offsets and stats.
  uint16_t* const ks = (uint16_t*)lum_ag_shared;
  uint16_t* const vs = ks + kFaKeys * kAgQs;
  uint16_t* const qo_tiles = vs + kFaKeys * kAgVs;
  constexpr int kAgQo = kFaRows * (kAgQs + kAgVs);  // halves a buffer
  long long* const row_m = (long long*)(qo_tiles + 2 * kAgQo);  // [2][kFaRows]
  float* const row_lse = (float*)(row_m + 2 * kFaRows);
  float* const row_delta = row_lse + 2 * kFaRows;
  const float kNegInf = __int_as_float(0xff800000);
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, t4 = lane % 4;

  long long kv_points = 1;
  for (int i = 0; i < a.kv_rank; ++i) kv_points *= a.kv_dim[i];
  const long long point = blockIdx.x % kv_points, kt = blockIdx.x / kv_points;
  long long qo, ko, vo, mo, oo;
  lum_at_point(a, point, qo, ko, vo, mo, oo);
  const int valid = (int)min((long long)kFaKeys, a.keys - kt * kFaKeys);
  lum_fa_fetch<LUM_AT_D>(lum_smem_addr(ks), (const uint16_t*)a.k + ko + kt * kFaKeys * a.k_t, a.k_t, valid, tid);
  lum_fa_fetch<LUM_AT_DV>(lum_smem_addr(vs), (const uint16_t*)a.v + vo + kt * kFaKeys * a.v_t, a.v_t, valid, tid);
  lum_cp_wait<0>();
  __syncthreads();
  uint32_t kf[kAgNd][4], vf[kAgNv][4];
  lum_ag_load_a<LUM_AT_D>(kf, ks, warp * 16);
  lum_ag_load_a<LUM_AT_DV>(vf, vs, warp * 16);
  float dk[LUM_AT_D / 8][4], dv[LUM_AT_DV / 8][4];
#pragma unroll
  for (int j = 0; j < LUM_AT_D / 8; ++j) dk[j][0] = dk[j][1] = dk[j][2] = dk[j][3] = 0.0f;
#pragma unroll
  for (int j = 0; j < LUM_AT_DV / 8; ++j) dv[j][0] = dv[j][1] = dv[j][2] = dv[j][3] = 0.0f;

  // Buffer b's queries at qo_tiles + b kAgQo, its output gradients after them: lanes'
  // addresses in buffer 0.
  uint16_t* const os = qo_tiles + kFaRows * kAgQs;
  const uint32_t q_lane = lum_ag_b_lane<LUM_AT_D>(qo_tiles), o_lane = lum_ag_b_lane<LUM_AT_DV>(os);
  const uint32_t qt_lane = lum_ag_bt_lane<LUM_AT_D>(qo_tiles), ot_lane = lum_ag_bt_lane<LUM_AT_DV>(os);
  const unsigned char* flags =
      a.tiles + (a.mask_points > 1 ? point : 0) * a.row_tiles * a.key_tiles + kt;
  // The first row tile from rt on that keeps any of these keys (a.row_tiles if none).
  auto next_kept = [&](long long rt) {
    while (rt < a.row_tiles && !(flags[rt * a.key_tiles] & 1)) ++rt;
    return rt;
  };
  auto fetch = [&](long long rt, int buf) {  // two copy groups, and the rows' offsets and stats
    const int rows = (int)min((long long)kFaRows, a.shared_rows - rt * kFaRows);
    const long long first = point * a.shared_rows + rt * kFaRows;
    uint16_t* const at = qo_tiles + buf * kAgQo;
    lum_fa_fetch<LUM_AT_D>(lum_smem_addr(at), (const uint16_t*)a.q + qo + rt * kFaRows * a.sh_q[0],
                           a.sh_q[0], rows, tid);
    lum_fa_fetch<LUM_AT_DV>(lum_smem_addr(at + kFaRows * kAgQs), dout + oo + rt * kFaRows * a.sh_o[0],
                            a.sh_o[0], rows, tid);
    if (tid < kFaRows) {
      const int i = buf * kFaRows + tid;
      row_m[i] = mo + (rt * kFaRows + min(tid, rows - 1)) * a.sh_m[0];
      row_lse[i] = tid < rows ? stats[(first + tid) * 2] : kNegInf;
      row_delta[i] = tid < rows ? stats[(first + tid) * 2 + 1] : 0.0f;
    }
  };
  int buf = 0;
  long long rt = next_kept(0);
  if (rt < a.row_tiles) fetch(rt, 0);
  while (rt < a.row_tiles) {
    const long long next = next_kept(rt + 1);
    if (next < a.row_tiles) {
      fetch(next, buf ^ 1);
      lum_cp_wait<2>();
    } else {
      lum_cp_wait<0>();
    }
    __syncthreads();  // this tile's rows are in
    const int f = flags[rt * a.key_tiles];
    const int rows = (int)min((long long)kFaRows, a.shared_rows - rt * kFaRows);
    const uint32_t shift = buf * kAgQo * 2;  // bytes
    const long long* const m_rows = row_m + buf * kFaRows;
    const float* const lse_rows = row_lse + buf * kFaRows;
    const float* const delta_rows = row_delta + buf * kFaRows;
    // Transposed: rows are the warp's keys g and g + 8, columns the tile's query rows.
    float s[8][4], dp[8][4];
    lum_ag_scores<LUM_AT_D>(s, kf, q_lane + shift);
    lum_ag_scores<LUM_AT_DV>(dp, vf, o_lane + shift);
    const bool whole = f & 2;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int key = warp * 16 + g + 8 * h;
#pragma unroll
      for (int n = 0; n < 8; ++n)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int r = 8 * n + 2 * t4 + e;
          const bool keep = whole || (r < rows && key < valid && lum_at_keep(a, m_rows[r], kt * kFaKeys + key));
          const float lse = lse_rows[r];
          const float p = keep && lse != kNegInf ? lum_at_exp2(fmaf(s[n][2 * h + e], a.scale, -lse)) : 0.0f;
          s[n][2 * h + e] = p;
          dp[n][2 * h + e] = p * (dp[n][2 * h + e] - delta_rows[r]);
        }
    }
    lum_ag_accumulate<LUM_AT_DV>(dv, s, ot_lane + shift);
    lum_ag_accumulate<LUM_AT_D>(dk, dp, qt_lane + shift);
    __syncthreads();  // every warp is past this buffer before the next tile but one fills it
    rt = next, buf ^= 1;
  }

#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int key = warp * 16 + g + 8 * h;
    if (key >= valid) continue;
    uint16_t* o = (uint16_t*)a.out + (point * a.keys + kt * kFaKeys + key) * (LUM_AT_D + LUM_AT_DV);
#pragma unroll
    for (int j = 0; j < LUM_AT_D / 8; ++j)
      *(uint32_t*)(o + j * 8 + 2 * t4) = lum_pack_half2<kAgBf16>(dk[j][2 * h] * scale, dk[j][2 * h + 1] * scale);
#pragma unroll
    for (int j = 0; j < LUM_AT_DV / 8; ++j)
      *(uint32_t*)(o + LUM_AT_D + j * 8 + 2 * t4) = lum_pack_half2<kAgBf16>(dv[j][2 * h], dv[j][2 * h + 1]);
  }
}
)ATTN";

// Shared memory a block takes: three tiles each of queries (or keys) and output
// gradients (or values), of 64 rows padded by 8 halves (one of the two kinds, two
// buffers of the other), and two buffers of a row's mask offset and stats.
size_t shared_bytes(const AttentionGradKernel& s) {
  return static_cast<size_t>(3 * kTile * 2 * ((s.d + 8) + (s.dv + 8)) + 2 * kTile * (8 + 4 + 4));
}

}  // namespace

bool attention_grad_supports(DType t, int64_t d, int64_t dv) {
  return (t == DType::F16 || t == DType::BF16) && d % 16 == 0 && dv % 16 == 0 && d >= 16 &&
         dv >= 16 && d <= 128 && dv <= 128;
}

std::string attention_grad_source(const AttentionGradKernel& s) {
  return attention_program({s.type, s.type, s.type, s.type, s.d, s.dv},
                           {{"LUM_FA_ROWS", std::to_string(kTile)},
                            {"LUM_FA_KEYS", std::to_string(kTile)},
                            {"LUM_FA_SPLIT", "0"},
                            {"LUM_FA_TILE_BITS", "0"},
                            {"LUM_FA_PAIRED_OUT", "0"}},
                           std::string(attention_tiles_source()) + kSource);
}

const AttentionGrad::Compiled& AttentionGrad::compiled(const AttentionGradKernel& spec,
                                                       const ComputedMask* mask) {
  const std::string key = std::to_string(static_cast<int>(spec.type)) + " " +
                          std::to_string(spec.d) + " " + std::to_string(spec.dv) + " " +
                          (mask ? mask->keep : "");
  Compiled& c = kernels_[key];
  if (!c.module) {
    c.module = std::make_unique<Module>(
        compile_cubin((mask ? mask->source : "") + attention_grad_source(spec), device_.arch())
            .code);
    c.mask_tiles = c.module->kernel("lum_attention_mask_tiles");
    c.shared_bytes = shared_bytes(spec);
    const char* names[] = {"lum_attention_grad_stats", "lum_attention_grad_q",
                           "lum_attention_grad_kv"};
    for (int i = 0; i < 3; ++i) {
      c.parts[i] = c.module->kernel(names[i]);
      check(cudaKernelSetAttributeForDevice(
                reinterpret_cast<cudaKernel_t>(const_cast<void*>(c.parts[i])),
                cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(c.shared_bytes),
                device_.ordinal()),
            "allowing attention's gradients their shared memory");
    }
  }
  return c;
}

bool AttentionGrad::run(compiler::AttentionGradPart part, const std::vector<ConcreteView>& views,
                        const std::vector<const void*>& data, DType type,
                        const ComputedMask* computed, double scale, void* out) {
  using compiler::AttentionGradPart;
  if (device_.compute_capability() < 80) return false;
  const ConcreteView &q = views[0], &k = views[1], &v = views[2], &mask = views[3],
                     &dout = views[4];
  const size_t r = q.dims.size();
  if (r < 3 || k.dims.size() != r || v.dims.size() != r || mask.dims.size() + 1 != r ||
      dout.dims.size() + 1 != r)
    return false;
  for (const ConcreteView* x : {&q, &k, &v, &mask, &dout})
    if (x->has_mask()) return false;
  const int64_t m = q.dims[r - 3], d = q.dims[r - 2], keys = q.dims[r - 1], dv = v.dims[r - 1];
  if (!attention_grad_supports(type, d, dv) || m < 1 || keys < 1) return false;
  // Each row of q, k, v and the output's gradient read as 16-byte pieces.
  if (vector_width(q, r - 2, d, type, data[0]) != 8 ||
      vector_width(k, r - 2, d, type, data[1]) != 8 ||
      vector_width(v, r - 1, dv, type, data[2]) != 8 ||
      vector_width(dout, r - 2, dv, type, data[4]) != 8)
    return false;
  if (part != AttentionGradPart::Stats) {
    // The stats as Stats writes them: [batch..., M, 2], row-major.
    const ConcreteView& st = views[5];
    int64_t expected = 1;
    for (size_t i = st.dims.size(); i-- > 0;) {
      if (st.dims[i] != 1 && st.strides[i] != expected) return false;
      expected *= st.dims[i];
    }
  }

  AttentionArgs a{};
  a.q = data[0], a.k = data[1], a.v = data[2], a.mask = computed ? nullptr : data[3], a.out = out;
  a.q_off = q.offset, a.k_off = k.offset, a.v_off = v.offset, a.m_off = computed ? 0 : mask.offset;
  a.q_d = a.k_d = a.v_d = 1;
  a.k_t = k.strides[r - 1], a.v_t = v.strides[r - 2], a.m_t = computed ? 1 : mask.strides[r - 2];
  if (computed) std::copy(computed->values.begin(), computed->values.end(), a.mask_dims);
  a.keys = keys, a.keys_per_split = keys, a.splits = 1;
  a.scale = static_cast<float>(scale * std::numbers::log2e);  // scores to 2^x
  // Every batch dim a kv point of its own (the kernels' rows are one head's positions,
  // a row's flat index point * M + m), the output gradient's offsets in the "o" slots.
  // A computed mask is read by (row, key) coordinates: its offsets count rows.
  a.sh_rank = 1, a.shared_rows = m;
  a.sh_dim[0] = m, a.sh_q[0] = q.strides[r - 3], a.sh_o[0] = dout.strides[r - 3];
  a.sh_m[0] = computed ? 1 : mask.strides[r - 3];
  int64_t kv_points = 1;
  a.mask_points = 1;
  for (size_t i = 0; i + 3 < r; ++i) {
    if (q.dims[i] == 1) continue;
    if (a.kv_rank == kAttentionMaxDims) return false;
    const int64_t j = a.kv_rank++;
    a.kv_dim[j] = q.dims[i], a.kv_q[j] = q.strides[i], a.kv_k[j] = k.strides[i];
    a.kv_v[j] = v.strides[i], a.kv_o[j] = dout.strides[i];
    a.kv_m[j] = computed ? 0 : mask.strides[i];
    kv_points *= q.dims[i];
  }
  for (int64_t j = 0; j < a.kv_rank; ++j)
    if (a.kv_m[j] != 0) a.mask_points = kv_points;
  a.row_tiles = (m + kTile - 1) / kTile;
  a.key_tiles = (keys + kTile - 1) / kTile;

  const AttentionGradKernel spec{type, d, dv};
  const Compiled& c = compiled(spec, computed);
  const int64_t tiles = a.mask_points * a.row_tiles * a.key_tiles;
  a.tiles = static_cast<uint8_t*>(grown(device_, tiles_, static_cast<size_t>(tiles)));
  const uint16_t* dout_rows = static_cast<const uint16_t*>(data[4]) + dout.offset;
  const float* stats = part == AttentionGradPart::Stats
                           ? nullptr
                           : static_cast<const float*>(data[5]) + views[5].offset;
  float natural_scale = static_cast<float>(scale);
  void* params[] = {&a, &dout_rows, &stats, &natural_scale};
  // The mask's tiles (a warp 32 rows of a row tile over kMaskTileChunk key tiles).
  const int64_t groups =
      a.mask_points * a.row_tiles * ((a.key_tiles + kMaskTileChunk - 1) / kMaskTileChunk);
  const int64_t per_block = kAttentionThreads / kTile;
  check(device_.launch(c.mask_tiles,
                       dim3(static_cast<unsigned>((groups + per_block - 1) / per_block)),
                       dim3(kAttentionThreads), std::span<void*>(params, 1), 0),
        "launching the pass over attention's mask");
  const void* kernel = c.parts[static_cast<int>(part)];
  const int64_t blocks =
      kv_points * (part == AttentionGradPart::KeysValues ? a.key_tiles : a.row_tiles);
  check(device_.launch(kernel, dim3(static_cast<unsigned>(blocks)), dim3(kAttentionThreads), params,
                       c.shared_bytes),
        "launching attention's gradients");
  return true;
}

}  // namespace luminal::cudagen

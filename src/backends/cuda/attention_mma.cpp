// Attention on tensor cores (see attention_mma.hpp).
//
// Flash-attention's forward pass with sm_80's warp-level matrix instructions
// (mma.m16n8k16, f32 accumulators). A block of four warps takes 64 query rows of one
// key head (16 a warp, their queries held in registers as the products' A operand) and
// walks the keys 64 at a time. A pass over the mask first marks each 64 x 64 tile as
// dropped, kept whole or mixed: dropped tiles are skipped before their keys are fetched
// (half a causal prompt's work) and only mixed ones read their mask bytes. Keys and
// values are copied into shared memory asynchronously (the next tile's keys into a
// second buffer while this tile's products run, its values while the scores run),
// scores by tensor cores, the running max and sum in registers (each thread holds two
// rows' values for eight keys, its quad the rest), the weights converted in registers
// into the A operand of the value product. Rows of shared memory are padded by 16 bytes
// so the eight rows a matrix load reads fall in different banks. Splits of the keys and
// their combine are those of the kernel on CUDA cores.
#include "backends/cuda/attention_mma.hpp"

#include "backends/cuda/attention_common.hpp"

namespace luminal::cudagen {
namespace {

constexpr int64_t kMaskStride = kMmaAttentionKeys + 16;  // bytes a row of the mask tile

constexpr const char* kSource = R"ATTN(
constexpr int kFaMaskStride = LUM_FA_MASK_STRIDE;
constexpr int kFaQs = LUM_AT_D + 8, kFaVs = LUM_AT_DV + 8;  // halves a row in shared memory
constexpr int kFaNq = LUM_AT_D / 16, kFaNv = LUM_AT_DV / 8;  // k-steps of q.k, 8-wide tiles of out

extern "C" __global__ void __launch_bounds__(LUM_AT_THREADS) lum_attention_mma(const LumAttnArgs a) {
  lum_after_prior_grids();
  extern __shared__ __align__(16) unsigned char lum_fa_shared[];
  // Queries are staged where keys and values go later.
  uint16_t* const qs = (uint16_t*)lum_fa_shared;
  uint16_t* const ql = qs + kFaRows * kFaQs;
  uint16_t* const ks = qs;                          // two tiles: this one's, the next's
  uint16_t* const vs = qs + 2 * kFaKeys * kFaQs;
  unsigned char* const ms = lum_fa_shared + LUM_FA_STAGE_BYTES;  // two tiles, likewise
  long long* const row_q = (long long*)(ms + 2 * kFaRows * kFaMaskStride);
  long long* const row_m = row_q + kFaRows;
  long long* const row_o = row_m + kFaRows;
  constexpr bool kKb = LUM_FA_KBF16, kVb = LUM_FA_VBF16;
  const float kNegInf = __int_as_float(0xff800000);
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, t4 = lane % 4;

  const LumFaBlock block = lum_fa_block(a);
  const long long split = block.split, tile = block.tile, point = block.point;
  long long qo, ko, vo, mo, oo;
  lum_at_point(a, point, qo, ko, vo, mo, oo);
  const int rows = lum_fa_rows(a, tile, tid, qo, mo, oo, row_q, row_m, row_o);
  __syncthreads();

  // The queries, in the keys' type (and the remainders, split), into registers.
  lum_fa_stage_queries<kKb>(a, row_q, rows, kFaRows, qs, ql);
  __syncthreads();
  uint32_t qf[kFaNq][4], qlf[LUM_FA_SPLIT ? kFaNq : 1][4];
  lum_fa_load_queries(qf, qlf, qs, ql, warp * 16);
  __syncthreads();  // every warp has its queries: keys may overwrite them
  // Each lane's row of the matrix loads, as shared-memory byte addresses.
  const uint32_t k_lane = lum_smem_addr(ks + (lane % 8 + (lane / 16) * 8) * kFaQs + (lane / 8 % 2) * 8);
  const uint32_t v_lane = lum_smem_addr(vs + (lane % 8 + (lane / 8 % 2) * 8) * kFaVs + (lane / 16) * 8);

  const uint16_t* kp = (const uint16_t*)a.k + ko;
  const uint16_t* vp = (const uint16_t*)a.v + vo;
  const long long t_begin = split * a.keys_per_split;
  const long long t_end = min(a.keys, t_begin + a.keys_per_split);
  const long long kt_end = (t_end + kFaKeys - 1) / kFaKeys;
  const uint32_t ks_at = lum_smem_addr(ks), vs_at = lum_smem_addr(vs), ms_at = lum_smem_addr(ms);
  constexpr uint32_t kKeysBytes = kFaKeys * kFaQs * 2, kMaskBytes = kFaRows * kFaMaskStride;
  auto fetch_keys = [&](long long kt, int buf) {
    lum_fa_fetch<LUM_AT_D>(ks_at + buf * kKeysBytes, kp + kt * kFaKeys * a.k_t, a.k_t,
                           (int)min((long long)kFaKeys, t_end - kt * kFaKeys), tid);
  };
  auto fetch_values = [&](long long kt) {
    lum_fa_fetch<LUM_AT_DV>(vs_at, vp + kt * kFaKeys * a.v_t, a.v_t,
                            (int)min((long long)kFaKeys, t_end - kt * kFaKeys), tid);
  };
  // A mixed tile's mask bytes, each thread 32 keys of one row: copied asynchronously
  // with the keys where rows are contiguous and aligned, else loaded now (either way in
  // shared memory after the next barrier); keys past the range read as dropped.
  auto fetch_mask = [&](long long kt, int buf) {
    const int r = tid / 2, c0 = (tid % 2) * 32;
    const long long t0 = kt * kFaKeys + c0;
    const int n = r < rows ? (int)max(0LL, min(32LL, t_end - t0)) : 0;
    const unsigned char* src = a.mask + row_m[r] + t0 * a.m_t;
    const uint32_t dst = ms_at + buf * kMaskBytes + r * kFaMaskStride + c0;
    if (LUM_AT_MASK_BYTES && a.m_t == 1 && ((unsigned long long)src % 16) == 0) {
      lum_cp16(dst, n > 0 ? src : a.mask, min(n, 16));
      lum_cp16(dst + 16, n > 16 ? src + 16 : a.mask, max(0, min(n - 16, 16)));
    } else {
      for (int j = 0; j < 32; ++j)
        ms[buf * kMaskBytes + r * kFaMaskStride + c0 + j] = j < n && lum_at_keep(a, row_m[r], t0 + j);
    }
  };
  LumFaTiles tiles(a, point, tile, kt_end);
  float o[kFaNv][4];
#pragma unroll
  for (int j = 0; j < kFaNv; ++j) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.0f;
  float m[2] = {kNegInf, kNegInf}, l[2] = {0.0f, 0.0f};  // rows g and g + 8 of the warp's
  int flags = 0;
  long long kt = tiles.next_kept(t_begin / kFaKeys, flags);
  int buf = 0;  // of this tile's keys and mask
  if (kt < kt_end) {
    if (!(flags & 2)) fetch_mask(kt, buf);
    fetch_keys(kt, buf);  // (one copy group with the mask)
    fetch_values(kt);
  }
  // Each kept tile: its keys (and mask) have been asked for, then its values. The next
  // kept tile's keys are asked for as soon as this one's have arrived, into the other
  // buffer, so they arrive while this tile's products run.
  while (kt < kt_end) {
    const bool all_kept = flags & 2;
    lum_cp_wait<1>();
    __syncthreads();
    int next_flags = 0;
    const long long next = tiles.next_kept(kt + 1, next_flags);
    if (next < kt_end) {
      if (!(next_flags & 2)) fetch_mask(next, buf ^ 1);
      fetch_keys(next, buf ^ 1);
    }
    // Scores: s[n] holds keys 8n + 2 t4 (+1) of rows g (0, 1) and g + 8 (2, 3).
    float s[kFaKeys / 8][4];
#pragma unroll
    for (int n = 0; n < kFaKeys / 8; ++n) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < kFaNq; ++kk)
#pragma unroll
      for (int n2 = 0; n2 < kFaKeys / 16; ++n2)
        lum_fa_product<kKb, false>(s[2 * n2], s[2 * n2 + 1], qf[kk], qlf[LUM_FA_SPLIT ? kk : 0],
                                   k_lane + buf * kKeysBytes + (n2 * 16 * kFaQs + kk * 16) * 2);
    // Masked (a tile every row keeps all of is not looked up), then each row's running
    // max and sum; the scores become weights. The scale (positive) is applied inside
    // the exponent: 2^(s scale - max).
    if (!all_kept)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const unsigned char* mrow =
            ms + buf * kMaskBytes + (warp * 16 + g + 8 * h) * kFaMaskStride + 2 * t4;
#pragma unroll
        for (int n = 0; n < kFaKeys / 8; ++n) {
          const uint32_t keep = *(const uint16_t*)(mrow + 8 * n);
          s[n][2 * h] = keep & 0xffu ? s[n][2 * h] : kNegInf;
          s[n][2 * h + 1] = keep >> 8 ? s[n][2 * h + 1] : kNegInf;
        }
      }
    lum_fa_softmax(s, m, l, o, a.scale);
    // The weights as the value product's A operand: keys 16 kk .. 16 kk + 15.
    uint32_t pf[kFaKeys / 16][4], plf[LUM_FA_SPLIT ? kFaKeys / 16 : 1][4];
    lum_fa_weights<kVb>(s, pf, plf);
    // This tile's values (the next keys may still be on their way).
    if (next < kt_end)
      lum_cp_wait<1>();
    else
      lum_cp_wait<0>();
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < kFaKeys / 16; ++kk)
#pragma unroll
      for (int n2 = 0; n2 < LUM_AT_DV / 16; ++n2)
        lum_fa_product<kVb, true>(o[2 * n2], o[2 * n2 + 1], pf[kk], plf[LUM_FA_SPLIT ? kk : 0],
                                  v_lane + (kk * 16 * kFaVs + n2 * 16) * 2);
    if (next < kt_end) {
      __syncthreads();  // every warp is past these values
      fetch_values(next);
    }
    kt = next, flags = next_flags, buf ^= 1;
  }

  lum_fa_store<kVb>(a, o, m, l, warp * 16 + g, rows, row_o, split);
}
)ATTN";

int64_t stage_bytes(const MmaAttentionKernel& s) {
  const int64_t queries = kMmaAttentionRows * (s.d + 8) * (s.q == DType::F32 ? 2 : 1);
  const int64_t keys_values = kMmaAttentionKeys * (2 * (s.d + 8) + s.dv + 8);
  return 2 * std::max(queries, keys_values);
}

}  // namespace

bool mma_attention_supports(DType q, DType k, DType v, int64_t d, int64_t dv) {
  auto half = [](DType t) { return t == DType::F16 || t == DType::BF16; };
  return half(k) && half(v) && (q == k || q == DType::F32) && d % 16 == 0 && dv % 16 == 0 &&
         d > 0 && dv > 0 && d <= 256 && dv <= 256;
}

std::string mma_attention_source(const MmaAttentionKernel& s) {
  return attention_program({s.q, s.k, s.v, s.out, s.d, s.dv},
                           {{"LUM_FA_ROWS", std::to_string(kMmaAttentionRows)},
                            {"LUM_FA_KEYS", std::to_string(kMmaAttentionKeys)},
                            {"LUM_FA_MASK_STRIDE", std::to_string(kMaskStride)},
                            {"LUM_FA_STAGE_BYTES", std::to_string(stage_bytes(s))},
                            {"LUM_FA_SPLIT", s.q == DType::F32 ? "1" : "0"},
                            {"LUM_FA_TILE_BITS", "0"},
                            {"LUM_FA_PAIRED_OUT", "0"}},
                           std::string(attention_tiles_source()) + kSource);
}

size_t mma_attention_shared_bytes(const MmaAttentionKernel& s) {
  // Two mask tiles and three offsets a row.
  return static_cast<size_t>(stage_bytes(s) + 2 * kMmaAttentionRows * kMaskStride +
                             3 * kMmaAttentionRows * 8);
}

}  // namespace luminal::cudagen

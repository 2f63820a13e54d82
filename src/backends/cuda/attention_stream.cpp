// Attention streamed through shared memory (see attention_stream.hpp).
//
// Decoding reads every cached key and value once and does little arithmetic with them,
// so what matters is how many bytes are on their way at once. Each warp walks its own
// keys with its own running max, sum and output: no barrier between warps until the
// end. A warp's keys come in stages of `keys` keys (about 4 KiB of keys and values),
// copied asynchronously into its part of shared memory `stages - 1` stages ahead of
// the one it computes, so the memory stays busy while it computes. The warps of a block
// take the stages of its key range in turn (warp w the stages w, w + 4, ...), so the
// block reads its range front to back.
//
// Within a stage, a key row's 16-byte pieces go to as many lanes (`lanes`, a power of
// two), so a warp takes 32 / lanes keys at a step: each lane holds its slice of every
// row's query, the dot products are summed over the key's lanes by shuffles, and the
// same lanes then add the weighted value slices of their keys. The mask's bytes for the
// next stage are loaded while this one computes, and read by ballot. At the end the
// warps' pieces meet in shared memory: rescaled to the block's max and summed, the
// output, or the split's piece, which a second kernel combines.
//
// That combine was once the last split block's own (counted by an atomic, so decoding
// was one launch): one SM then read every piece of its rows, a few at a time, while the
// rest of the GPU sat idle, and the tail from the last stage to the output took 8 us of
// a 32k-position step's 44 (bench/results/cuda.md, the timeline of 2026-12-03). A kernel
// of its own starts its blocks under the attention's tail (programmatic dependent
// launch), a block a row, each sending all its loads at once: a layer of 16 took 0.0414
// -> 0.0395 ms. The other attention kernels' splits are combined by the same kernel
// (attention_common.cpp).
#include "backends/cuda/attention_stream.hpp"

#include <algorithm>

#include "backends/cuda/attention_common.hpp"

namespace luminal::cudagen {
namespace {

constexpr int64_t kStageBytes = 4096;  // a warp's keys and values in a stage, about
constexpr int64_t kWarps = kAttentionThreads / 32;

constexpr const char* kSource = R"ATTN(
typedef typename LUM_AT_K::T lum_st_kt;
typedef typename LUM_AT_V::T lum_st_vt;
constexpr int kStWarps = LUM_AT_THREADS / 32, kStRows = LUM_AT_R, kStStages = LUM_ST_STAGES;
constexpr int kStLanes = LUM_ST_LANES;           // a key row's 16-byte pieces
constexpr int kStKeysAStep = 32 / kStLanes;      // keys a warp copies (or takes) at once
constexpr int kStKeys = LUM_ST_KEYS;             // keys of a warp's stage
constexpr int kStSteps = kStKeys / kStKeysAStep;
// Rows of a stage in shared memory, padded by 16 bytes (a matrix load's eight rows then
// fall in different banks).
constexpr int kStKeyRow = LUM_AT_D * sizeof(lum_st_kt) + 16, kStValueRow = LUM_AT_DV * sizeof(lum_st_vt) + 16;
constexpr int kStStage = kStKeys * (kStKeyRow + kStValueRow);

extern "C" __global__ void __launch_bounds__(LUM_AT_THREADS) lum_attention_stream(const LumAttnArgs a) {
  extern __shared__ __align__(16) unsigned char lum_st_buffer[];
  __shared__ long long row_q[kStRows], row_m[kStRows], row_o[kStRows];
  const float kNegInf = __int_as_float(0xff800000);
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int piece = lane % kStLanes, sub = lane / kStLanes;  // this lane's piece, and key of a step
  const LumAtBlock block = lum_at_block(a);
  const long long split = block.split, tile = block.tile;
  const long long qo = block.q, ko = block.k, vo = block.v, mo = block.m, oo = block.o;
  const long long t_begin = split * a.keys_per_split;
  const long long t_end = min(a.keys, t_begin + a.keys_per_split);
  const long long stages = (t_end - t_begin + kStKeys - 1) / kStKeys;  // the block's
  const int mine = stages > warp ? (int)((stages - warp + kStWarps - 1) / kStWarps) : 0;
  const long long k_step = a.k_t * (long long)sizeof(lum_st_kt), v_step = a.v_t * (long long)sizeof(lum_st_vt);
  const char* const k0 = (const char*)a.k + ko * (long long)sizeof(lum_st_kt);
  const char* const v0 = (const char*)a.v + vo * (long long)sizeof(lum_st_vt);
  const char* const k_lane = k0 + piece * 16;
  const char* const v_lane = v0 + piece * 16;
  unsigned char* const buffer = lum_st_buffer + warp * kStStages * kStStage;
  const uint32_t buffer_at = lum_smem_addr(buffer);
  const uint32_t key_at = buffer_at + sub * kStKeyRow + piece * 16;
  const uint32_t value_at = buffer_at + kStKeys * kStKeyRow + sub * kStValueRow + piece * 16;
  auto first_key = [&](int j) { return t_begin + ((long long)j * kStWarps + warp) * kStKeys; };
  // The warp's stage j (if it has one) into its buffer, as one copy group either way:
  // a step's lanes copy a key row's pieces each, then its value row's.
  auto fetch = [&](int j) {
    if (j < mine) {
      const long long t0 = first_key(j) + sub;
      const char* kp = k_lane + t0 * k_step;
      const char* vp = v_lane + t0 * v_step;
      const uint32_t stage = (j % kStStages) * kStStage;
#pragma unroll
      for (int s = 0; s < kStSteps; ++s) {
        const bool in = t0 + s * kStKeysAStep < t_end;
        lum_cp16(key_at + stage + s * kStKeysAStep * kStKeyRow, in ? kp : k0, in ? 16 : 0);
        lum_cp16(value_at + stage + s * kStKeysAStep * kStValueRow, in ? vp : v0, in ? 16 : 0);
        kp += kStKeysAStep * k_step, vp += kStKeysAStep * v_step;
      }
    }
    lum_cp_commit();
  };
  // The first stages set off before anything else. (With tensor cores the queries are
  // staged in the room of warp 0's later stages, so only its first stage goes now.)
  // Where the block's first stages hold only keys no kernel of the run writes, before
  // the kernel ahead has finished: their copies fill its tail (a decode step's layers:
  // the combine of the layer before).
  constexpr int kStEarly = LUM_ST_MMA ? 1 : kStStages - 1;
  const bool early = min(t_end, t_begin + (long long)kStEarly * kStWarps * kStKeys) <= a.early_keys;
  auto fetch_early = [&] {
#pragma unroll
    for (int j = 0; j < kStEarly; ++j) fetch(j);
  };
  if (early) fetch_early();
  lum_after_prior_grids();
  if (!early) fetch_early();
  const int rows = (int)min((long long)kStRows, a.shared_rows - tile * kStRows);
  if (tid < kStRows) {
    long long q = qo, m = mo, o = oo;
    lum_at_row(a, tile * kStRows + tid, q, m, o);
    row_q[tid] = q, row_m[tid] = m, row_o[tid] = o;
  }
  __syncthreads();
#if LUM_ST_MMA
  // Tensor cores: the tile's 16 rows (those past `rows` zeros) as every warp's A operand
  // of the scores, in the keys' type (and, split, the remainders), through shared memory.
  constexpr bool kKb = LUM_FA_KBF16, kVb = LUM_FA_VBF16;
  constexpr int kStQs = LUM_AT_D + 8;  // halves a staged query row
  constexpr int kStNq = LUM_AT_D / 16, kStNv = LUM_AT_DV / 8;
  const int g = lane / 4, t4 = lane % 4;
  uint32_t qf[kStNq][4], qlf[LUM_FA_SPLIT ? kStNq : 1][4];
  {
    static_assert(16 * kStQs * 2 * (LUM_FA_SPLIT ? 2 : 1) <= (kStStages - 1) * kStStage,
                  "the staged queries fit warp 0's later stages");
    uint16_t* const qs = (uint16_t*)(lum_st_buffer + kStStage);
    uint16_t* const ql = qs + 16 * kStQs;
    lum_fa_stage_queries<kKb>(a, row_q, rows, 16, qs, ql);
    __syncthreads();
    lum_fa_load_queries(qf, qlf, qs, ql, 0);
    __syncthreads();  // every warp has its queries: warp 0's stages may overwrite them
  }
  // Mask rows of this lane's two rows of the fragments (g and g + 8), -1 past the tile's.
  const long long mrow[2] = {g < rows ? row_m[g] : -1, g + 8 < rows ? row_m[g + 8] : -1};
  // (row, key) mask bytes a lane reads a stage: rows g, g + 8, keys 8 n + 2 t4 (+1).
  constexpr int kStPairs = kStKeys / 8 * 4;
  float m[2], l[2], acc[kStNv][4];
#pragma unroll
  for (int h = 0; h < 2; ++h) m[h] = kNegInf, l[h] = 0.0f;
#pragma unroll
  for (int j = 0; j < kStNv; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;
#else
  const typename LUM_AT_Q::T* qp = (const typename LUM_AT_Q::T*)a.q;
  // CUDA cores: this lane's slice of every row's query, scaled; rows past the tile's are
  // zeros (and all their keys masked).
  constexpr int kStVk = 16 / sizeof(lum_st_kt), kStVv = 16 / sizeof(lum_st_vt);  // elements a piece
  float q[kStRows][kStVk];
#pragma unroll
  for (int r = 0; r < kStRows; ++r)
#pragma unroll
    for (int e = 0; e < kStVk; ++e)
      q[r][e] = r < rows ? LUM_AT_Q::get(qp[row_q[r] + (piece * kStVk + e) * a.q_d]) * a.scale : 0.0f;
  // (row, key) mask bytes a lane reads a stage: pairs lane, lane + 32, ...
  constexpr int kStPairs = (kStRows * kStKeys + 31) / 32;
  float m[kStRows], l[kStRows], acc[kStRows][kStVv];
#pragma unroll
  for (int r = 0; r < kStRows; ++r) {
    m[r] = kNegInf, l[r] = 0.0f;
#pragma unroll
    for (int e = 0; e < kStVv; ++e) acc[r][e] = 0.0f;
  }
#endif

  // Stage j's mask bytes (0 past the keys), loaded a stage before they are used.
  auto mask_of = [&](int j, unsigned char (&mk)[kStPairs]) {
    const long long t0 = first_key(j);
#pragma unroll
    for (int x = 0; x < kStPairs; ++x) {
#if LUM_ST_MMA
      const int h = x / 2 % 2, e = x % 2;
      const long long r = mrow[h], t = t0 + 8 * (x / 4) + 2 * t4 + e;
#else
      const int p = lane + 32 * x, rr = p / kStKeys;
      const long long r = rr < rows ? row_m[rr] : -1, t = t0 + p % kStKeys;
#endif
      mk[x] = j < mine && r >= 0 && t < t_end && lum_at_keep(a, r, t);
    }
  };

#pragma unroll
  for (int j = kStEarly; j < kStStages - 1; ++j) fetch(j);
  unsigned char mask[kStPairs];
  mask_of(0, mask);
  for (int j = 0; j < mine; ++j) {
    fetch(j + kStStages - 1);
    unsigned char next[kStPairs];
    mask_of(j + 1, next);
    lum_cp_wait<kStStages - 1>();
    __syncwarp();
    const int stage = (j % kStStages) * kStStage;
#if LUM_ST_MMA
    // Scores: s[n] holds keys 8n + 2 t4 (+1) of rows g (0, 1) and g + 8 (2, 3).
    float s[kStKeys / 8][4];
#pragma unroll
    for (int n = 0; n < kStKeys / 8; ++n) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
    const uint32_t k_at = buffer_at + stage + (lane % 8 + (lane / 16) * 8) * kStKeyRow + (lane / 8 % 2) * 16;
#pragma unroll
    for (int kk = 0; kk < kStNq; ++kk)
#pragma unroll
      for (int n2 = 0; n2 < kStKeys / 16; ++n2)
        lum_fa_product<kKb, false>(s[2 * n2], s[2 * n2 + 1], qf[kk], qlf[LUM_FA_SPLIT ? kk : 0],
                                   k_at + n2 * 16 * kStKeyRow + kk * 32);
#pragma unroll
    for (int n = 0; n < kStKeys / 8; ++n)
#pragma unroll
      for (int i = 0; i < 4; ++i) s[n][i] = mask[4 * n + i] ? s[n][i] : kNegInf;
    // Each row's running max and sum; the scores become weights, then the value
    // product's A operand, 16 keys at a time.
    lum_fa_softmax(s, m, l, acc, a.scale);
    uint32_t pf[kStKeys / 16][4], plf[LUM_FA_SPLIT ? kStKeys / 16 : 1][4];
    lum_fa_weights<kVb>(s, pf, plf);
    const uint32_t v_at = buffer_at + stage + kStKeys * kStKeyRow +
                          (lane % 8 + (lane / 8 % 2) * 8) * kStValueRow + (lane / 16) * 16;
#pragma unroll
    for (int kk = 0; kk < kStKeys / 16; ++kk)
#pragma unroll
      for (int n2 = 0; n2 < LUM_AT_DV / 16; ++n2)
        lum_fa_product<kVb, true>(acc[2 * n2], acc[2 * n2 + 1], pf[kk], plf[LUM_FA_SPLIT ? kk : 0],
                                  v_at + kk * 16 * kStValueRow + n2 * 32);
#else
    const unsigned char* keys = buffer + stage + sub * kStKeyRow + piece * 16;
    const unsigned char* values = buffer + stage + kStKeys * kStKeyRow + sub * kStValueRow + piece * 16;
    unsigned kept[kStPairs];
#pragma unroll
    for (int x = 0; x < kStPairs; ++x) kept[x] = __ballot_sync(0xffffffffu, mask[x] != 0);
    // Scores (already in log2 units), -inf where masked.
    float s[kStSteps][kStRows];
#pragma unroll
    for (int st = 0; st < kStSteps; ++st) {
      const uint4 raw = *reinterpret_cast<const uint4*>(keys + st * kStKeysAStep * kStKeyRow);
      const lum_st_kt* x = reinterpret_cast<const lum_st_kt*>(&raw);
#pragma unroll
      for (int r = 0; r < kStRows; ++r) {
        float dot = 0.0f;
#pragma unroll
        for (int e = 0; e < kStVk; ++e) dot = fmaf(q[r][e], LUM_AT_K::get(x[e]), dot);
#pragma unroll
        for (int o = kStLanes / 2; o > 0; o >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, o);
        const int p = r * kStKeys + st * kStKeysAStep + sub;
        s[st][r] = (kept[p / 32] >> (p % 32)) & 1u ? dot : kNegInf;
      }
    }
    // Each row's running max (the same in every lane), its sum (each lane over its own
    // keys) and output rescaled to it; the scores become weights.
#pragma unroll
    for (int r = 0; r < kStRows; ++r) {
      float top = kNegInf;
#pragma unroll
      for (int st = 0; st < kStSteps; ++st) top = fmaxf(top, s[st][r]);
#pragma unroll
      for (int o = kStLanes; o < 32; o <<= 1) top = fmaxf(top, __shfl_xor_sync(0xffffffffu, top, o));
      const float m_new = fmaxf(m[r], top);
      const float base = m_new == kNegInf ? 0.0f : m_new;
      const float alpha = lum_at_exp2(m[r] - base);
      m[r] = m_new;
      l[r] *= alpha;
#pragma unroll
      for (int e = 0; e < kStVv; ++e) acc[r][e] *= alpha;
#pragma unroll
      for (int st = 0; st < kStSteps; ++st) {
        const float w = lum_at_exp2(s[st][r] - base);
        s[st][r] = w;
        l[r] += w;
      }
    }
    // Weighted values; a key no row keeps is not read (its values may be anything).
#pragma unroll
    for (int st = 0; st < kStSteps; ++st) {
      bool any = false;
#pragma unroll
      for (int r = 0; r < kStRows; ++r) any |= s[st][r] != 0.0f;
      if (!any) continue;
      const uint4 raw = *reinterpret_cast<const uint4*>(values + st * kStKeysAStep * kStValueRow);
      const lum_st_vt* x = reinterpret_cast<const lum_st_vt*>(&raw);
#pragma unroll
      for (int r = 0; r < kStRows; ++r)
#pragma unroll
        for (int e = 0; e < kStVv; ++e) acc[r][e] = fmaf(s[st][r], LUM_AT_V::get(x[e]), acc[r][e]);
    }
#endif
    __syncwarp();  // the stage is refilled next
#pragma unroll
    for (int x = 0; x < kStPairs; ++x) mask[x] = next[x];
  }

  // The warps' pieces meet in the (now idle) stage buffers: each row's output, max and sum.
  lum_cp_wait<0>();
  __syncthreads();
  float* w_out = reinterpret_cast<float*>(lum_st_buffer);  // [warp][row][DV]
  float* w_max = w_out + kStWarps * kStRows * LUM_AT_DV;     // [warp][row]
  float* w_sum = w_max + kStWarps * kStRows;
#if LUM_ST_MMA
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    l[h] += __shfl_xor_sync(0xffffffffu, l[h], 1);
    l[h] += __shfl_xor_sync(0xffffffffu, l[h], 2);
    const int r = g + 8 * h;
    if (r >= rows) continue;
#pragma unroll
    for (int jj = 0; jj < kStNv; ++jj)
      *reinterpret_cast<float2*>(w_out + (warp * kStRows + r) * LUM_AT_DV + jj * 8 + 2 * t4) =
          make_float2(acc[jj][2 * h], acc[jj][2 * h + 1]);
    if (t4 == 0) w_max[warp * kStRows + r] = m[h], w_sum[warp * kStRows + r] = l[h];
  }
#else
  // First the lanes that took other keys with the same slices, summed.
#pragma unroll
  for (int r = 0; r < kStRows; ++r)
#pragma unroll
    for (int o = kStLanes; o < 32; o <<= 1) {
      l[r] += __shfl_xor_sync(0xffffffffu, l[r], o);
#pragma unroll
      for (int e = 0; e < kStVv; ++e) acc[r][e] += __shfl_xor_sync(0xffffffffu, acc[r][e], o);
    }
  if (sub == 0)
#pragma unroll
    for (int r = 0; r < kStRows; ++r)
#pragma unroll
      for (int e = 0; e < kStVv; ++e)
        w_out[(warp * kStRows + r) * LUM_AT_DV + piece * kStVv + e] = acc[r][e];
  if (lane == 0)
#pragma unroll
    for (int r = 0; r < kStRows; ++r) w_max[warp * kStRows + r] = m[r], w_sum[warp * kStRows + r] = l[r];
#endif
  __syncthreads();
  for (int i = tid; i < rows * LUM_AT_DV; i += LUM_AT_THREADS) {
    const int r = i / LUM_AT_DV, j = i % LUM_AT_DV;
    float top = kNegInf;
#pragma unroll
    for (int w = 0; w < kStWarps; ++w) top = fmaxf(top, w_max[w * kStRows + r]);
    float out = 0.0f, sum = 0.0f;
#pragma unroll
    for (int w = 0; w < kStWarps; ++w) {
      const float x = w_max[w * kStRows + r];
      const float weight = x == kNegInf ? 0.0f : lum_at_exp2(x - top);
      out = fmaf(weight, w_out[(w * kStRows + r) * LUM_AT_DV + j], out);
      sum = fmaf(weight, w_sum[w * kStRows + r], sum);
    }
    if (a.splits == 1) {
      LUM_AT_O::put(a.out, row_o[r] * LUM_AT_DV + j, out / sum);
    } else {
      float* p = a.partials + (row_o[r] * a.splits + split) * kAtWidth;
      p[j] = out;
      if (j == 0) p[kAtMax] = top, p[kAtMax + 1] = sum;
    }
  }
}
)ATTN";

int64_t pieces(DType t, int64_t dims) {
  return dims * static_cast<int64_t>(dtype_size(t)) / 16;
}

// Bytes of a key and a value row in shared memory (each padded by 16).
int64_t row_bytes(const StreamAttentionKernel& s) {
  return s.d * static_cast<int64_t>(dtype_size(s.k)) +
         s.dv * static_cast<int64_t>(dtype_size(s.v)) + 32;
}

// Stages a warp has on their way or in use: with tensor cores, whose stages are larger,
// one fewer.
int64_t stages(const StreamAttentionKernel& s) {
  return s.tensor_cores ? 3 : 4;
}

// Keys of a warp's stage. Tensor cores: 16, one k-step of the value product. CUDA
// cores: about kStageBytes of keys and values, a whole number of a step's keys, at most
// 32, and at most 16 / rows steps (each step's scores are held for every row till the
// stage's max is known).
int64_t stage_keys(const StreamAttentionKernel& s) {  // (stream_attention_stage_keys)
  if (s.tensor_cores) return 16;
  const int64_t step = 32 / pieces(s.k, s.d);
  const int64_t steps = std::max<int64_t>(1, 16 / s.rows);
  const int64_t fit = kStageBytes / (row_bytes(s) - 32);
  return std::max(step, std::min<int64_t>({32, fit, steps * step}) / step * step);
}

}  // namespace

bool stream_attention_supports(DType k, DType v, int64_t d, int64_t dv) {
  auto typed = [](DType t) { return t == DType::F32 || t == DType::F16 || t == DType::BF16; };
  if (!typed(k) || !typed(v) || d < 1 || dv < 1) return false;
  const int64_t n = pieces(k, d);
  return n * 16 == d * static_cast<int64_t>(dtype_size(k)) && pieces(v, dv) == n &&
         n * 16 == dv * static_cast<int64_t>(dtype_size(v)) && n <= 32 && (n & (n - 1)) == 0;
}

std::string stream_attention_source(const StreamAttentionKernel& s) {
  return attention_program({s.q, s.k, s.v, s.out, s.d, s.dv},
                           {{"LUM_AT_R", std::to_string(s.rows)},
                            {"LUM_ST_LANES", std::to_string(pieces(s.k, s.d))},
                            {"LUM_ST_KEYS", std::to_string(stage_keys(s))},
                            {"LUM_ST_STAGES", std::to_string(stages(s))},
                            {"LUM_ST_MMA", s.tensor_cores ? "1" : "0"},
                            {"LUM_FA_SPLIT", s.tensor_cores && s.q == DType::F32 ? "1" : "0"}},
                           kSource);
}

size_t stream_attention_shared_bytes(const StreamAttentionKernel& s) {
  const int64_t in_flight = kWarps * stages(s) * stage_keys(s) * row_bytes(s);
  const int64_t queries = s.tensor_cores ? 16 * (s.d + 8) * 2 * (s.q == DType::F32 ? 2 : 1) : 0;
  const int64_t pieces_at_end = kWarps * s.rows * (s.dv + 2) * 4;
  return static_cast<size_t>(std::max({in_flight, queries, pieces_at_end}));
}

int64_t stream_attention_stage_keys(const StreamAttentionKernel& s) {
  return stage_keys(s);
}

}  // namespace luminal::cudagen

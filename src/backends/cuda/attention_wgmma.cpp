// Attention on Hopper's warpgroup tensor-core instructions (see attention_wgmma.hpp).
//
// The pass over the mask, the order of blocks (last rows first), the online softmax and
// the key splits are those of the sm_80 kernel (attention_mma.cpp); what differs is how
// the data moves and the products run, as flash-attention 3 lays out its forward pass.
// Warpgroup 0 is the producer: one of its warps asks the TMA for each kept tile's keys
// and values (64 or 128 rows) into rings of two stages, each stage with an mbarrier its
// copies complete and one its consumers release it by. Warpgroups 1 (and 2) consume, 64
// query rows each, staged once into shared memory. Every tile is stored as panels of
// 64 elements (128 bytes) a row, swizzled in 16-byte pieces (piece j of row r at
// j ^ (r % 8)): what the TMA writes and the products' 128-byte swizzle mode reads, so
// both take their operands straight from shared memory by descriptor. Scores are a
// 64 x keys accumulator (queries and keys both read along the head dim); the weights go
// back as the value product's A operand from registers, the values read across the
// head dim (the instruction's transposed B). A consumer issues one tile's scores with
// the previous tile's value product, and finds this tile's weights while they run; two
// consumers take turns issuing, so one's softmax overlaps the other's products. A block
// of one consumer leaves that overlap to the other blocks on its SM.
#include "backends/cuda/attention_wgmma.hpp"

#include <algorithm>
#include <string>
#include <vector>

#include "backends/cuda/attention_common.hpp"

namespace luminal::cudagen {
namespace {

// Shared memory a block takes besides its tiles: the barriers (128 bytes), three offsets
// a row, and 1 KiB to align the tiles to the swizzle pattern's 1024-byte period; what an
// SM has, and what it keeps of that for each block.
constexpr int64_t kExtraBytes = 128 + 3 * kWgmmaAttentionRows * 8 + 1024;
constexpr int64_t kMaxSharedBytes = 227 * 1024, kSmSharedBytes = 228 * 1024,
                  kBlockReservedBytes = 1024;
// Registers: an SM's, and the producer warpgroup's a thread once it has given back the
// rest to the consumers (setmaxnreg); a persistent producer's, which carries its place
// from item to item, more (ptxas spilled 128-172 bytes at 24, 80-132 at 32).
constexpr int64_t kSmRegisters = 65536, kProducerRegisters = 24, kPersistentProducerRegisters = 32;

constexpr const char* kSource = R"ATTN(
constexpr int kWgQBytes = kFaRows * LUM_AT_D * 2;   // a tile of queries
// f32 queries are split into their half-precision value and its remainder (two tiles),
// and so are the weights: twice the products keep f32's precision.
constexpr bool kWgSplit = LUM_FA_SPLIT;
constexpr int kWgQTiles = kWgSplit ? 2 : 1;
constexpr int kWgKBytes = kFaKeys * LUM_AT_D * 2;   // a stage of keys
constexpr int kWgVBytes = kFaKeys * LUM_AT_DV * 2;  // a stage of values
constexpr int kWgKStages = LUM_WG_KEY_STAGES, kWgVStages = LUM_WG_VALUE_STAGES;
constexpr int kWgConsumers = 128 * LUM_WG_CONSUMERS;  // the products' threads
constexpr bool kWgTurns = LUM_WG_CONSUMERS == 2;     // two consumers take turns issuing
constexpr bool kWgBf16 = LUM_FA_KBF16;
static_assert(!LUM_WG_PERSISTENT || (LUM_WG_CONSUMERS == 1 && !LUM_FA_SPLIT),
              "a persistent kernel has one consumer warpgroup and its queries' own type");

// Where the 16-byte piece `piece` of row r of a swizzled tile of `rows` rows lies, in
// bytes from the tile's start: panels of 64 elements a row, 128-byte rows, the pieces
// of a row permuted by the row's position in its group of 8.
LUM_FN uint32_t lum_wg_at(int rows, int r, int piece) {
  return (piece / 8) * (rows * 128) + r * 128 + (((piece % 8) ^ (r % 8)) * 16);
}
// A shared-memory matrix descriptor: start, leading byte offset (between 64-element
// panels along the contiguous dim; unused where one product stays in a panel), 1024
// bytes between groups of 8 rows, 128-byte swizzle.
LUM_FN uint64_t lum_wg_desc(uint32_t at, uint32_t leading) {
  return (uint64_t)((at & 0x3FFFFu) >> 4) | ((uint64_t)((leading & 0x3FFFFu) >> 4) << 16) |
         ((uint64_t)(1024 >> 4) << 32) | (1ull << 62);
}
LUM_FN void lum_wg_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
LUM_FN void lum_wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int N> LUM_FN void lum_wg_wait() { asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory"); }
// Orders the compiler's own reads and writes of an accumulator around the products,
// which write it asynchronously (between the issue and the wait).
template <int N> LUM_FN void lum_wg_hold(float (&d)[N][4]) {
#pragma unroll
  for (int j = 0; j < N; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) asm volatile("" : "+f"(d[j][e])::"memory");
}

// Barriers in shared memory (mbarrier): the copies' arrival and the stages' release.
LUM_FN void lum_mb_init(uint32_t bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}
LUM_FN void lum_mb_expect(uint32_t bar, int bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}
LUM_FN void lum_mb_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}
LUM_FN void lum_mb_wait(uint32_t bar, int parity) {
  asm volatile("{ .reg .pred done; LUM_MB_WAIT: mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1; "
               "@!done bra LUM_MB_WAIT; }" ::"r"(bar), "r"(parity) : "memory");
}
// A ring of stages: the one in use and the phase its barriers are in.
struct LumWgStage {
  int index = 0, phase = 0;
  template <int N> __device__ __forceinline__ void next() {
    if (++index == N) index = 0, phase ^= 1;
  }
};
// Named barriers among some of the block's warps.
LUM_FN void lum_bar_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}
LUM_FN void lum_bar_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(threads) : "memory");
}
// The encoded tensor map a copy reads by (tensor_map.hpp).
struct __align__(64) LumTensorMap {
  unsigned long long words[16];
};
// A box of the map at coordinates c (innermost first) into shared memory at dst; its
// bytes count toward the barrier's expected ones.
LUM_FN void lum_tma_load(uint32_t dst, const LumTensorMap& map, int c0, int c1, int c2, int c3,
                         int c4, uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.5d.shared::cluster.global.tile.mbarrier::complete_tx::bytes "
      "[%0], [%1, {%2, %3, %4, %5, %6}], [%7];" ::"r"(dst),
      "l"(&map), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(c4), "r"(bar)
      : "memory");
}

// A tile of the map's rows from row r on (at outer coordinates c2..c4), Panels of 64
// elements a row, `panel_bytes` apart at dst; its bytes arrive on barrier bar.
template <int Panels>
LUM_FN void lum_tma_tile(uint32_t dst, const LumTensorMap& map, int panel_bytes, int r, int c2,
                         int c3, int c4, uint32_t bar) {
  lum_mb_expect(bar, Panels * panel_bytes);
#pragma unroll
  for (int q = 0; q < Panels; ++q) lum_tma_load(dst + q * panel_bytes, map, 64 * q, r, c2, c3, c4, bar);
}

// Barrier ids: 0 the block's, 1 and 2 each consumer warpgroup's turn to issue products,
// 3 the consumers' own, 4 and 5 each consumer warpgroup's alone.
//
// A block takes the work items (split, row tile, kv point; lum_fa_block's order) from
// its index on, gridDim.x apart: one item where the grid has one block an item. A
// persistent kernel (LUM_WG_PERSISTENT) runs as many blocks as stay resident, and its
// producer copies each item's queries too, by TMA (query_map), into one of two buffers,
// so that the next item's queries, keys and values arrive while this one's products run.
extern "C" __global__ void __launch_bounds__(LUM_AT_THREADS, LUM_WG_BLOCKS)
    lum_attention_wgmma(const LumAttnArgs a, const __grid_constant__ LumTensorMap key_map,
                        const __grid_constant__ LumTensorMap value_map,
                        const __grid_constant__ LumTensorMap query_map) {
  lum_after_prior_grids();
  constexpr bool kPersistent = LUM_WG_PERSISTENT;
  constexpr int kQBuffers = kPersistent ? 2 : 1;
  extern __shared__ __align__(1024) unsigned char lum_wg_raw[];
  const uint32_t raw = lum_smem_addr(lum_wg_raw), qs = (raw + 1023u) & ~1023u;
  unsigned char* const shared = lum_wg_raw + (qs - raw);
  const uint32_t ks = qs + kQBuffers * kWgQTiles * kWgQBytes, vs = ks + kWgKStages * kWgKBytes;
  // Barriers, one a stage: keys arrived, values arrived, keys released, values released;
  // then each query buffer's arrival and release.
  const uint32_t keys_in = vs + kWgVStages * kWgVBytes, values_in = keys_in + 8 * kWgKStages;
  const uint32_t keys_free = values_in + 8 * kWgVStages, values_free = keys_free + 8 * kWgKStages;
  const uint32_t queries_in = values_free + 8 * kWgVStages, queries_free = queries_in + 8 * kQBuffers;
  long long* const row_q = (long long*)(shared + (keys_in - qs) + 128);
  long long* const row_m = row_q + kFaRows;
  long long* const row_o = row_m + kFaRows;
  const float kNegInf = __int_as_float(0xff800000);
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  // (Fewer than 2^31 items: the host's grid counts them in an unsigned int.)
  int items = (int)(a.splits * a.row_tiles);
  for (int i = 0; i < a.kv_rank; ++i) items *= (int)a.kv_dim[i];

  if (tid == 0) {
    for (int s = 0; s < kWgKStages; ++s) {
      lum_mb_init(keys_in + 8 * s, 1);
      lum_mb_init(keys_free + 8 * s, kWgConsumers / 32);
    }
    for (int s = 0; s < kWgVStages; ++s) {
      lum_mb_init(values_in + 8 * s, 1);
      lum_mb_init(values_free + 8 * s, kWgConsumers / 32);
    }
    for (int s = 0; s < kQBuffers; ++s) {
      lum_mb_init(queries_in + 8 * s, 1);
      lum_mb_init(queries_free + 8 * s, 1);
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();

  if (warp < 4) {
    // The producer warpgroup: one warp asks for each item's queries (persistent: into a
    // buffer once its consumers have freed it) and its kept tiles' keys and values, each
    // into a stage once its consumer warpgroups have released it; the others leave.
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(LUM_WG_PRODUCER_REGS));
    if (warp != 0) return;
    // Stage use i waits for the release of use i - stages (phase flipped since); the
    // stages' uses count on across items.
    LumWgStage k, v;
    int uses = 0;
    int taken = 0;  // this block's items so far (query buffer taken % 2)
    for (int item = blockIdx.x; item < items; item += gridDim.x, ++taken) {
      const LumFaBlock block = lum_fa_block(a, item);
      const int t_begin = (int)(block.split * a.keys_per_split);
      const int kt_end = (int)((min(a.keys, t_begin + a.keys_per_split) + kFaKeys - 1) / kFaKeys);
      // The kv point in the maps' outer dims, innermost first; the queries' map has the
      // rows' dims (one or two) before them.
      int c2 = 0, c3 = 0, c4 = 0;
      long long p = block.point;
      for (long long i = a.kv_rank - 1, j = 0; i >= 0; --i, ++j) {
        const int x = (int)(p % a.kv_dim[i]);
        p /= a.kv_dim[i];
        if (j == 0) c2 = x;
        else if (j == 1) c3 = x;
        else c4 = x;
      }
      if (kPersistent) {
        const int r = (int)(block.tile * kFaRows);
        const bool two = a.sh_rank == 2;
        const int q1 = two ? r % (int)a.sh_dim[1] : r, q2 = two ? r / (int)a.sh_dim[1] : c2;
        const int q3 = two ? c2 : c3, q4 = two ? c3 : c4;
        const int b = taken % 2;
        if (taken >= 2) lum_mb_wait(queries_free + 8 * b, ((taken / 2) & 1) ^ 1);
        if (lane == 0)
          lum_tma_tile<LUM_AT_D / 64>(qs + b * kWgQBytes, query_map, kFaRows * 128, q1, q2, q3, q4,
                                      queries_in + 8 * b);
        __syncwarp();
      }
      LumFaTiles tiles(a, block.point, block.tile, kt_end);
      int flags = 0;
      for (long long kt = tiles.next_kept(t_begin / kFaKeys, flags); kt < kt_end;
           kt = tiles.next_kept(kt + 1, flags), ++uses) {
        const int t0 = (int)(kt * kFaKeys);
        if (uses >= kWgKStages) lum_mb_wait(keys_free + 8 * k.index, k.phase ^ 1);
        if (lane == 0)
          lum_tma_tile<LUM_AT_D / 64>(ks + k.index * kWgKBytes, key_map, kFaKeys * 128, t0, c2, c3,
                                      c4, keys_in + 8 * k.index);
        if (uses >= kWgVStages) lum_mb_wait(values_free + 8 * v.index, v.phase ^ 1);
        if (lane == 0)
          lum_tma_tile<LUM_AT_DV / 64>(vs + v.index * kWgVBytes, value_map, kFaKeys * 128, t0, c2,
                                       c3, c4, values_in + 8 * v.index);
        __syncwarp();
        k.next<kWgKStages>(), v.next<kWgVStages>();
      }
      if (!kPersistent) break;  // (one item: nothing carried over for another)
    }
    return;
  }

  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(LUM_WG_CONSUMER_REGS));
  const int ctid = tid - 128, cw = ctid / 32, cwg = ctid / 128, g = lane / 4, t4 = lane % 4;
  const int r0 = cw * 16 + g;  // the first of the warp's rows g and g + 8 in the block
  LumWgStage k, v;  // the keys' stage in use, the values' (counting on across items)
  int taken = 0;  // this block's items so far
  for (int item = blockIdx.x; item < items; item += gridDim.x, ++taken) {
    const LumFaBlock block = lum_fa_block(a, item);
    const long long split = block.split, tile = block.tile, point = block.point;
    const long long t_begin = split * a.keys_per_split;
    const long long kt_end = (min(a.keys, t_begin + a.keys_per_split) + kFaKeys - 1) / kFaKeys;
    LumFaTiles tiles(a, point, tile, kt_end);
    long long qo, ko, vo, mo, oo;
    lum_at_point(a, point, qo, ko, vo, mo, oo);
    if (kPersistent) lum_bar_sync(3, kWgConsumers);  // the last item's rows are written out
    const int rows = lum_fa_rows(a, tile, ctid, qo, mo, oo, row_q, row_m, row_o);
    lum_bar_sync(3, kWgConsumers);
    // This item's queries: a swizzled tile (and, split, the remainders' in the next). The
    // persistent kernel's producer copies them; otherwise the consumers load them here, 8
    // of a row a step: half-precision rows contiguous and aligned as one 16-byte load,
    // others element by element, then made visible to the products' reads.
    const int qb = kPersistent ? taken % 2 : 0;
    const uint32_t qt = qs + qb * kWgQBytes;
    unsigned char* const q_tile = shared + (qt - qs);
    if (kPersistent) {
      lum_mb_wait(queries_in + 8 * qb, (taken / 2) & 1);
    } else {
      const typename LUM_AT_Q::T* qp = (const typename LUM_AT_Q::T*)a.q;
      constexpr int kPieces = LUM_AT_D / 8;
      for (int i = ctid; i < kFaRows * kPieces; i += kWgConsumers) {
        const int r = i / kPieces, c = i % kPieces;
        const typename LUM_AT_Q::T* src = qp + row_q[r] + c * 8 * a.q_d;
        uint32_t hi[4] = {0u, 0u, 0u, 0u}, lo[4] = {0u, 0u, 0u, 0u};
        if (!kWgSplit && r < rows && a.q_d == 1 && (unsigned long long)src % 16 == 0) {
          const uint4 w = *(const uint4*)src;
          hi[0] = w.x, hi[1] = w.y, hi[2] = w.z, hi[3] = w.w;
        } else if (r < rows) {
#pragma unroll
          for (int e = 0; e < 4; ++e)
            lum_fa_split<kWgBf16>(LUM_AT_Q::get(src[2 * e * a.q_d]), LUM_AT_Q::get(src[(2 * e + 1) * a.q_d]),
                                  hi[e], lo[e]);
        }
        *(uint4*)(q_tile + lum_wg_at(kFaRows, r, c)) = make_uint4(hi[0], hi[1], hi[2], hi[3]);
        if (kWgSplit) *(uint4*)(q_tile + kWgQBytes + lum_wg_at(kFaRows, r, c)) = make_uint4(lo[0], lo[1], lo[2], lo[3]);
      }
      asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
      lum_bar_sync(3, kWgConsumers);
    }

    float o[LUM_AT_DV / 8][4];
#pragma unroll
    for (int j = 0; j < LUM_AT_DV / 8; ++j) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.0f;
    float m[2] = {kNegInf, kNegInf}, l[2] = {0.0f, 0.0f};  // rows g and g + 8 of the warp's
    // Scores: sc[n] holds keys 8n + 2 t4 (+1) of rows g (0, 1) and g + 8 (2, 3); the last
    // tile's weights pf, as the value product's A operand (keys 16 kk .. 16 kk + 15).
    float sc[kFaKeys / 8][4];
    uint32_t pf[kFaKeys / 16][4], plf[kWgSplit ? kFaKeys / 16 : 1][4];
    auto scores = [&](int s) {
#pragma unroll
      for (int n = 0; n < kFaKeys / 8; ++n) sc[n][0] = sc[n][1] = sc[n][2] = sc[n][3] = 0.0f;
      lum_wg_hold(sc);
      lum_wg_fence();
#pragma unroll
      for (int kk = 0; kk < LUM_AT_D / 16; ++kk) {
        const uint32_t panel = (kk / 4) * 128, step = (kk % 4) * 32;
        const uint64_t keys = lum_wg_desc(ks + s * kWgKBytes + panel * kFaKeys + step, 16);
        const uint32_t queries = qt + panel * kFaRows + cwg * 64 * 128 + step;
        lum_wg_scores(sc, lum_wg_desc(queries, 16), keys, kk > 0);
        if (kWgSplit) lum_wg_scores(sc, lum_wg_desc(queries + kWgQBytes, 16), keys, 1);
      }
      lum_wg_commit();
    };
    // The weights pf times the values at stage s, added to o.
    auto values = [&](int s) {
      lum_wg_hold(o);
      lum_wg_fence();
#pragma unroll
      for (int kk = 0; kk < kFaKeys / 16; ++kk) {
        const uint64_t values = lum_wg_desc(vs + s * kWgVBytes + kk * 16 * 128, kFaKeys * 128);
        lum_wg_values(o, pf[kk], values);
        if (kWgSplit) lum_wg_values(o, plf[kk], values);
      }
      lum_wg_commit();
    };
    // Tile kt's scores masked (a tile every row keeps all of is not looked up; a mixed
    // one by the bits the pass over the mask wrote), then the softmax step; alpha rescales
    // the output so far.
    auto weigh = [&](long long kt, bool all_kept, float (&alpha)[2]) {
      if (!all_kept) {
        const unsigned* bits = a.tile_bits + (tiles.first + kt) * kFaRows * 4 + t4;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const uint32_t keep = bits[(r0 + 8 * h) * 4];
#pragma unroll
          for (int n = 0; n < kFaKeys / 8; ++n)
#pragma unroll
            for (int e = 0; e < 2; ++e)
              if (!((keep >> (2 * n + e)) & 1u)) sc[n][2 * h + e] = kNegInf;
        }
      }
      lum_fa_softmax_step(sc, m, l, alpha, a.scale);
    };

    // Each warpgroup runs the kept tiles as a pipeline: at each turn it asks for one
    // tile's scores and the tile before's values product at once, then finds this tile's
    // weights while the products run; the first tile's turn has no values product, and a
    // last turn has nothing but the last one. The two warpgroups take turns issuing
    // products, so that one's softmax runs while the other's products do: warpgroup 0
    // goes first, and a warpgroup passes the turn on except after its last one
    // (warpgroup 0 has none left then). A lone consumer issues whenever it is ready.
    // Keys are released as soon as their scores are in, values once their product is.
    int flags = 0;
    long long kt = tiles.next_kept(t_begin / kFaKeys, flags);
    if (kt < kt_end) {
      if (kWgTurns && cwg == 1) lum_bar_arrive(1, kWgConsumers);
      float alpha[2];
      lum_mb_wait(keys_in + 8 * k.index, k.phase);
      if (kWgTurns) lum_bar_sync(1 + cwg, kWgConsumers);
      scores(k.index);
      if (kWgTurns) lum_bar_arrive(2 - cwg, kWgConsumers);
      lum_wg_wait<0>();
      lum_wg_hold(sc);
      if (lane == 0) lum_mb_arrive(keys_free + 8 * k.index);
      k.next<kWgKStages>();
      weigh(kt, flags & 2, alpha);  // (o is zero: alpha has nothing to rescale)
      lum_fa_weights<kWgBf16>(sc, pf, plf);
      kt = tiles.next_kept(kt + 1, flags);
      for (; kt < kt_end; kt = tiles.next_kept(kt + 1, flags)) {
        lum_mb_wait(keys_in + 8 * k.index, k.phase);
        lum_mb_wait(values_in + 8 * v.index, v.phase);
        if (kWgTurns) lum_bar_sync(1 + cwg, kWgConsumers);
        scores(k.index);
        values(v.index);
        if (kWgTurns) lum_bar_arrive(2 - cwg, kWgConsumers);
        lum_wg_wait<1>();  // the scores (the values product may still run)
        lum_wg_hold(sc);
        if (lane == 0) lum_mb_arrive(keys_free + 8 * k.index);
        weigh(kt, flags & 2, alpha);
        lum_wg_wait<0>();
        lum_wg_hold(o);
        if (lane == 0) lum_mb_arrive(values_free + 8 * v.index);
        lum_fa_rescale(o, alpha);
        lum_fa_weights<kWgBf16>(sc, pf, plf);
        k.next<kWgKStages>(), v.next<kWgVStages>();
      }
      // The last tile's values product.
      lum_mb_wait(values_in + 8 * v.index, v.phase);
      if (kWgTurns) lum_bar_sync(1 + cwg, kWgConsumers);
      values(v.index);
      if (kWgTurns && cwg == 0) lum_bar_arrive(2, kWgConsumers);
      lum_wg_wait<0>();
      lum_wg_hold(o);
      if (lane == 0) lum_mb_arrive(values_free + 8 * v.index);
      v.next<kWgVStages>();
    }

    // (Constant barrier ids: a computed one reserves all sixteen.)
    auto warpgroup_sync = [&] { cwg == 0 ? lum_bar_sync(4, 128) : lum_bar_sync(5, 128); };
    bool stored = false;
#if LUM_FA_PAIRED_OUT
    // A half-precision output (not split) goes through the warpgroup's rows of the queries'
    // tile, idle once its products have run, swizzled as the tiles are: then each row's
    // 16-byte pieces are stored whole, eight lanes a 128-byte row, where a quad's 4-byte
    // stores would write every 32-byte sector in two halves.
    if (LUM_AT_DV <= LUM_AT_D && a.splits == 1 && ((unsigned long long)a.out & 15) == 0) {
      constexpr int kPieces = LUM_AT_DV / 8;
      warpgroup_sync();  // the warpgroup's last products have read its queries
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        l[h] += __shfl_xor_sync(0xffffffffu, l[h], 1);
        l[h] += __shfl_xor_sync(0xffffffffu, l[h], 2);
        const float inv = 1.0f / l[h];
        const int r = r0 + 8 * h;
#pragma unroll
        for (int j = 0; j < kPieces; ++j)
          *(uint32_t*)(q_tile + lum_wg_at(kFaRows, r, j) + 4 * t4) =
              lum_pack_half2<kWgBf16>(o[j][2 * h] * inv, o[j][2 * h + 1] * inv);
      }
      warpgroup_sync();
      for (int i = ctid % 128; i < 64 * kPieces; i += 128) {
        const int r = cwg * 64 + i / kPieces, piece = i % kPieces;
        if (r < rows)
          *(uint4*)((uint16_t*)a.out + row_o[r] * LUM_AT_DV + piece * 8) =
              *(const uint4*)(q_tile + lum_wg_at(kFaRows, r, piece));
      }
      stored = true;
    }
#endif
    if (!stored) lum_fa_store<kWgBf16>(a, o, m, l, r0, rows, row_o, split);
    if (kPersistent) {
      // The query buffer is free once the consumers are done with it: its products (and
      // the output staged in it) read, each thread's accesses ordered before the TMA's
      // next writes into it.
      asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
      warpgroup_sync();
      if (ctid == 0) lum_mb_arrive(queries_free + 8 * qb);
    }
    if (!kPersistent) break;
  }
}
)ATTN";

// One warpgroup product m64nNk16 into the f32 accumulator d[N / 8][4] (a warp's rows
// g, g + 8 at columns 8j + 2 t4 (+1), as mma.m16n8 lays them out): `name`(d, a, b,
// accumulate) with A and B by descriptor, both read along k; or, with A in registers
// (the m16n8k16 A fragment of the warp's 16 rows), `name`(d, a, b) adding to d, B read
// across k (transposed).
std::string wgmma_function(const std::string& name, int64_t n, bool a_in_registers,
                           const char* type) {
  const int64_t regs = n / 2;
  std::string operands;
  for (int64_t i = 0; i < regs; ++i)
    operands += (i ? ", " : "") + std::string("%") + std::to_string(i);
  std::string outputs;
  for (int64_t i = 0; i < regs; ++i)
    outputs += (i ? ", " : "") + std::string("\"+f\"(d[") + std::to_string(i / 4) + "][" +
               std::to_string(i % 4) + "])";
  const std::string shape = "m64n" + std::to_string(n) + "k16.f32." + type + "." + type;
  auto arg = [&](int64_t i) { return "%" + std::to_string(regs + i); };
  std::string f = "LUM_FN void " + name + "(float (&d)[" + std::to_string(n / 8) + "][4], ";
  if (a_in_registers) {
    f += "const uint32_t (&a)[4], uint64_t b) {\n  asm volatile(\"{ .reg .pred p; setp.ne.b32 p, " +
         arg(5) + ", 0; wgmma.mma_async.sync.aligned." + shape + " {" + operands + "}, {" + arg(0) +
         ", " + arg(1) + ", " + arg(2) + ", " + arg(3) + "}, " + arg(4) +
         ", p, 1, 1, 1; }\"\n      : " + outputs +
         "\n      : \"r\"(a[0]), \"r\"(a[1]), \"r\"(a[2]), \"r\"(a[3]), \"l\"(b), \"r\"(1));\n}\n";
  } else {
    f += "uint64_t a, uint64_t b, int accumulate) {\n  asm volatile(\"{ .reg .pred p; setp.ne.b32 "
         "p, " +
         arg(2) + ", 0; wgmma.mma_async.sync.aligned." + shape + " {" + operands + "}, " + arg(0) +
         ", " + arg(1) + ", p, 1, 1, 0, 0; }\"\n      : " + outputs +
         "\n      : \"l\"(a), \"l\"(b), \"r\"(accumulate));\n}\n";
  }
  return f;
}

int64_t tile_bytes(const WgmmaAttentionKernel& s) {
  const int64_t query_tiles = s.q == DType::F32 || s.persistent ? 2 : 1;
  return 2 * (query_tiles * s.rows() * s.d + s.keys * (s.key_stages * s.d + s.value_stages * s.dv));
}

// Whether blocks_per_sm blocks of s fit on an SM's shared memory.
bool fits(const WgmmaAttentionKernel& s) {
  const int64_t block = tile_bytes(s) + kExtraBytes;
  return block <= kMaxSharedBytes &&
         s.blocks_per_sm * (block + kBlockReservedBytes) <= kSmSharedBytes;
}

// Registers a thread: at launch (as __launch_bounds__ lets ptxas use: the SM's share of a
// block, in the allocation's steps of 8, at most 255), and each consumer's once the
// producer has given back its own (at most 240, setmaxnreg's steps of 8).
int64_t launch_registers(const WgmmaAttentionKernel& s) {
  return std::min<int64_t>(kSmRegisters / (s.threads() * s.blocks_per_sm) / 8 * 8, 255);
}
int64_t producer_registers(const WgmmaAttentionKernel& s) {
  return s.persistent ? kPersistentProducerRegisters : kProducerRegisters;
}
int64_t consumer_registers(const WgmmaAttentionKernel& s) {
  const int64_t pool = s.threads() * launch_registers(s) - 128 * producer_registers(s);
  return std::min<int64_t>(pool / (128 * s.consumers) / 8 * 8, 240);
}

}  // namespace

bool wgmma_attention_supports(DType q, DType k, DType v, int64_t d, int64_t dv) {
  // (Split f32 queries take two tiles: head dims past 128 would not fit.)
  return (k == DType::BF16 || k == DType::F16) && v == k && (q == k || q == DType::F32) &&
         d % 64 == 0 && dv % 64 == 0 && d > 0 && dv > 0 && d <= (q == k ? 256 : 128) && dv <= 128;
}

std::string wgmma_attention_source(const WgmmaAttentionKernel& s) {
  const char* type = s.type == DType::BF16 ? "bf16" : "f16";
  const std::string products = "#if __CUDA_ARCH__ >= 900\n" +
                               wgmma_function("lum_wg_scores", s.keys, false, type) +
                               wgmma_function("lum_wg_values", s.dv, true, type);
  return attention_program({s.q, s.type, s.type, s.out, s.d, s.dv},
                           {{"LUM_FA_ROWS", std::to_string(s.rows())},
                            {"LUM_FA_KEYS", std::to_string(s.keys)},
                            {"LUM_FA_SPLIT", s.q == DType::F32 ? "1" : "0"},
                            {"LUM_FA_TILE_BITS", "1"},
                            {"LUM_WG_KEY_STAGES", std::to_string(s.key_stages)},
                            {"LUM_WG_VALUE_STAGES", std::to_string(s.value_stages)},
                            {"LUM_WG_CONSUMERS", std::to_string(s.consumers)},
                            {"LUM_WG_BLOCKS", std::to_string(s.blocks_per_sm)},
                            {"LUM_WG_PERSISTENT", s.persistent ? "1" : "0"},
                            {"LUM_WG_PRODUCER_REGS", std::to_string(producer_registers(s))},
                            {"LUM_WG_CONSUMER_REGS", std::to_string(consumer_registers(s))},
                            {"LUM_FA_PAIRED_OUT", s.out == s.type ? "1" : "0"}},
                           std::string(attention_tiles_source()) + products + kSource + "#endif\n",
                           s.threads());
}

size_t wgmma_attention_shared_bytes(const WgmmaAttentionKernel& s) {
  return static_cast<size_t>(tile_bytes(s) + kExtraBytes);
}

std::string WgmmaAttentionKernel::describe() const {
  return "wgmma, " + std::to_string(rows()) + " rows a block, " + std::to_string(keys) +
         " keys a tile, " + std::to_string(blocks_per_sm) + " block" +
         (blocks_per_sm > 1 ? "s" : "") + " an SM" + (persistent ? ", persistent" : "");
}

std::vector<WgmmaAttentionKernel> wgmma_attention_kernels(DType q, DType type, DType out, int64_t d,
                                                          int64_t dv, int64_t keys) {
  std::vector<WgmmaAttentionKernel> kernels;
  WgmmaAttentionKernel s{q, type, out, d, dv};
  // Split queries' second weights take the registers of half a tile of scores: ptxas
  // spilled 268 bytes at 128 keys.
  if (q == DType::F32 || !fits(s)) s.keys = 64;
  kernels.push_back(s);
  // One consumer: its scores, weights and outputs take (keys / 2 + keys / 4 + dv / 2)
  // registers a thread (and split queries' second weights keys / 4), in the 232 of two
  // blocks an SM, or in the 136 of three at 64 keys a tile and head dims of 64.
  s.consumers = 1, s.blocks_per_sm = 2;
  if (s.q != DType::F32) s.keys = 128;
  if (!fits(s)) s.keys = 64;
  if (fits(s)) kernels.push_back(s);
  s.blocks_per_sm = 3, s.keys = 64;
  if (q != DType::F32 && d <= 64 && dv <= 64 && fits(s)) kernels.push_back(s);
  if (keys <= 1024 && kernels.size() > 1)
    std::rotate(kernels.begin(), kernels.begin() + 1, kernels.end());
  // The one-consumer kernels again, persistent (their second query buffer permitting):
  // first where the op has at most 1024 keys, more blocks an SM first (the 32 x 256
  // case: 0.0444 ms on three, 0.0500 on two, 0.0636 on three not persistent), else last
  // (the 4096-token prompt: 0.40 against 0.29). (A third stage of keys and values, so
  // that the producer runs a tile further ahead, was no faster: 0.0493 against 0.0473.)
  std::vector<WgmmaAttentionKernel> persistent;
  if (q == type)
    for (WgmmaAttentionKernel p : kernels) {
      p.persistent = true;
      if (p.consumers == 1 && fits(p)) persistent.insert(persistent.begin(), p);
    }
  kernels.insert(keys <= 1024 ? kernels.begin() : kernels.end(), persistent.begin(),
                 persistent.end());
  return kernels;
}

bool wgmma_attention_maps(const AttentionArgs& a, const void* k, const void* v, int64_t d,
                          int64_t dv, int64_t tile_keys, TensorMap& key_map, TensorMap& value_map) {
  if (a.kv_rank > 3) return false;
  // Dims innermost first: the head dim, the keys, then the kv dims (a's are outermost
  // first), padded to five with dims of one.
  auto map = [&](TensorMap& out, const void* data, int64_t offset, int64_t head, int64_t key_stride,
                 const int64_t* kv_strides) {
    std::vector<uint64_t> dims = {static_cast<uint64_t>(head), static_cast<uint64_t>(a.keys)};
    std::vector<uint64_t> strides = {static_cast<uint64_t>(key_stride)};
    for (int64_t i = a.kv_rank - 1; i >= 0; --i) {
      if (kv_strides[i] <= 0) return false;
      dims.push_back(static_cast<uint64_t>(a.kv_dim[i]));
      strides.push_back(static_cast<uint64_t>(kv_strides[i]));
    }
    while (dims.size() < 5) {
      dims.push_back(1);
      strides.push_back(strides.back());
    }
    return encode_swizzled_map(out, static_cast<const uint16_t*>(data) + offset, dims, strides,
                               {64, static_cast<uint32_t>(tile_keys), 1, 1, 1});
  };
  return map(key_map, k, a.k_off, d, a.k_t, a.kv_k) &&
         map(value_map, v, a.v_off, dv, a.v_t, a.kv_v);
}

bool wgmma_attention_query_map(const AttentionArgs& a, const void* q, int64_t d,
                               TensorMap& query_map) {
  const int64_t rows = kWgmmaAttentionRows / 2;
  if (a.q_d != 1 || a.sh_rank < 1 || a.sh_rank > 2 || a.sh_rank + a.kv_rank > 4 ||
      (a.sh_rank == 2 && a.sh_dim[1] % rows != 0))
    return false;
  // Dims innermost first: the head dim, the row dims, then the kv dims, padded to five.
  std::vector<uint64_t> dims = {static_cast<uint64_t>(d)};
  std::vector<uint64_t> strides;
  auto add = [&](int64_t size, int64_t stride) {
    dims.push_back(static_cast<uint64_t>(size));
    strides.push_back(static_cast<uint64_t>(stride));
    return stride > 0 || size == 1;
  };
  for (int64_t i = a.sh_rank - 1; i >= 0; --i)
    if (!add(a.sh_dim[i], a.sh_q[i])) return false;
  for (int64_t i = a.kv_rank - 1; i >= 0; --i)
    if (!add(a.kv_dim[i], a.kv_q[i])) return false;
  while (dims.size() < 5) add(1, static_cast<int64_t>(strides.back()));
  return encode_swizzled_map(query_map, static_cast<const uint16_t*>(q) + a.q_off, dims, strides,
                             {64, static_cast<uint32_t>(rows), 1, 1, 1});
}

}  // namespace luminal::cudagen

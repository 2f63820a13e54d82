// What the attention kernels share (private to src/backends/cuda): the parameter block
// that places every query row, key and value, the element types' loads and stores, the
// device helpers (exp2, asynchronous copies, tensor-core fragments), and the combine of
// rows whose keys were split between blocks.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "luminal/compiler/attention_op.hpp"
#include "luminal/dtype.hpp"
#include "luminal/view.hpp"

namespace luminal::cudagen {

// Dims of either kind (below) at most, threads per block, and split ranges at most (the
// combine kernel's weights): given to the sources as LUM_AT_THREADS and
// LUM_AT_MAX_SPLITS.
constexpr int kAttentionMaxDims = 4, kAttentionThreads = 128;
constexpr int64_t kAttentionMaxSplits = 1024;
// Key tiles one warp of the pass over a mask's tiles sorts (LUM_FA_MASK_CHUNK): its rows'
// offsets are worked out once for them all.
constexpr int64_t kMaskTileChunk = 8;

/// The kernels' parameter block; attention_program's shared side declares the same fields in
/// the same order (all 8 bytes wide but the last two, so both sides lay it out alike).
/// The op's batch dims split in two: those the keys and values vary along (batch, key
/// heads: "kv") and those they do not (the query heads of one key head and the query
/// positions: "sh", a point's rows).
struct AttentionArgs {
  const void *q, *k, *v, *mask;
  void* out;
  float* partials;  // split rows' pieces: [row][split][attention_piece_floats(Dv)]
  int64_t q_off, k_off, v_off, m_off;
  int64_t q_d, k_d, v_d;  // strides along the head dims
  int64_t k_t, v_t, m_t;  // strides along the keys
  int64_t keys, keys_per_split, splits, shared_rows, row_tiles;
  // Keys [0, early_keys) lie in memory no kernel of the run writes (a cache's rows from
  // earlier steps, an input's): the streaming kernel sends its first copies of them before
  // the kernel ahead of it has finished.
  int64_t early_keys;
  int64_t kv_rank, sh_rank;
  // The tensor-core kernel's mask tiles (attention_mma.cpp): their flags, key tiles, and
  // kv points with a mask of their own (1 where the mask does not vary along kv dims).
  uint8_t* tiles;
  // With the flags, the warpgroup kernel's (attention_wgmma.cpp) keep bits of each mixed
  // tile, four 32-bit words a row: bit 2n + e of word t of row r keeps the tile's key
  // 8n + 2t + e (the keys a thread's score fragments hold).
  uint32_t* tile_bits;
  int64_t key_tiles, mask_points;
  // kv dims: sizes, and the strides of q, k, v, mask and output rows.
  int64_t kv_dim[kAttentionMaxDims], kv_q[kAttentionMaxDims], kv_k[kAttentionMaxDims],
      kv_v[kAttentionMaxDims], kv_m[kAttentionMaxDims], kv_o[kAttentionMaxDims];
  // sh dims: sizes and strides of q, mask and output rows.
  int64_t sh_dim[kAttentionMaxDims], sh_q[kAttentionMaxDims], sh_m[kAttentionMaxDims],
      sh_o[kAttentionMaxDims];
  // A computed mask's dims (Attention::run's ComputedMask), its keep expression's order.
  int64_t mask_dims[compiler::kMaxComputedMaskDims];
  float scale;  // times log2(e): scores go through 2^x
  float unused;
};

/// A split's piece of a row in `partials`: its Dv outputs, then its max and sum from the
/// float at attention_piece_max (even: read as one float2), padded to 16 bytes (the
/// combine reads pieces 16 bytes at a time). Given to the sources as LUM_AT_PIECE_MAX and
/// LUM_AT_PIECE_FLOATS.
constexpr int64_t attention_piece_max(int64_t dv) {
  return (dv + 1) / 2 * 2;
}
constexpr int64_t attention_piece_floats(int64_t dv) {
  return (attention_piece_max(dv) + 2 + 3) / 4 * 4;
}

/// The operand types and head dims every attention kernel is specialised to.
struct AttentionOperands {
  DType q, k, v, out;
  int64_t d, dv;  // query/key and value head dims
};

/// Elements of a view's rows read as one 16-byte load (16 bytes' worth of `t`) where the
/// head dim (`head_axis`, `head_dim` long) is contiguous and every row and dim offset
/// from `data` is 16-byte aligned, else 1.
int vector_width(const ConcreteView& view, size_t head_axis, int64_t head_dim, DType t,
                 const void* data);

/// What the tensor-core kernels share, for tiles of LUM_FA_ROWS rows and LUM_FA_KEYS
/// keys: their pass over the mask (kernel lum_attention_mask_tiles: flags a tile
/// dropped, kept whole or mixed, and with LUM_FA_TILE_BITS 1 writes a mixed tile's keep
/// bits), LumFaTiles (a row tile's next kept key tile, from those flags), lum_fa_block
/// (a block's split, row tile and kv point), lum_fa_rows (its rows' offsets) and
/// lum_fa_store (a warp's output rows, or their split pieces; LUM_FA_PAIRED_OUT 1 stores
/// an output of the keys' half type in pairs).
std::string_view attention_tiles_source();

/// An attention kernel's whole source: the CUDA and scalar preludes, the defines of
/// `operands` (LUM_AT_Q/K/V/O: their element structs; LUM_AT_D, LUM_AT_DV;
/// LUM_FA_KBF16/VBF16: whether keys, values are bf16), of
/// LUM_AT_THREADS (`threads`, a block) and LUM_AT_MAX_SPLITS, the kernel's own `defines` (name,
/// value), the shared CUDA side, then `kernel`. The shared side holds LumAttnArgs, the element
/// structs lum_at_f32/f16/bf16 (get: to float; put: from float), lum_at_point and
/// lum_at_row (the offsets of a kv point and of a row of it), lum_at_block (a block's
/// split, tile and kv point where splits run fastest), lum_at_exp2 and
/// lum_at_smem; from sm_80 on, the tensor-core helpers lum_fa_* (mma.sync m16n8k16 and ldmatrix,
/// query staging, the online softmax over score fragments; LUM_FA_SPLIT adds a second product for
/// f32 operands' remainders); and the combine kernel lum_attention_combine.
std::string attention_program(const AttentionOperands& operands,
                              const std::vector<std::pair<std::string, std::string>>& defines,
                              std::string_view kernel, int threads = kAttentionThreads);

}  // namespace luminal::cudagen

// Attention for prompts on Hopper's warpgroup tensor-core instructions (wgmma).
//
// The same flash-attention forward pass as attention_mma.hpp, for keys and values both
// bf16 or both f16, queries of their type or f32, head dims that are multiples of 64. One warp
// copies keys and values into shared memory through the tensor memory accelerator (TMA: the
// kernel's two tensor maps, one for keys and one for values); one or two warpgroups of consumers
// own 64 query rows each, their scores and outputs warpgroup-wide (wgmma) accumulators reading
// keys and values from shared memory by descriptor. The instructions need the
// architecture-specific target sm_90a.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "backends/cuda/attention_common.hpp"
#include "backends/cuda/tensor_map.hpp"
#include "luminal/dtype.hpp"

namespace luminal::cudagen {

/// Query rows a block at most (two consumer warpgroups).
constexpr int64_t kWgmmaAttentionRows = 128;

struct WgmmaAttentionKernel {
  DType q = DType::BF16;     // that of keys and values, or f32 (split in two halves)
  DType type = DType::BF16;  // of keys and values
  DType out = DType::BF16;
  int64_t d = 0, dv = 0;  // multiples of 64; d at most 256 (128 for f32 queries), dv 128
  int64_t keys = 128;     // keys a tile: 64 or 128
  // Tiles of keys and of values in flight (three of either measured no faster).
  int key_stages = 2, value_stages = 2;
  // Consumer warpgroups (64 query rows each) and blocks resident on an SM: two consumers
  // take turns at the tensor cores within a block, which holds an SM's registers; one
  // consumer of a block of two or three overlaps its set-up and its last tile with
  // another block's products, where a block sees few tiles of keys (short prompts).
  int consumers = 2, blocks_per_sm = 1;
  // Persistent (one consumer, queries of the keys' type): as many blocks as stay resident,
  // each taking work items in turn, its producer copying the next item's queries, keys
  // and values while this one's products run (two query buffers).
  bool persistent = false;

  int64_t rows() const { return 64 * consumers; }
  int threads() const { return 128 * (1 + consumers); }
  std::string describe() const;
};

bool wgmma_attention_supports(DType q, DType k, DType v, int64_t d, int64_t dv);

std::string wgmma_attention_source(const WgmmaAttentionKernel& spec);

size_t wgmma_attention_shared_bytes(const WgmmaAttentionKernel& spec);

/// The kernels for these operands (queries q, keys and values `type`), the cost model's
/// pick first: two consumers a block with tiles of 128 keys where its stages fit in shared
/// memory and the queries are not split, else 64; then one consumer a block, two blocks
/// an SM (and three at head dims of 64, tiles of 64 keys) where they fit. The
/// one-consumer kernels come first where the op has at most 1024 `keys`, and before them
/// their persistent builds (queries of the keys' type), more blocks an SM first; with
/// more keys the persistent ones come last.
std::vector<WgmmaAttentionKernel> wgmma_attention_kernels(DType q, DType type, DType out, int64_t d,
                                                          int64_t dv, int64_t keys);

/// The kernel's tensor maps of keys and values (at k and v, laid out as `a` says) for
/// tiles of `tile_keys`: false where the copies cannot read them (more than three kv
/// dims, one the keys or values do not vary along, strides the maps refuse).
bool wgmma_attention_maps(const AttentionArgs& a, const void* k, const void* v, int64_t d,
                          int64_t dv, int64_t tile_keys, TensorMap& key_map, TensorMap& value_map);

/// A persistent kernel's map of the queries (at q) for tiles of kWgmmaAttentionRows / 2
/// rows: false where one cannot read them (rows over more than two dims, or two whose
/// inner one is not whole tiles; more than four dims in all; strides the map refuses).
bool wgmma_attention_query_map(const AttentionArgs& a, const void* q, int64_t d,
                               TensorMap& query_map);

}  // namespace luminal::cudagen

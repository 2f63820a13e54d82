// CUDA C++ generation for the CUDA backend (private to src/backends/cuda). Each planned
// kernel becomes
//   extern "C" __global__ void lum_kernel_<k>(OUT* out, const IN* in1, ..., int64_t* err,
//                                             const LumDims* dims)
// over a grid-stride loop, so any grid size covers any bound dims: elementwise kernels
// give each thread output elements, reductions give each warp output elements, and a
// Scatter is a copy kernel followed by an ordered one (lum_kernel_<k>_scatter). A chain
// of reductions over the same rows, perhaps closed by an elementwise kernel over their
// elements (softmax, RMSNorm, LayerNorm), is one function in which each block takes
// rows through every member in turn (a row group): its parameters are each member's
// output and reads in order, then the first member's error slot and the dims. A reduction
// alone over a few long rows (kPartedRows) also takes the executable's scratch memory, last
// (lum_scratch), where its blocks' results meet. Elementwise kernels next to each other
// that read none of each other's values are one function too (a map group): its blocks
// are dealt out to the members in turn, each member's share running its grid-stride loop,
// so a decoding step's small independent kernels (RoPE of the queries and of the keys, the
// values' cast into their cache) cost one launch. The dims are read from device memory,
// not passed by value: a decode step's kernels then keep their parameters while the
// context length moves on, and its recorded CUDA graph has fewer nodes to update
// (stream_recorder.hpp).
#pragma once

#include <string>
#include <vector>

#include "luminal/compiler/plan.hpp"

namespace luminal::cudagen {

/// Threads per block the generated functions are compiled for at most.
constexpr int kMaxBlock = 256;

// InGroup: computed by the group launched at a later kernel, the group's last: a row
// group (Rows) or a map group (Maps).
enum class KernelShape { Map, Reduce, Scatter, Rows, Maps, InGroup, Library };

/// A row group's threads a block, for rows that keep `busy` threads busy (each takes
/// their share of adjacent elements): whole warps, up to kMaxBlock.
constexpr int64_t row_block(int64_t busy) {
  const int64_t warps = (busy + 31) / 32 * 32;
  return warps < 32 ? 32 : warps > kMaxBlock ? kMaxBlock : warps;
}

/// The blocks of a cluster that a row of a row group over few long rows is spread over,
/// on GPUs with clusters (compute capability 9.0 on; before it, one block a row). The
/// launch's grid is the rows times row_spread.
constexpr int64_t kRowSpread = 8;
constexpr int64_t row_spread(int compute_capability) {
  return compute_capability >= 90 ? kRowSpread : 1;
}

/// Long rows: kLongRow elements or more (a vocabulary's logits, a tensor's total; not a
/// hidden state). A row group over at most kFewRows of them (their count known at compile
/// time) spreads each over a cluster. A reduction alone over at most kPartedRows (known
/// too), long or of a length known only at run time, deals each row out to many blocks
/// (KernelLaunch::parted), at most kMaxParts a row and kPartSlots in all, whose results
/// meet in the executable's scratch memory: kPartSlots slots of 8 bytes, then a count a
/// row, which each launch leaves at 0.
constexpr int64_t kLongRow = 8 * kRowSpread * kMaxBlock, kFewRows = 16, kPartedRows = 256;
constexpr int64_t kMaxParts = 1024, kPartSlots = 16384;
constexpr size_t kPartScratchBytes = kPartSlots * 8 + kPartedRows * 4;

/// The most blocks a map group's member takes (its grid-stride loop covers the rest).
constexpr int64_t kMapGroupMemberBlocks = 1024;
/// The blocks of kMaxBlock threads a map group's member that needs `threads` takes: at
/// least one, at most kMapGroupMemberBlocks. The generated kernel deals them out by the
/// same sum (write_map_group).
constexpr int64_t map_member_blocks(int64_t threads) {
  const int64_t blocks = (threads + kMaxBlock - 1) / kMaxBlock;
  return blocks < 1 ? 1 : blocks > kMapGroupMemberBlocks ? kMapGroupMemberBlocks : blocks;
}
/// The most kernels in a map group.
constexpr size_t kMapGroupMembers = 8;

struct KernelLaunch {
  KernelShape shape = KernelShape::Library;
  std::string function;          // the __global__ function (identical kernels share one)
  std::string scatter_function;  // a Scatter's ordered second kernel
  // Map: output elements / 8 (a thread takes two vectors of four); Reduce: output elements x 32
  // (a warp each), or across rows kMaxBlock a group of eight outputs, or where `parted` the
  // rows; Rows: rows (a block each, or a cluster each where `spread`); Maps: unused (see
  // member_threads).
  Expr threads;
  size_t group_begin = 0;  // Rows, Maps: the group's first kernel (this one is its last)
  size_t launched_at = 0;  // InGroup: the kernel that launches its group
  // Maps: each member's threads (as a Map's). Member i takes map_member_blocks of them,
  // after those of the members before it.
  std::vector<Expr> member_threads;
  Expr row_threads;          // Rows: threads a row keeps busy (its elements / those a step)
  bool spread = false;       // Rows: each row over a cluster of row_spread blocks
  bool parted = false;       // Reduce: each row over many blocks (kPartedRows)
  Expr row_length;           // parted: a row's elements
  int64_t shared_bytes = 0;  // Rows: the row cache's dynamic shared memory
  size_t part = 0;           // the source part (CudaSource::parts) its function is in
  size_t scatter_part = 0;   // and its Scatter pass
};

struct CudaSource {
  std::string code;                    // every function, after the preludes
  std::vector<std::string> parts;      // the same functions dealt out to units of their own
  std::vector<std::string> dims;       // symbolic dims, in LumDims order
  std::vector<KernelLaunch> launches;  // by kernel
};

/// The most functions a source part holds on average before the source is cut into more:
/// NVRTC compiles one translation unit on one core, several seconds for a model's kernels.
constexpr size_t kFunctionsAPart = 8;

/// `map_groups`: independent elementwise kernels next to each other are one function.
/// `max_parts`: the functions are dealt out to up to this many parts (each with the
/// preludes), about kFunctionsAPart each, compiled side by side.
CudaSource generate_cuda_source(const Graph& g, const compiler::KernelPlan& plan,
                                bool map_groups = true, size_t max_parts = 1);

/// Whether kernel `k` is elementwise: generated as a grid-stride loop over its output's
/// elements (no reduction, Scatter or library op).
bool elementwise(const Graph& g, const compiler::Kernel& k);

/// Helpers included at the top of every generated file, before runtime::scalar_prelude.
std::string_view cuda_prelude();

/// Expr::to_c's helpers (floor division and modulo) as device functions, for sources that
/// render index expressions.
std::string device_expr_prelude();

}  // namespace luminal::cudagen

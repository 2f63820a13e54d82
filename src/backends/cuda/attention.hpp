// The Attention kernel on the GPU (compiler/attention_op.hpp): scores, masked softmax and
// the value product in one pass over the keys and values (private to src/backends/cuda).
// Its source is specialised to the head dims, the types and the load widths, and
// compiled by NVRTC on first use, like the generated kernels.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "backends/cuda/attention_common.hpp"
#include "backends/cuda/attention_mma.hpp"
#include "backends/cuda/device.hpp"
#include "backends/cuda/nvrtc.hpp"
#include "luminal/dtype.hpp"
#include "luminal/expr.hpp"
#include "luminal/view.hpp"
#include "runtime/search.hpp"

namespace luminal::cudagen {

/// What one compiled specialisation fixes.
struct AttentionKernel {
  DType q = DType::F32, k = DType::F32, v = DType::F32, out = DType::F32;
  int64_t d = 0, dv = 0;  // query/key and value head dims
  int key_vec = 1;        // elements of a key row per load (16 bytes' worth, or 1)
  int value_vec = 1;      // the same for values
  int lanes = 1;          // threads per key (a power of two up to 32)
  int rows = 1;           // query rows per block
};

/// The kernels' CUDA source for one specialisation (CI compiles some for sm_90).
std::string attention_source(const AttentionKernel& spec);

/// A mask the kernels compute from its index expression (compiler::computed_mask) rather
/// than read as bytes: no mask is stored, and a causal prompt's tiles are told apart by
/// comparing indices.
struct ComputedMask {
  explicit ComputedMask(Expr keep);
  std::string keep;               // keep in C: what tells one computed mask from another
  std::string source;             // the defines a kernel's source starts with
  std::vector<std::string> dims;  // the symbolic dims keep reads, in mask_dims order
  std::vector<int64_t> values;    // theirs this run (at most kMaxComputedMaskDims)
};

/// Bytes at the start of the keys' and the values' memory that no kernel of the run
/// writes (all of an input's; of a cache grown in place, its rows from earlier steps): the
/// keys read only from there may be read before the kernel ahead has finished.
struct SettledBytes {
  size_t k = 0, v = 0;
};

/// Keys [0, n) of a key or value view (keys along `axis`, elements `element_bytes` wide)
/// whose elements all lie in the first `settled` bytes of its memory: the largest such n
/// (every key where `settled` is the largest size_t; none where a stride is negative).
int64_t keys_within(const ConcreteView& view, size_t axis, size_t element_bytes, size_t settled);

class Attention {
 public:
  Attention(const Device& device, runtime::Searcher& searcher)
      : device_(device), searcher_(searcher) {}

  /// out[batch..., M, Dv] = softmax over T of (q . k * scale, or -inf where the mask is
  /// false) times v, its rows stored at `row_strides` (each of [batch..., M]'s, in rows:
  /// AttentionOp::row_strides), for AttentionOp operand views q, k ([batch..., M, D, T]), v
  /// ([batch..., M, T, Dv]) and mask ([batch..., M, T], bool) over device buffers; where
  /// `computed` is given, the mask's view only names its dims and nothing is read.
  /// Queries, keys, values and the output may each be f32, f16 or bf16. Prompts over
  /// half-precision keys and values run on tensor cores (attention_wgmma.hpp on Hopper,
  /// attention_mma.hpp). False, launching nothing, where a view is padded or there are more than
  /// four batch dims of either kind (those keys and values vary along and those they do not): the
  /// caller runs the op elsewhere.
  bool run(const ConcreteView& q, const void* q_data, DType q_type, const ConcreteView& k,
           const void* k_data, DType k_type, const ConcreteView& v, const void* v_data,
           DType v_type, const ConcreteView& mask, const void* mask_data,
           const ComputedMask* computed, double scale, void* out, DType out_type,
           const std::vector<int64_t>& row_strides, SettledBytes settled = {});

  /// A run of a program starts: its first attention works out its mask's tiles again where
  /// the last pass read a mask's values (they may differ from the last run's); the run's
  /// later attentions over the same mask, shapes and tiles read those (a model's layers
  /// share one mask). A computed mask's tiles follow from its dims alone, which the pass's
  /// record holds: runs over the same dims keep them.
  void begin_run() {
    if (last_pass_read_values_) last_mask_pass_.clear();
  }

 private:
  struct Compiled {
    std::unique_ptr<Module> module;
    const void* kernel = nullptr;      // the attention kernel
    const void* combine = nullptr;     // its split pieces' combine
    const void* mask_tiles = nullptr;  // the tensor-core kernel's pass over the mask
    size_t shared_bytes = 0;           // dynamic, a block
    int blocks_per_sm = 0;             // resident at once
    int threads = 0;                   // a block, of every kernel of the module
    int64_t tile_keys = 0;             // keys a tile (of the pass over the mask, if any):
                                       // a split's keys come in whole tiles
    int64_t tile_bit_rows = 0;         // rows a tile where the pass writes keep bits
    size_t kernel_params = 1;          // the attention kernel's: its arguments, and the
                                       // warpgroup kernel's three tensor maps
  };
  // The module cached under `key` (the specialisation's fields) and `mask` (a computed
  // mask, or none), compiled from the mask's defines and source() on first use.
  const Compiled& compiled(const std::string& key, const ComputedMask* mask,
                           const std::string& kernel, const std::function<std::string()>& source,
                           size_t shared_bytes, int threads = kAttentionThreads,
                           int64_t tile_keys = kMmaAttentionKeys, int64_t tile_bit_rows = 0);

  const Device& device_;
  runtime::Searcher& searcher_;  // between the two tensor-core kernels of Hopper's prompts
  std::map<std::string, Compiled> kernels_;  // by specialisation
  // The searched kernel's option (in run's order: the warpgroup kernels, then the sm_80 one)
  // by the op's shape: types (q, k, v, out), head dims, keys, shared rows, kv points and a
  // computed mask's expression (ComputedMask::keep, or "").
  using ShapeKey = std::tuple<DType, DType, DType, DType, int64_t, int64_t, int64_t, int64_t,
                              int64_t, std::string>;
  std::map<ShapeKey, size_t> choice_;
  // Split rows' partial results and the mask tiles' flags and keep bits, kept while a CUDA
  // graph may read them.
  DeviceBuffer partials_, tiles_, tile_bits_;
  std::vector<int64_t> last_mask_pass_;  // what the last pass over a mask read and wrote
  bool last_pass_read_values_ = false;   // a mask's (not a computed one)
};

}  // namespace luminal::cudagen

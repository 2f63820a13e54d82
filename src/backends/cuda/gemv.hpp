// Products with one row, y[N] = x[K] W^T with W[N, K] read along K: a decode step's
// every projection (private to src/backends/cuda). They are bound by reading W, which
// cuBLASLt's general kernels do short of the bandwidth; this kernel streams W with
// 16-byte loads, several warps per output. Its source is compiled by NVRTC on first use,
// like the generated kernels (cached, no nvcc at build time). Each new matrix shape's
// kernel shape (warps a block and a row, loads in flight) is searched
// (runtime/search.hpp).
#pragma once

#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "backends/cuda/device.hpp"
#include "backends/cuda/nvrtc.hpp"
#include "luminal/dtype.hpp"
#include "luminal/view.hpp"
#include "runtime/search.hpp"

namespace luminal::cudagen {

/// A kernel shape: warps a block, warps an output row, 16-byte loads in flight a lane.
struct GemvShape {
  int warps = 8, split = 4, unroll = 4;
  bool operator==(const GemvShape&) const = default;
  std::string label() const;
};

/// The shapes the search tries; the first is the default (the cost model's pick).
constexpr GemvShape kGemvShapes[] = {{8, 4, 4}, {8, 2, 4}, {8, 8, 4}, {8, 4, 8},
                                     {8, 2, 8}, {8, 1, 8}, {4, 4, 4}, {16, 4, 4}};

/// The kernels' CUDA source for `shapes` (compiled on first use; CI compiles it).
std::string gemv_source(const std::vector<GemvShape>& shapes);
/// The source of the module Gemv loads: the default shape's kernels alone, or with
/// `every_shape` those of every shape the search tries.
std::string gemv_module_source(bool every_shape);

/// The most matrices one launch multiplies the same row by (LUM_GV_MATS in the source).
constexpr size_t kGemvMatrices = 4;

/// One of several products of the same row: its W operand's view and data, its y, and
/// perhaps a residual added to y (N values of y's type).
struct GemvMatrix {
  ConcreteView view;
  const void* data;
  void* out;
  const void* residual = nullptr;
};

class Gemv {
 public:
  /// Searches new matrix shapes' kernel shapes with `searcher` (the executable's).
  Gemv(const Device& device, runtime::Searcher& searcher) : device_(device), searcher_(searcher) {}

  /// c[1, N] = a[1, K] b[K, N] for MatMul operand views a, b ([batch..., M, K, N], all
  /// batch dims 1, M = 1) over device buffers, a and c of `a_type`, b of `b_type`: both
  /// f32, f16 or bf16, or f32 a over f16 or bf16 b (a QMatMul's half-precision weights);
  /// when b is a matrix read along K with 16-byte aligned rows and a is contiguous.
  /// False otherwise: the caller uses the general product.
  /// With `residual`, c = a b + residual (N values of c's type).
  bool run(const ConcreteView& a, const void* a_data, DType a_type, const ConcreteView& b,
           const void* b_data, DType b_type, void* c_data, const void* residual = nullptr);
  /// The products of the same row `a` with up to kGemvMatrices matrices of `b_type` (a
  /// layer's query, key and value projections), as one launch that reads `a` once and
  /// keeps every SM busy across their rows. False, with nothing written, where `run`
  /// would refuse one of them.
  bool run_shared(const ConcreteView& a, const void* a_data, DType a_type,
                  const std::vector<GemvMatrix>& bs, DType b_type);

 private:
  // The default shape's kernels, or every shape's (once a search needs them).
  const Module* module(bool every_shape);

  const Device& device_;
  runtime::Searcher& searcher_;
  std::unique_ptr<Module> default_shape_, every_shape_;  // loaded on first use
  // The kernel shape of each product seen (kGemvShapes' index) and its kernel, resolved
  // once (a decoding step launches it hundreds of times), by its operand types' kernel
  // name part, N, K and W's row stride.
  using ShapeKey = std::tuple<std::string_view, int64_t, int64_t, int64_t>;
  struct Chosen {
    size_t shape;
    const void* kernel;
  };
  std::map<ShapeKey, Chosen> shape_of_;
  std::vector<GemvMatrix> single_;  // run's one matrix, kept for its view's capacity
};

}  // namespace luminal::cudagen

// Products of f32 activations with weights kept in ggml's block formats (private to
// src/backends/cuda): Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K and Q6_K, decoded inside
// the kernels, never on the host.
// - One activation row over Q8_0, Q4_K, Q5_K or Q6_K weights (a decoding step's
//   products; Q4_K and Q6_K are llama.cpp's Q4_K_M mix), K a multiple of 256: the row is
//   quantised to int8 per 32 elements (as llama.cpp's activations, and as the CPU
//   backend's integer products), then multiplied in integer dot products (dp4a); the
//   kernel's shape (warps and weight rows a group) is searched per matrix shape.
// - Otherwise up to kQuantGemvRows activation rows: a block per four weight rows, its
//   threads over their 32-element sub-blocks, each sub-block of the activations (f32)
//   read once for the four rows. Past eight activation rows the kernel runs once per
//   eight.
// - More rows (a prompt): the weight rows are decoded into f16 in chunks of at most
//   kQuantChunkBytes, and cuBLASLt multiplies the activations, rounded to f16, by them with
//   f32 accumulation, as llama.cpp's CUDA backend does; the chunk bounds the scratch.
// Each format's source is compiled by NVRTC on first use.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include "backends/cuda/copy_view.hpp"
#include "backends/cuda/device.hpp"
#include "backends/cuda/gemm.hpp"
#include "backends/cuda/nvrtc.hpp"
#include "luminal/view.hpp"
#include "runtime/env.hpp"
#include "runtime/search.hpp"

namespace luminal::cudagen {

/// Activation rows at most that take the one-pass kernel (in launches of eight); its
/// weight rows and threads a block (kQRows and kQThreads in the source).
constexpr int64_t kQuantGemvRows = 64, kQuantGemvWeightRows = 4, kQuantGemvThreads = 128;
/// f16 bytes of decoded weight rows at most per product of the prompt path.
constexpr int64_t kQuantChunkBytes = int64_t{64} << 20;

/// A shape of the one-row integer kernel: warps a group of weight rows (over their
/// pieces), weight rows a group.
struct QDotShape {
  int split = 4, rows = 4;
  int64_t rows_a_block() const;
  /// The kernel of `family` ("lum_qdot", "lum_qdot_experts") in this shape.
  std::string kernel_name(const std::string& family = "lum_qdot") const;
};
/// The shapes the search tries for each new matrix shape; the first is the default (the
/// cost model's pick).
constexpr QDotShape kQDotShapes[] = {{4, 4}, {2, 4}, {1, 4}, {1, 2}, {4, 8}, {1, 8}};
/// The most matrices one launch of the integer kernels multiplies (LUM_Q_MATS).
constexpr size_t kQDotMatrices = 4;

/// Whether the kernels decode ggml type `format`.
bool quant_products_support(uint32_t format);

/// Whether one-row products over ggml type `format` (rows a whole number of 256
/// elements) run in the integer kernels: Q8_0, Q4_K, Q5_K and Q6_K.
bool integer_products_support(uint32_t format);

/// The kernels' CUDA source for `format` (CI compiles each for sm_90).
std::string quant_products_source(uint32_t format);

/// One of several products of the same activation row: a QMatMul's weight (format, view
/// and data) and its output.
struct QuantMatrix {
  uint32_t format;
  ConcreteView view;
  const void* data;
  void* out;
};

/// The longest activation row the integer kernels normalise in their quantisation
/// (lum_q8_row_norm: four values a thread of 1024, four times); longer ones are
/// normalised first, as several rows are.
constexpr int64_t kNormRowMost = 16384;

/// A NormQMatMul's norm: the activations are RMSNorm'd (x * rsqrt(mean(x^2) + eps) *
/// weight, the weight K contiguous f32 values on the device) before the product.
struct RowNorm {
  const float* weight;
  float eps;
};

/// The most stacks of experts one launch of the expert kernels multiplies (LUM_Q_MATS),
/// and a grid's most blocks along y (the (row, slot) pairs a launch takes).
constexpr size_t kExpertStacks = 4;
constexpr int64_t kMostGridY = 65535;
/// (Row, expert) pairs at most that count as a decoding step's for the expert kernels'
/// search (a prompt's many pairs may prefer another shape).
constexpr int64_t kExpertFewPairs = 64;

/// An ExpertMatMul's operands on the device (luminal/expert_matmul_op.hpp): `stacks`
/// stacks of `count` matrices of n rows of k, one matrix after another from each stack's
/// `weights`, its outputs at `column` of rows `width` wide; `rows` * `slots` expert ids
/// (i64 where `ids64`, else i32); x's rows are [rows, x_slots, k], x_slots 1 or `slots`.
struct ExpertStack {
  const void* weights;
  int64_t n, column;
};
struct Experts {
  std::array<ExpertStack, kExpertStacks> stack;
  size_t stacks;
  int64_t count, k, width;
  const void* ids;
  bool ids64;
  int64_t rows, slots, x_slots;
};

/// The prelude's LumStacks, as the expert kernels take it: each of `experts`' stacks, its
/// blocks of `rows_a_block` weight rows numbered after the stack before's. Returns the
/// blocks in all.
struct StackParams {
  const void* w[kExpertStacks];
  long long n[kExpertStacks], col[kExpertStacks], end[kExpertStacks];
};
int64_t stack_params(const Experts& experts, int64_t rows_a_block, StackParams& out);

class QuantProducts {
 public:
  /// Searches new matrix shapes' integer kernel shapes with `searcher` (the executable's).
  QuantProducts(const Device& device, runtime::Searcher& searcher, Gemm& gemm, ViewCopy& copy)
      : device_(device), searcher_(searcher), gemm_(gemm), copy_(copy) {}

  /// y[batch..., M, N] (f32, contiguous) = x W^T, where `x` is the QMatMul's
  /// [batch..., M, K, N] operand view over f32 device data and `w` the [N, K] weight's
  /// view over its blocks of a supported `format`, whole rows (K a whole number of
  /// blocks). False for any other format or layout, before anything is written (or, should
  /// cuBLASLt refuse a later chunk of a prompt, with y partly written: the caller's
  /// fallback then writes all of it).
  /// With `norm`, x is normalised first (NormQMatMul): in the activations' quantisation
  /// for one row in the integer kernels, else into a buffer the other paths read. With
  /// `residual` (QMatMulAdd: y's shape, f32, dense), y = x W^T + residual: added as the
  /// integer kernels store y, else after the product.
  bool run(uint32_t format, const ConcreteView& x, const void* x_data, const ConcreteView& w,
           const void* w_data, void* y, const RowNorm* norm = nullptr,
           const float* residual = nullptr);
  /// The products of one activation row `x` (the first product's operand view) with
  /// weights in the integer kernels' formats (a layer's query, key and value projections):
  /// x quantised once for all of them. False, with nothing written, where `x` is not one
  /// row or `run` would not take a weight into the integer kernels.
  bool run_shared(const ConcreteView& x, const void* x_data,
                  const std::vector<QuantMatrix>& weights, const RowNorm* norm = nullptr);
  /// out[row, slot, stack's columns] = W[ids[row, slot]] x[row, slot or 0] (f32) for
  /// each stack W of `experts`, all in a supported block `format`, x dense f32 rows
  /// 16-byte aligned, as one launch (per kMostGridY pairs): the integer kernels for one of
  /// their formats (x quantised first, once for all stacks), else the one-pass kernel,
  /// each (row, slot) reading its expert's matrices. False, launching nothing, for another
  /// format or rows that are not whole blocks.
  bool run_experts(uint32_t format, const Experts& experts, const float* x, int64_t x_rows,
                   void* y);

 private:
  const void* kernel(uint32_t format, const char* name);
  // Whether one-row products over `format` with rows of k run in the integer kernels.
  bool integer_products(uint32_t format, int64_t k) const;
  // The first of W's rows where `w` is an [N, K] view of whole rows of `format`'s blocks
  // (`row_bytes` apart), else nullptr.
  static const unsigned char* block_rows(uint32_t format, const ConcreteView& w, const void* w_data,
                                         int64_t& row_bytes);
  // The rows of the [batch..., M, K, N] view `x` (`rows` of them) as the one-pass kernels
  // read them: f32, dense, 16-byte aligned (packed where they are not); nullptr where
  // they cannot be packed.
  const float* dense_rows(const ConcreteView& x, const void* x_data, int64_t rows, int64_t k);
  // An activation row `x` (k floats, 16-byte aligned), normalised first where `norm` is
  // given, into `quantized_`: int8 per 32 elements, then the scales.
  void quantize_row(uint32_t format, const float* x, int64_t k, const RowNorm* norm);
  // `rows` dense rows of k at x normalised into `normed_`.
  const float* normalised(uint32_t format, const float* x, int64_t rows, int64_t k,
                          const RowNorm& norm);
  // A matrix of an integer product: its N rows of blocks (row_bytes apart), its output,
  // and perhaps a residual added to it.
  struct QDotMatrix {
    const unsigned char* rows;
    int64_t n, row_bytes;
    float* y;
    const float* residual = nullptr;
  };
  // y = x W^T for the row in `quantized_` and up to kQDotMatrices matrices of Q8_0, Q4_K,
  // Q5_K or Q6_K weights, all of `format` with rows of k: one launch.
  void integer_product(uint32_t format, int64_t k, std::span<const QDotMatrix> matrices);

  const Device& device_;
  runtime::Searcher& searcher_;
  Gemm& gemm_;
  ViewCopy& copy_;
  std::map<uint32_t, std::unique_ptr<Module>> modules_;  // by format
  DeviceBuffer rows_, decoded_, out_;  // packed activations, f16 weight rows, a chunk's output
  DeviceBuffer quantized_;             // an activation row in int8, then its scales
  DeviceBuffer normed_;                // NormQMatMul's normalised rows, for the float paths
  std::vector<QDotMatrix> shared_rows_;  // run_shared's, kept for their capacity
  // LUMINAL_CUDA_INT8_ACTIVATIONS=0: f32 activations throughout, to measure the difference.
  bool integer_products_ = !runtime::env_has("LUMINAL_CUDA_INT8_ACTIVATIONS", "0");
  // The integer kernel for each launch's matrices seen (its shape searched), by format,
  // K and the matrices' N, resolved once: a decoding step launches them hundreds of times.
  struct QDotChoice {
    const void* product;
    int64_t rows_a_block;
  };
  using QDotKey = std::tuple<uint32_t, int64_t, std::array<int64_t, kQDotMatrices>>;
  std::map<QDotKey, QDotChoice> choice_;
  // The same for the expert kernels, by format, K, the stacks' N and whether the (row,
  // expert) pairs are few (kExpertFewPairs).
  using ExpertKey = std::tuple<uint32_t, int64_t, std::array<int64_t, kExpertStacks>, bool>;
  std::map<ExpertKey, QDotChoice> expert_choice_;
  // The kernel of `family` (QDotShape::kernel_name) over `format` for a new key: the
  // search's pick among kQDotShapes under `signature`, each run by `launch` (the kernel,
  // its rows a block) and judged on the `count` f32 outputs at `out`; the first shape
  // with the search off.
  QDotChoice searched_shape(uint32_t format, const std::string& family, std::string signature,
                            const std::function<void(const void*, int64_t)>& launch,
                            const void* out, size_t count);
  // lum_q8_row and lum_q8_row_norm, by format (each source has them)
  std::map<std::pair<uint32_t, bool>, const void*> quantize_kernel_;
};

}  // namespace luminal::cudagen

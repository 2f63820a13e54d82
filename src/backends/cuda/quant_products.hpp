// Products of f32 activations with weights kept in ggml's block formats (private to
// src/backends/cuda): Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K and Q6_K, decoded inside
// the kernels, never on the host.
// - Up to kQuantGemvRows activation rows (decoding): a block per four weight rows, its
//   threads over their 32-element sub-blocks, each sub-block of the activations (f32)
//   read once for the four rows. Past eight activation rows the kernel runs once per
//   eight.
// - More rows (a prompt): the weight rows are decoded into f16 in chunks of at most
//   kQuantChunkBytes, and cuBLASLt multiplies the activations, rounded to f16, by them with
//   f32 accumulation, as llama.cpp's CUDA backend does; the chunk bounds the scratch.
// Each format's source is compiled by NVRTC on first use.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "backends/cuda/copy_view.hpp"
#include "backends/cuda/device.hpp"
#include "backends/cuda/gemm.hpp"
#include "backends/cuda/nvrtc.hpp"
#include "luminal/view.hpp"

namespace luminal::cudagen {

/// Activation rows at most that take the one-pass kernel (in launches of eight); its
/// weight rows and threads a block (kQRows and kQThreads in the source).
constexpr int64_t kQuantGemvRows = 64, kQuantGemvWeightRows = 4, kQuantGemvThreads = 128;
/// f16 bytes of decoded weight rows at most per product of the prompt path.
constexpr int64_t kQuantChunkBytes = int64_t{64} << 20;

/// Whether the kernels decode ggml type `format`.
bool quant_products_support(uint32_t format);

/// The kernels' CUDA source for `format` (CI compiles each for sm_90).
std::string quant_products_source(uint32_t format);

class QuantProducts {
 public:
  QuantProducts(const Device& device, Gemm& gemm, ViewCopy& copy)
      : device_(device), gemm_(gemm), copy_(copy) {}

  /// y[batch..., M, N] (f32, contiguous) = x W^T, where `x` is the QMatMul's
  /// [batch..., M, K, N] operand view over f32 device data and `w` the [N, K] weight's
  /// view over its blocks of a supported `format`, whole rows (K a whole number of
  /// blocks). False for any other format or layout, before anything is written (or, should
  /// cuBLASLt refuse a later chunk of a prompt, with y partly written: the caller's
  /// fallback then writes all of it).
  bool run(uint32_t format, const ConcreteView& x, const void* x_data, const ConcreteView& w,
           const void* w_data, void* y);

 private:
  const void* kernel(uint32_t format, const char* name);

  const Device& device_;
  Gemm& gemm_;
  ViewCopy& copy_;
  std::map<uint32_t, std::unique_ptr<Module>> modules_;  // by format
  DeviceBuffer rows_, decoded_, out_;  // packed activations, f16 weight rows, a chunk's output
};

}  // namespace luminal::cudagen

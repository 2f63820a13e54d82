// Attention's backward pass on tensor cores (compiler::AttentionGradOp; private to
// src/backends/cuda): the scores recomputed tile by tile, never stored.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "backends/cuda/attention.hpp"
#include "backends/cuda/device.hpp"
#include "backends/cuda/nvrtc.hpp"
#include "luminal/compiler/attention_op.hpp"
#include "luminal/view.hpp"

namespace luminal::cudagen {

/// What one compiled specialisation fixes: the operands' half type and head dims.
struct AttentionGradKernel {
  DType type = DType::BF16;
  int64_t d = 0, dv = 0;  // multiples of 16, at most 128
};

/// Whether the kernels take q, k, v and the output's gradient of type `t` and head dims d
/// and dv: f16 or bf16, multiples of 16 up to 128.
bool attention_grad_supports(DType t, int64_t d, int64_t dv);

/// The kernels' CUDA source (CI compiles some for sm_90).
std::string attention_grad_source(const AttentionGradKernel& spec);

class AttentionGrad {
 public:
  explicit AttentionGrad(const Device& device) : device_(device) {}

  /// One part of AttentionGradOp into `out`, over device buffers read through the op's
  /// views (`views`, `data`: q, k, v, mask, the output's gradient and, but for Stats, the
  /// Stats); where `computed` is given, the mask's view only names its dims. q, k, v and
  /// the output's gradient of one half type `type`. False, launching nothing, where the
  /// GPU has no sm_80 matrix instructions, a head dim is not a multiple of 16 up to 128, a
  /// view is padded, a head's rows are not read contiguously and 16-byte aligned, or
  /// there are more than four batch dims: the caller runs the op elsewhere.
  bool run(compiler::AttentionGradPart part, const std::vector<ConcreteView>& views,
           const std::vector<const void*>& data, DType type, const ComputedMask* computed,
           double scale, void* out);

 private:
  struct Compiled {
    std::unique_ptr<Module> module;
    const void* mask_tiles = nullptr;  // the pass over the mask's tiles
    const void* parts[3] = {};         // by AttentionGradPart
    size_t shared_bytes = 0;
  };
  // The module for `spec` and a computed mask (or none), compiled on first use.
  const Compiled& compiled(const AttentionGradKernel& spec, const ComputedMask* mask);

  const Device& device_;
  std::map<std::string, Compiled> kernels_;
  DeviceBuffer tiles_;  // the mask tiles' flags, kept while a CUDA graph may read them
};

}  // namespace luminal::cudagen

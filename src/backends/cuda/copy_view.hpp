// Copying a strided view of device memory into a dense array (private to
// src/backends/cuda): what a library kernel does with an operand it needs in order, such
// as the rows AppendRows adds when they are a permuted value (a prompt's keys, stored
// head-major, appended position-major), or f32 activations rounded to a half type for a
// half-precision product. Compiled by NVRTC on first use.
#pragma once

#include <memory>
#include <string>

#include "backends/cuda/device.hpp"
#include "backends/cuda/nvrtc.hpp"
#include "luminal/dtype.hpp"
#include "luminal/view.hpp"

namespace luminal::cudagen {

/// The kernels' CUDA source (CI compiles it for sm_90).
std::string copy_view_source();

class ViewCopy {
 public:
  explicit ViewCopy(const Device& device) : device_(device) {}

  /// Writes the elements `view` selects from `src` (elements of `element_bytes`: 1, 2, 4
  /// or 8) to `dst` in row-major order: one copy when the view is dense, else a kernel.
  /// False, copying nothing, for a padded view or one of more than eight dims.
  bool run(const ConcreteView& view, const void* src, size_t element_bytes, void* dst);
  /// The same from f32 elements, each rounded to `to` (f16 or bf16) on the way.
  bool run_rounded(const ConcreteView& view, const float* src, DType to, void* dst);

 private:
  bool launch(const ConcreteView& view, const void* src, void* dst, const char* kernel);

  const Device& device_;
  std::unique_ptr<Module> module_;  // loaded on first use
};

}  // namespace luminal::cudagen

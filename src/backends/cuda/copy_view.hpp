// Copying a strided view of device memory into a dense array (private to
// src/backends/cuda): what a library kernel does with an operand it needs in order, such
// as the rows AppendRows adds when they are a permuted value (a prompt's keys, stored
// head-major, appended position-major), or an operand converted between f32 and a half
// type for a product of mixed types. Compiled by NVRTC on first use.
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
  /// The same, converting each element from `from` to `to` on the way: f32 to f16 or
  /// bf16 (rounded to nearest even), or back (exactly).
  bool run_converted(const ConcreteView& view, const void* src, DType from, DType to, void* dst);
  /// dst[z][c][r] = src[z][r][c] for `batches` [rows, cols] matrices of 2-byte elements.
  void transpose(const void* src, int64_t batches, int64_t rows, int64_t cols, void* dst);
  /// y[i] += r[i] for n f32 values: a product's residual, on its paths whose kernels do not
  /// add it as they store.
  void add(float* y, const float* r, int64_t n);

 private:
  bool launch(const ConcreteView& view, const void* src, void* dst, const char* kernel);

  const Device& device_;
  std::unique_ptr<Module> module_;  // loaded on first use
};

/// `view` with its broadcast dims (stride 0) of size 1: each element it selects once, as
/// a copy of it holds them.
ConcreteView unbroadcast(const ConcreteView& view);
/// unbroadcast(view).is_dense(), without the copy.
bool unbroadcast_is_dense(const ConcreteView& view);
/// `view`'s dims read from a row-major copy of unbroadcast(view): broadcast dims keep
/// stride 0.
ConcreteView packed(const ConcreteView& view);

}  // namespace luminal::cudagen

// An output compared with a reference kept on the device (private to src/backends/cuda):
// how a search judges its candidates (DeviceTrials, the program search through
// DeviceData::kept_for_comparison) without reading whole outputs back.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <memory>
#include <string>

#include "backends/cuda/device.hpp"
#include "backends/cuda/nvrtc.hpp"
#include "luminal/dtype.hpp"

namespace luminal::cudagen {

/// The kernels comparing outputs on the device (a library source: compiled beside a
/// program's kernels where the search is on).
std::string comparison_source();

/// Whether outputs of `type` are compared on the device (f32, f16, bf16; others on the
/// host, where they are exact anyway).
bool compared_on_device(DType type);

/// A copy of `numel` elements of `type`, kept on the current device as the reference
/// later values are compared with, each within `tolerance` times the copy's largest
/// finite magnitude: runtime::output_mismatch's rule and words (NaN matching NaN, an
/// infinity the same one). Its work is queued on the stream each call is given.
class KeptOutput {
 public:
  /// Copies the elements at `values` (device memory); raises luminal::Error where the
  /// device has no room for the copy.
  KeptOutput(const void* values, DType type, size_t numel, double tolerance, cudaStream_t stream);
  KeptOutput(const KeptOutput&) = delete;
  KeptOutput& operator=(const KeptOutput&) = delete;

  /// Why the `numel` elements at `got` stray from the copy ("" where none does): the
  /// first wrong one, read back alone. Waits for `stream`.
  std::string mismatch(const void* got, cudaStream_t stream) const;

 private:
  void launch(const char* kernel, void** args, cudaStream_t stream) const;

  DType type_;
  size_t numel_;
  double tolerance_;
  int multiprocessors_ = 1;
  DeviceBuffer copy_;      // the elements, then the scale and the first wrong index
  void* scale_ = nullptr;  // a double's bits
  std::unique_ptr<Module> module_;
};

}  // namespace luminal::cudagen

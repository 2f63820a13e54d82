// The CUDA backend: renders the planned kernels as CUDA C++, compiles them with NVRTC
// for the device's architecture (cached on disk beside the CPU kernels), runs products
// through cuBLASLt, and keeps every value in device memory between kernels. Changing a
// bound symbolic dimension does not recompile: dims are kernel arguments.
#pragma once

#include <string>

#include "luminal/backend.hpp"

namespace luminal {

struct CudaOptions {
  /// Fuse elementwise chains into their consumers (off: one kernel per op).
  bool fuse = true;
  /// Which GPU, as CUDA numbers them.
  int device = 0;
};

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(CudaOptions options = {}) : options_(options) {}
  std::string name() const override { return "cuda"; }
  /// Raises luminal::Error naming what is missing where no usable GPU exists (a build
  /// without CUDA, no driver, a driver too old, no device).
  std::unique_ptr<Executable> compile(const Graph& graph) const override;

 private:
  CudaOptions options_;
};

/// `cx.compile(luminal::cuda())`
inline CudaBackend cuda(CudaOptions options = {}) {
  return CudaBackend(options);
}

/// Whether `cuda()` can run here; if not, why not (the message compile() would raise).
bool cuda_available(std::string* why = nullptr);

}  // namespace luminal

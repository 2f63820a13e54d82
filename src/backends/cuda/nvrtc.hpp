// Run-time compilation of CUDA C++ with NVRTC, cached on disk, and loading the result
// (private to src/backends/cuda). Compiling needs no GPU, so CI compiles every kernel
// the backend generates even where none can run.
#pragma once

#include <cuda_runtime_api.h>

#include <memory>
#include <string>

namespace luminal::cudagen {

struct Cubin {
  std::string code;  // the machine code for one architecture
  bool cache_hit = false;
  double compile_seconds = 0;
};

/// Compiles `source` for `arch` ("sm_90"), or finds it in the kernel cache (key: source,
/// arch, NVRTC's version and options). A compile error keeps the source on disk and
/// raises luminal::Error naming it, with NVRTC's log.
Cubin compile_cubin(const std::string& source, const std::string& arch);

/// "13.0": the NVRTC this build links.
std::string nvrtc_version();

/// Compiled kernels loaded onto the current device; unloaded on destruction.
class Module {
 public:
  explicit Module(const std::string& cubin);
  ~Module();
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;
  /// The kernel named `name`, to pass to cudaLaunchKernel.
  const void* kernel(const std::string& name) const;

 private:
  cudaLibrary_t library_ = nullptr;
};

}  // namespace luminal::cudagen

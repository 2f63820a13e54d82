// Run-time compilation of CUDA C++ with NVRTC, cached on disk, and loading the result
// (private to src/backends/cuda). Compiling needs no GPU, so CI compiles every kernel
// the backend generates even where none can run.
#pragma once

#include <cuda_runtime_api.h>

#include <future>
#include <memory>
#include <string>
#include <vector>

namespace luminal::cudagen {

struct Cubin {
  std::string code;  // the machine code for one architecture
  bool cache_hit = false;
  double compile_seconds = 0;
};

/// Compiles `source` for `arch` ("sm_90"), or finds it in the kernel cache (key: source,
/// arch, NVRTC's version and options). A compile error keeps the source on disk and
/// raises luminal::Error naming it, with NVRTC's log.
/// A compile of the same source already under way on another thread is waited for, not
/// started again.
Cubin compile_cubin(const std::string& source, const std::string& arch);

/// Starts compile_cubin of each of `sources` on a thread of its own and returns at once:
/// the library kernels a program will load at its first run compile beside its generated
/// kernels (NVRTC takes seconds a module and one core each), and the first run finds
/// them in the kernel cache or waits for their compile. An error is left for the
/// compile_cubin that needs the module to raise. The tasks are waited for when destroyed.
std::vector<std::future<void>> compile_in_background(std::vector<std::string> sources,
                                                     const std::string& arch);

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

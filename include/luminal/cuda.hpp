// The CUDA backend: renders the planned kernels as CUDA C++, compiles them with NVRTC
// for the device's architecture (cached on disk beside the CPU kernels), runs products
// through cuBLASLt, and keeps every value in device memory between kernels. Changing a
// bound symbolic dimension does not recompile: dims are kernel arguments.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "luminal/backend.hpp"
#include "luminal/collective.hpp"
#include "luminal/device_data.hpp"

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
  bool device_memory() const override { return true; }

 private:
  CudaOptions options_;
};

/// `cx.compile(luminal::cuda())`
inline CudaBackend cuda(CudaOptions options = {}) {
  return CudaBackend(options);
}

/// The reference interpreter running the program `cuda()` compiles a graph to: the CUDA
/// backend's e-graph rules and passes (fused products and attention, window products,
/// storage and attention output orders) without its kernels, each kernel by its reference
/// semantics. It needs no GPU: what the CUDA backend's rewrites compute can be checked
/// where none is at hand (CI runs PyTorch models through it). Slow, as the interpreter.
class CudaProgramReference final : public Backend {
 public:
  std::string name() const override { return "cuda_program_reference"; }
  std::unique_ptr<Executable> compile(const Graph& graph) const override;
};

/// `cx.compile(luminal::cuda_program_reference())`
inline CudaProgramReference cuda_program_reference() {
  return {};
}

/// Whether `cuda()` can run here on GPU `device`; if not, why not (the message compile()
/// would raise).
bool cuda_available(std::string* why = nullptr, int device = 0);

/// The most GPU memory luminal held at once in this process, over all devices: weights,
/// buffer arenas, KV caches and scratch (not the CUDA context's own). 0 without CUDA.
size_t cuda_peak_memory_bytes();

/// A copy of host data in GPU `device`'s memory, to set as an input (Tensor::set_device).
DeviceData to_cuda(const Buffer& host, int device = 0);

/// GPU memory the caller owns (another library's tensor), used where it lies: `ptr`
/// holds `numel` elements of `dtype` on GPU `device`, and `owner` is kept alive while
/// luminal holds the data. Runs read it on the executable's stream: the caller makes
/// sure it is written before execute().
DeviceData cuda_borrow(void* ptr, DType dtype, size_t numel, std::shared_ptr<void> owner = {},
                       int device = 0);

/// A new id for one group of NCCL ranks (hex): made once, by any one process, and given to
/// every rank (the process that made it stays alive while the ranks join).
std::string nccl_unique_id();

/// Rank `rank` of the `size` processes that share `id` (nccl_unique_id), on GPU `device`:
/// all_reduce nodes of a graph compiled for that GPU sum there, through NCCL. Blocks until
/// every rank has joined. Raises luminal::Error where NCCL is missing or the id malformed.
std::shared_ptr<Communicator> nccl_communicator(const std::string& id, int rank, int size,
                                                int device);

}  // namespace luminal

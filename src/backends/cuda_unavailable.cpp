// luminal::cuda() in a build without the CUDA toolkit (-DLUMINAL_CUDA=OFF, or none found).
#include "luminal/cuda.hpp"
#include "luminal/error.hpp"

namespace luminal {

namespace {
constexpr const char* kWhy =
    "this build of luminal has no CUDA backend (configure with the CUDA toolkit installed and "
    "-DLUMINAL_CUDA=ON)";
}

bool cuda_available(std::string* why, int) {
  if (why) *why = kWhy;
  return false;
}

size_t cuda_peak_memory_bytes() {
  return 0;
}

std::unique_ptr<Executable> CudaBackend::compile(const Graph&) const {
  LUM_FAIL() << "the CUDA backend cannot run: " << kWhy;
}

std::unique_ptr<Executable> CudaProgramReference::compile(const Graph&) const {
  LUM_FAIL() << "the CUDA backend's program cannot be made: " << kWhy;
}

DeviceData to_cuda(const Buffer&, int) {
  LUM_FAIL() << "to_cuda: " << kWhy;
}

DeviceData cuda_borrow(void*, DType, size_t, std::shared_ptr<void>, int) {
  LUM_FAIL() << "cuda_borrow: " << kWhy;
}

std::string nccl_unique_id() {
  LUM_FAIL() << "NCCL: " << kWhy;
}

std::shared_ptr<Communicator> nccl_communicator(const std::string&, int, int, int) {
  LUM_FAIL() << "NCCL: " << kWhy;
}

}  // namespace luminal

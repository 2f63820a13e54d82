#include "backends/cuda/device_storage.hpp"

#include "luminal/cuda.hpp"
#include "luminal/error.hpp"

namespace luminal {
namespace cudagen {

CudaStorage::CudaStorage(DeviceBuffer owned, int device)
    : owned_(std::move(owned)), ptr_(owned_.data()), bytes_(owned_.bytes()), device_(device) {}

CudaStorage::CudaStorage(void* ptr, size_t bytes, int device, std::shared_ptr<void> owner)
    : ptr_(ptr), bytes_(bytes), device_(device), lender_(std::move(owner)) {}

void CudaStorage::copy_to_host(void* dst, size_t bytes) const {
  LUM_CHECK(bytes <= bytes_) << "internal: copying " << bytes << " bytes from " << bytes_;
  check(cudaSetDevice(device_), "cudaSetDevice");
  check(cudaMemcpy(dst, ptr_, bytes, cudaMemcpyDeviceToHost), "copying device data to the host");
}

DeviceBuffer CudaStorage::release() {
  ptr_ = nullptr, bytes_ = 0;
  return std::move(owned_);
}

}  // namespace cudagen

DeviceData to_cuda(const Buffer& host, int device) {
  const std::string why = cudagen::why_unavailable(device);
  LUM_CHECK(why.empty()) << "to_cuda: " << why;
  cudagen::check(cudaSetDevice(device), "cudaSetDevice");
  cudagen::DeviceBuffer b(host.bytes());
  if (host.bytes())
    cudagen::check(cudaMemcpy(b.data(), host.data(), host.bytes(), cudaMemcpyHostToDevice),
                   "copying to the GPU");
  return DeviceData(std::make_shared<cudagen::CudaStorage>(std::move(b), device), host.dtype(),
                    host.numel());
}

DeviceData cuda_borrow(void* ptr, DType dtype, size_t numel, std::shared_ptr<void> owner,
                       int device) {
  LUM_CHECK(ptr || numel == 0) << "cuda_borrow: a null pointer for " << numel << " elements";
  return DeviceData(std::make_shared<cudagen::CudaStorage>(ptr, numel * dtype_size(dtype), device,
                                                           std::move(owner)),
                    dtype, numel);
}

}  // namespace luminal

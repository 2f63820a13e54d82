#include "backends/cuda/device_storage.hpp"

#include <algorithm>
#include <optional>

#include "backends/cuda/kept_output.hpp"
#include "luminal/cuda.hpp"
#include "luminal/error.hpp"

namespace luminal {
namespace cudagen {
namespace {

class CudaComparison final : public DeviceComparison {
 public:
  CudaComparison(const CudaStorage& values, DType type, size_t numel, double tolerance)
      : device_(values.device()), type_(type), numel_(numel) {
    values.order_before(nullptr);
    kept_.emplace(values.data(), type, numel, tolerance, nullptr);
  }

  std::string mismatch(const DeviceData& got) const override {
    const auto* storage = dynamic_cast<const CudaStorage*>(got.storage().get());
    LUM_CHECK(storage && storage->device() == device_)
        << "internal: comparing values on GPU " << device_ << " with values elsewhere";
    if (got.dtype() != type_ || got.numel() != numel_)
      return std::to_string(got.numel()) + " " + std::string(dtype_name(got.dtype())) +
             " elements against " + std::to_string(numel_) + " " + std::string(dtype_name(type_));
    check(cudaSetDevice(device_), "cudaSetDevice");
    storage->order_before(nullptr);
    return kept_->mismatch(got.data(), nullptr);
  }

 private:
  int device_;
  DType type_;
  size_t numel_;
  std::optional<KeptOutput> kept_;
};

}  // namespace

DeviceBuffer SpareBuffers::take(size_t bytes) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    const auto it = std::find_if(spare_.begin(), spare_.end(),
                                 [&](const DeviceBuffer& b) { return b.bytes() == bytes; });
    if (it != spare_.end()) {
      DeviceBuffer out = std::move(*it);
      spare_.erase(it);
      return out;
    }
  }
  return DeviceBuffer(bytes);
}

void SpareBuffers::give(DeviceBuffer b) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (spare_.size() < kKept) spare_.push_back(std::move(b));
}

CudaStorage::CudaStorage(DeviceBuffer owned, int device, std::shared_ptr<SpareBuffers> spares)
    : owned_(std::move(owned)),
      ptr_(owned_.data()),
      bytes_(owned_.bytes()),
      device_(device),
      spares_(std::move(spares)) {}

CudaStorage::~CudaStorage() {
  if (spares_ && owned_.data()) spares_->give(std::move(owned_));
}

CudaStorage::CudaStorage(void* ptr, size_t bytes, int device, std::shared_ptr<void> owner)
    : ptr_(ptr), bytes_(bytes), device_(device), lender_(std::move(owner)) {}

void CudaStorage::copy_to_host(void* dst, size_t bytes) const {
  LUM_CHECK(bytes <= bytes_) << "internal: copying " << bytes << " bytes from " << bytes_;
  check(cudaSetDevice(device_), "cudaSetDevice");
  // (The copy is on the default stream, which does not wait for the executable's.)
  if (written_by_) check(cudaEventSynchronize(written_by_->get()), "a CUDA kernel failed");
  check(cudaMemcpy(dst, ptr_, bytes, cudaMemcpyDeviceToHost), "copying device data to the host");
}

std::unique_ptr<DeviceComparison> CudaStorage::kept_for_comparison(DType dtype, size_t numel,
                                                                   double tolerance) const {
  LUM_CHECK(numel * dtype_size(dtype) <= bytes_)
      << "internal: keeping " << numel << " elements of " << bytes_ << " bytes";
  if (!compared_on_device(dtype)) return nullptr;
  check(cudaSetDevice(device_), "cudaSetDevice");
  try {
    return std::make_unique<CudaComparison>(*this, dtype, numel, tolerance);
  } catch (const Error&) {  // no room for the copy
    return nullptr;
  }
}

void CudaStorage::order_before(cudaStream_t reader) const {
  if (written_by_ && writer_ != reader)
    check(cudaStreamWaitEvent(reader, written_by_->get(), 0), "cudaStreamWaitEvent");
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
    cudagen::copy_to_device(b.data(), host.data(), host.bytes(), "copying to the GPU");
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

// DeviceStorage for the CUDA backend (private to src/backends/cuda): memory it allocated
// (an output left on the GPU, luminal::to_cuda's copies) or memory the caller lends
// (luminal::cuda_borrow).
#pragma once

#include <memory>

#include "backends/cuda/device.hpp"
#include "luminal/device_data.hpp"

namespace luminal::cudagen {

class CudaStorage final : public DeviceStorage {
 public:
  CudaStorage(DeviceBuffer owned, int device);
  CudaStorage(void* ptr, size_t bytes, int device, std::shared_ptr<void> owner);

  void* data() const override { return ptr_; }
  size_t capacity() const override { return bytes_; }
  int device() const override { return device_; }
  void copy_to_host(void* dst, size_t bytes) const override;

  /// Whether the memory is luminal's own (so a run may grow it in place).
  bool owned() const { return owned_.data() != nullptr; }
  /// The owned memory, moved out; the storage is empty after.
  DeviceBuffer release();

 private:
  DeviceBuffer owned_;
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
  int device_ = 0;
  std::shared_ptr<void> lender_;  // kept alive while borrowed memory is used
};

}  // namespace luminal::cudagen

// DeviceStorage for the CUDA backend (private to src/backends/cuda): memory it allocated
// (an output left on the GPU, luminal::to_cuda's copies) or memory the caller lends
// (luminal::cuda_borrow).
#pragma once

#include <memory>
#include <mutex>
#include <vector>

#include "backends/cuda/device.hpp"
#include "luminal/device_data.hpp"

namespace luminal::cudagen {

/// Buffers of outputs handed over (kept on the device) that come back when their holder
/// lets go of them, for a later run's outputs of the same size: a value handed over every
/// step (a decoding step's logits) then costs no cudaMalloc and no cudaFree (which waits
/// for the device) a step.
class SpareBuffers {
 public:
  /// A buffer of exactly `bytes`: a spare one, else a new one.
  DeviceBuffer take(size_t bytes);
  /// Keeps `b` for take (a few at most; past those it is freed). Without waiting for the
  /// device, unlike cudaFree: the executable queues all its work on its one stream, so
  /// what it queued before reading `b` runs before whatever it queues after taking it
  /// back. (A holder that read it on a stream of its own must have waited for that.)
  void give(DeviceBuffer b);

 private:
  static constexpr size_t kKept = 4;
  std::mutex mutex_;
  std::vector<DeviceBuffer> spare_;
};

class CudaStorage final : public DeviceStorage {
 public:
  /// `spares`: where the memory goes when the storage is destroyed (else it is freed).
  CudaStorage(DeviceBuffer owned, int device, std::shared_ptr<SpareBuffers> spares = nullptr);
  ~CudaStorage() override;
  CudaStorage(void* ptr, size_t bytes, int device, std::shared_ptr<void> owner);

  void* data() const override { return ptr_; }
  size_t capacity() const override { return bytes_; }
  int device() const override { return device_; }
  void copy_to_host(void* dst, size_t bytes) const override;
  /// Float values copied aside (KeptOutput) and compared on the default stream, after
  /// the writes of both.
  std::unique_ptr<DeviceComparison> kept_for_comparison(DType dtype, size_t numel,
                                                        double tolerance) const override;
  /// Host reads wait for `event`, recorded on `stream`: the end of the run that writes
  /// this memory, which may still be queued (Executable::queue).
  void written_by(std::shared_ptr<Event> event, cudaStream_t stream) {
    written_by_ = std::move(event), writer_ = stream;
  }
  /// Makes work queued next on `reader` wait for those writes where another stream
  /// queued them (on the writer's own stream they come first anyway).
  void order_before(cudaStream_t reader) const;

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
  std::shared_ptr<SpareBuffers> spares_;
  std::shared_ptr<Event> written_by_;
  cudaStream_t writer_ = nullptr;
};

}  // namespace luminal::cudagen

// DeviceData: a node's data in a GPU's memory. A GPU backend reads an input set this way
// where it lies, with no copy (a tensor another library computed, a KV cache the last
// run left on the GPU), and leaves an output marked with Graph::keep_on_device there
// instead of copying it back. Host backends refuse it with an error naming the input.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "luminal/buffer.hpp"
#include "luminal/dtype.hpp"

namespace luminal {

class DeviceData;

/// Values of one output copied aside on their device, to compare that output's later
/// values with there: a search judging whole programs then reads back a verdict, not a
/// language model's logits for every candidate.
class DeviceComparison {
 public:
  virtual ~DeviceComparison() = default;
  /// Why `got` strays from the copy, "" where it does not, by runtime::output_mismatch's
  /// rule and in its words: each element within the tolerance times the copy's largest
  /// finite magnitude, NaN only where the copy has NaN, an infinity only where it has the
  /// same one.
  virtual std::string mismatch(const DeviceData& got) const = 0;
};

/// The memory behind DeviceData: owned by a backend, or borrowed from the caller.
/// Implemented by GPU backends (luminal::to_cuda, luminal::cuda_borrow).
class DeviceStorage {
 public:
  virtual ~DeviceStorage() = default;
  virtual void* data() const = 0;
  /// Bytes usable from data(): at least the data's, more where a backend left room to
  /// grow in place (a KV cache appended to every step).
  virtual size_t capacity() const = 0;
  virtual int device() const = 0;
  /// Copies the first `bytes` to host memory at `dst`, waiting for the copy.
  virtual void copy_to_host(void* dst, size_t bytes) const = 0;
  /// A copy of the first `numel` elements of `dtype` kept on the device to compare later
  /// values with (DeviceComparison), each within `tolerance` of them relatively; nullptr
  /// where the backend does not compare there (that type, no room for the copy): the
  /// caller then compares on the host.
  virtual std::unique_ptr<DeviceComparison> kept_for_comparison(DType dtype, size_t numel,
                                                                double tolerance) const {
    (void)dtype, (void)numel, (void)tolerance;
    return nullptr;
  }
};

class DeviceData {
 public:
  DeviceData(std::shared_ptr<DeviceStorage> storage, DType dtype, size_t numel);

  DType dtype() const { return dtype_; }
  size_t numel() const { return numel_; }
  size_t bytes() const { return numel_ * dtype_size(dtype_); }
  void* data() const { return storage_->data(); }
  int device() const { return storage_->device(); }
  const std::shared_ptr<DeviceStorage>& storage() const { return storage_; }
  /// A host copy.
  Buffer to_host() const;
  /// These values kept on the device to compare later ones with (DeviceStorage::
  /// kept_for_comparison), or nullptr.
  std::unique_ptr<DeviceComparison> kept_for_comparison(double tolerance) const {
    return storage_->kept_for_comparison(dtype_, numel_, tolerance);
  }

 private:
  std::shared_ptr<DeviceStorage> storage_;
  DType dtype_;
  size_t numel_;
};

}  // namespace luminal

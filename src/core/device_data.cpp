#include "luminal/device_data.hpp"

#include "luminal/error.hpp"

namespace luminal {

DeviceData::DeviceData(std::shared_ptr<DeviceStorage> storage, DType dtype, size_t numel)
    : storage_(std::move(storage)), dtype_(dtype), numel_(numel) {
  LUM_CHECK(storage_) << "device data without storage";
  LUM_CHECK(bytes() <= storage_->capacity())
      << "device data of " << numel << " " << dtype_name(dtype) << " elements (" << bytes()
      << " bytes) does not fit its storage of " << storage_->capacity() << " bytes";
}

Buffer DeviceData::to_host() const {
  Buffer b(dtype_, numel_, Buffer::Uninitialized{});
  if (numel_) storage_->copy_to_host(b.data(), bytes());
  return b;
}

}  // namespace luminal

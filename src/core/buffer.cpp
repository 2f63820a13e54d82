// Host buffers and dtype conversions element by element.
#include "luminal/buffer.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <new>

namespace luminal {
namespace {

constexpr std::align_val_t kAlign{64};

std::byte* allocate(size_t bytes, bool zero = true) {
  auto* p = static_cast<std::byte*>(::operator new(std::max<size_t>(bytes, 1), kAlign));
  if (zero) std::memset(p, 0, bytes);
  return p;
}

template <class I>
I float_to_int(double v) {
  if (std::isnan(v)) return 0;
  const double t = std::trunc(v);
  if (t <= static_cast<double>(std::numeric_limits<I>::min())) return std::numeric_limits<I>::min();
  if (t >= static_cast<double>(std::numeric_limits<I>::max())) return std::numeric_limits<I>::max();
  return static_cast<I>(t);
}

}  // namespace

void Buffer::Free::operator()(std::byte* p) const {
  ::operator delete(p, kAlign);
}

Buffer::Buffer(DType dtype, size_t numel)
    : dtype_(dtype),
      numel_(numel),
      capacity_(numel),
      data_(allocate(numel * dtype_size(dtype))) {}

Buffer::Buffer(DType dtype, size_t numel, Uninitialized)
    : dtype_(dtype),
      numel_(numel),
      capacity_(numel),
      data_(allocate(numel * dtype_size(dtype), false)) {}

Buffer::Buffer(const Buffer& other)
    : dtype_(other.dtype_),
      numel_(other.numel_),
      capacity_(other.numel_),
      data_(allocate(other.bytes(), false)) {
  if (other.bytes()) std::memcpy(data_.get(), other.data_.get(), other.bytes());
}

Buffer Buffer::into_bytes() && {
  Buffer out;
  out.dtype_ = DType::U8;
  out.numel_ = bytes();
  out.capacity_ = capacity_ * dtype_size(dtype_);
  out.data_ = std::move(data_);
  numel_ = capacity_ = 0;
  return out;
}

void Buffer::resize(size_t numel) {
  if (!data_ || numel > capacity_) {
    const size_t capacity = data_ ? std::max(numel, capacity_ + capacity_ / 2) : numel;
    std::unique_ptr<std::byte[], Free> grown(allocate(capacity * dtype_size(dtype_), false));
    if (data_) std::memcpy(grown.get(), data_.get(), std::min(numel, numel_) * dtype_size(dtype_));
    data_ = std::move(grown);
    capacity_ = capacity;
  }
  numel_ = numel;
}

Buffer& Buffer::operator=(const Buffer& other) {
  if (this != &other) *this = Buffer(other);
  return *this;
}

Buffer Buffer::from_doubles(const std::vector<double>& values, DType dtype) {
  Buffer b(dtype, values.size());
  for (size_t i = 0; i < values.size(); ++i) b.set_f64(i, values[i]);
  return b;
}

void Buffer::check_type(DType t) const {
  LUM_CHECK(t == dtype_) << "buffer holds " << dtype_name(dtype_) << ", accessed as "
                         << dtype_name(t);
}

double Buffer::get_f64(size_t i) const {
  const std::byte* p = data_.get();
  switch (dtype_) {
    case DType::F32:
      return reinterpret_cast<const float*>(p)[i];
    case DType::F16:
      return f16_bits_to_float(reinterpret_cast<const uint16_t*>(p)[i]);
    case DType::BF16:
      return bf16_bits_to_float(reinterpret_cast<const uint16_t*>(p)[i]);
    case DType::F64:
      return reinterpret_cast<const double*>(p)[i];
    default:
      return static_cast<double>(get_i64(i));
  }
}

int64_t Buffer::get_i64(size_t i) const {
  const std::byte* p = data_.get();
  switch (dtype_) {
    case DType::I32:
      return reinterpret_cast<const int32_t*>(p)[i];
    case DType::I64:
      return reinterpret_cast<const int64_t*>(p)[i];
    case DType::I8:
      return reinterpret_cast<const int8_t*>(p)[i];
    case DType::U8:
      return reinterpret_cast<const uint8_t*>(p)[i];
    case DType::Bool:
      return reinterpret_cast<const uint8_t*>(p)[i] != 0;
    default:
      return float_to_int<int64_t>(get_f64(i));
  }
}

void Buffer::set_f64(size_t i, double v) {
  std::byte* p = data_.get();
  switch (dtype_) {
    case DType::F32:
      reinterpret_cast<float*>(p)[i] = static_cast<float>(v);
      return;
    case DType::F16:
      reinterpret_cast<uint16_t*>(p)[i] = f16_bits_from_double(v);
      return;
    case DType::BF16:
      reinterpret_cast<uint16_t*>(p)[i] = bf16_bits_from_double(v);
      return;
    case DType::F64:
      reinterpret_cast<double*>(p)[i] = v;
      return;
    case DType::I32:
      reinterpret_cast<int32_t*>(p)[i] = float_to_int<int32_t>(v);
      return;
    case DType::I64:
      reinterpret_cast<int64_t*>(p)[i] = float_to_int<int64_t>(v);
      return;
    case DType::I8:
      reinterpret_cast<int8_t*>(p)[i] = float_to_int<int8_t>(v);
      return;
    case DType::U8:
      reinterpret_cast<uint8_t*>(p)[i] = float_to_int<uint8_t>(v);
      return;
    case DType::Bool:
      reinterpret_cast<uint8_t*>(p)[i] = v != 0.0;
      return;
  }
}

void Buffer::set_i64(size_t i, int64_t v) {
  std::byte* p = data_.get();
  switch (dtype_) {
    case DType::I32:
      reinterpret_cast<int32_t*>(p)[i] = static_cast<int32_t>(v);
      return;
    case DType::I64:
      reinterpret_cast<int64_t*>(p)[i] = v;
      return;
    case DType::I8:
      reinterpret_cast<int8_t*>(p)[i] = static_cast<int8_t>(v);
      return;
    case DType::U8:
      reinterpret_cast<uint8_t*>(p)[i] = static_cast<uint8_t>(v);
      return;
    case DType::Bool:
      reinterpret_cast<uint8_t*>(p)[i] = v != 0;
      return;
    case DType::F32:
      reinterpret_cast<float*>(p)[i] = static_cast<float>(v);
      return;
    default:
      set_f64(i, static_cast<double>(v));
      return;
  }
}

std::vector<double> Buffer::to_f64() const {
  std::vector<double> out(numel_);
  for (size_t i = 0; i < numel_; ++i) out[i] = get_f64(i);
  return out;
}

std::vector<float> Buffer::to_f32() const {
  if (dtype_ == DType::F32) {
    const auto* p = reinterpret_cast<const float*>(data_.get());
    return std::vector<float>(p, p + numel_);
  }
  std::vector<float> out(numel_);
  for (size_t i = 0; i < numel_; ++i) out[i] = static_cast<float>(get_f64(i));
  return out;
}

std::vector<int64_t> Buffer::to_i64() const {
  std::vector<int64_t> out(numel_);
  for (size_t i = 0; i < numel_; ++i) out[i] = get_i64(i);
  return out;
}

}  // namespace luminal

// Host buffers and dtype conversions element by element.
#include "luminal/buffer.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <new>
#include <string>

#include "luminal/expr.hpp"

namespace luminal {
namespace {

constexpr std::align_val_t kAlign{64};

std::string shape_text(const std::vector<int64_t>& shape) {
  return to_string(std::vector<Expr>(shape.begin(), shape.end()));
}

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
    // Half as much again as asked for: a KV cache filled by a prompt then grows by a row
    // a step without moving (the pages past what is written are never touched).
    const size_t capacity = numel + numel / 2;
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
  // Typed loops, across threads where large: a search compares every candidate's output
  // this way (a language model's 131 M bf16 logits took half a second element by element).
  const auto widen = [&](auto element) {
#pragma omp parallel for schedule(static) if (numel_ >= (size_t{1} << 20))
    for (size_t i = 0; i < numel_; ++i) out[i] = element(i);
  };
  const auto* halves = reinterpret_cast<const uint16_t*>(data_.get());
  if (dtype_ == DType::BF16)
    widen([halves](size_t i) { return bf16_bits_to_float(halves[i]); });
  else if (dtype_ == DType::F16)
    widen([halves](size_t i) { return f16_bits_to_float(halves[i]); });
  else
    widen([this](size_t i) { return static_cast<float>(get_f64(i)); });
  return out;
}

std::vector<int64_t> Buffer::to_i64() const {
  std::vector<int64_t> out(numel_);
  for (size_t i = 0; i < numel_; ++i) out[i] = get_i64(i);
  return out;
}

Buffer take_part(const Buffer& whole, const std::vector<int64_t>& whole_shape, int dim, int rank,
                 int size) {
  const auto d = static_cast<size_t>(dim);
  LUM_CHECK(d < whole_shape.size() && size >= 1 && rank >= 0 && rank < size &&
            whole_shape[d] % size == 0)
      << "take_part: dimension " << dim << " of " << shape_text(whole_shape) << " in " << size
      << " parts";
  // The rank's part: run [rank * part, (rank + 1) * part) of dimension d, under every
  // index of the dimensions before it.
  size_t outer = 1, inner = dtype_size(whole.dtype());
  for (size_t i = 0; i < d; ++i) outer *= static_cast<size_t>(whole_shape[i]);
  for (size_t i = d + 1; i < whole_shape.size(); ++i) inner *= static_cast<size_t>(whole_shape[i]);
  const size_t part = static_cast<size_t>(whole_shape[d] / size) * inner;
  const auto ranks = static_cast<size_t>(size);
  LUM_CHECK(whole.bytes() == outer * part * ranks)
      << "take_part: " << whole.bytes() << " bytes are not a " << shape_text(whole_shape)
      << " tensor of " << dtype_name(whole.dtype());
  Buffer mine(whole.dtype(), whole.numel() / ranks, Buffer::Uninitialized{});
  const auto* src = static_cast<const std::byte*>(whole.data());
  auto* dst = static_cast<std::byte*>(mine.data());
  for (size_t o = 0; o < outer; ++o)
    std::memcpy(dst + o * part, src + (o * ranks + static_cast<size_t>(rank)) * part, part);
  return mine;
}

}  // namespace luminal

// Buffer: a host array of one dtype, 64-byte aligned, with converting accessors.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "luminal/dtype.hpp"
#include "luminal/error.hpp"

namespace luminal {

class Buffer {
 public:
  Buffer() = default;
  /// `numel` zero-initialised elements.
  Buffer(DType dtype, size_t numel);
  struct Uninitialized {};
  /// `numel` elements left unset, for outputs a kernel overwrites completely.
  Buffer(DType dtype, size_t numel, Uninitialized);
  Buffer(const Buffer& other);
  Buffer& operator=(const Buffer& other);
  Buffer(Buffer&&) noexcept = default;
  Buffer& operator=(Buffer&&) noexcept = default;

  /// Copies a typed host vector (the dtype follows T).
  template <class T>
  static Buffer from(const std::vector<T>& values) {
    Buffer b(dtype_of<T>::value, values.size());
    for (size_t i = 0; i < values.size(); ++i) b.span<T>()[i] = values[i];
    return b;
  }
  /// Converts numbers to `dtype` element by element (see set_f64).
  static Buffer from_doubles(const std::vector<double>& values, DType dtype);

  DType dtype() const { return dtype_; }
  size_t numel() const { return numel_; }
  /// Resizes to `numel` elements, keeping the first min(old, new) values; new ones are
  /// unset. Growth past the allocation reallocates to 1.5x the new size, so growing by a
  /// row at a time (a KV cache) moves the data O(log n) times rather than every time,
  /// and not at the first row after a jump (a prompt's rows).
  void resize(size_t numel);
  size_t bytes() const { return numel_ * dtype_size(dtype_); }
  /// The same memory as a U8 buffer of bytes() elements, without a copy; this buffer is
  /// left empty (block storage takes a half-precision matrix's bytes this way).
  Buffer into_bytes() &&;
  void* data() { return data_.get(); }
  const void* data() const { return data_.get(); }

  /// Typed access; T must match the dtype.
  template <class T>
  std::span<T> span() {
    check_type(dtype_of<T>::value);
    return {reinterpret_cast<T*>(data_.get()), numel_};
  }
  template <class T>
  std::span<const T> span() const {
    check_type(dtype_of<T>::value);
    return {reinterpret_cast<const T*>(data_.get()), numel_};
  }

  /// Element i as a double / int64 (bool as 0/1; floats to int truncate).
  double get_f64(size_t i) const;
  int64_t get_i64(size_t i) const;
  /// Stores a value, converting to the dtype: floats round to nearest even; to an
  /// integer type, a float truncates toward zero and saturates (NaN -> 0); integers
  /// wrap to the width; bool stores value != 0.
  void set_f64(size_t i, double v);
  void set_i64(size_t i, int64_t v);

  std::vector<double> to_f64() const;
  std::vector<float> to_f32() const;
  std::vector<int64_t> to_i64() const;

 private:
  struct Free {
    void operator()(std::byte* p) const;
  };
  void check_type(DType t) const;

  DType dtype_ = DType::F32;
  size_t numel_ = 0;
  size_t capacity_ = 0;  // elements allocated (numel_ on construction and copy)
  std::unique_ptr<std::byte[], Free> data_;
};

/// Rank `rank`'s part of `whole`, a row-major tensor of `whole_shape` whose dimension
/// `dim` is cut into `size` equal runs (dimension `dim` must divide by `size`): what a
/// tensor-parallel rank holds of a split tensor.
Buffer take_part(const Buffer& whole, const std::vector<int64_t>& whole_shape, int dim, int rank,
                 int size);

}  // namespace luminal

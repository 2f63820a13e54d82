// The CUDA runtime as the CUDA backend uses it (private to src/backends/cuda): checked
// calls, the device and its stream, and device memory owned by RAII handles.
#pragma once

#include <cuda_runtime_api.h>

#include <atomic>
#include <cstddef>
#include <functional>
#include <initializer_list>
#include <memory>
#include <span>
#include <string>

#include "backends/cuda/stream_recorder.hpp"

namespace luminal::cudagen {

/// Raises luminal::Error "<what>: <CUDA's message>" unless `e` is cudaSuccess.
void check(cudaError_t e, const char* what);

/// Copies `bytes` of host memory to the current device and returns once they are there.
/// (cudaMemcpy from pageable memory may return with its transfer still under way on the
/// default stream, which the executables' non-blocking streams do not wait for.)
void copy_to_device(void* dst, const void* src, size_t bytes, const char* what);

/// Holds a stream back where hold() queues it until release(), so that work queued
/// meanwhile runs as one piece, and events around it time the device's work alone, not
/// its waits for the host between kernels (a library's host work, a recording's). The
/// hold gives way by itself after 20 ms: something queued behind it that waits for the
/// stream (a synchronising call) is slowed, not deadlocked.
class StreamHold {
 public:
  StreamHold() = default;
  ~StreamHold() { release(); }
  StreamHold(const StreamHold&) = delete;
  StreamHold& operator=(const StreamHold&) = delete;
  void hold(cudaStream_t stream);
  void release() {
    if (released_) released_->store(true, std::memory_order_release);
  }

 private:
  // Shared with the host function holding the stream, which may outlive the handle.
  std::shared_ptr<std::atomic<bool>> released_;
};

/// The device a backend runs on, set current for the calling thread, with its own stream.
class Device {
 public:
  /// Raises luminal::Error naming what is missing: no driver, a too-old driver, no device.
  explicit Device(int ordinal);
  ~Device();
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  int ordinal() const { return ordinal_; }
  /// The stream, for work queued by hand (events, a wait, copies to or from the host): a
  /// recording in progress is queued first, and stops (StreamRecorder::flush).
  cudaStream_t stream() const;
  /// A library's call (cuBLASLt's, cuDNN's): `enqueue` queues it on the stream it is
  /// given, now or, where a recording is in progress, as StreamRecorder::library_call
  /// says (`key`: the call and all its arguments).
  void library_call(std::string key, std::function<void(cudaStream_t)> enqueue) const;
  /// Kernel `function` queued on the stream, or recorded where a recording is in progress
  /// (every kernel a run launches goes through here, and the two below). `args`: the
  /// address of each of its parameters' values, as many as it takes.
  cudaError_t launch(const void* function, dim3 grid, dim3 block, std::span<void* const> args,
                     size_t shared_bytes = 0) const;
  cudaError_t memset(void* dst, int value, size_t bytes) const;
  cudaError_t copy(void* dst, const void* src, size_t bytes) const;  // device to device
  /// A collective (StreamRecorder::collective): `enqueue` queues it.
  void collective(const void* which, std::span<const void* const> sources, void* dst, size_t bytes,
                  std::function<void(cudaStream_t)> enqueue) const;
  /// A collective beside the work after it (StreamRecorder::collective_beside; queued on
  /// the stream where nothing is being recorded).
  void collective_beside(std::function<void(cudaStream_t)> enqueue) const;
  /// From now on the stream's work is recorded, to be run as CUDA graphs.
  void begin_recording() const { recorder_->begin(stream_); }
  StreamRecorder& recorder() const { return *recorder_; }
  /// "sm_90" for an H100.
  const std::string& arch() const { return arch_; }
  /// 90 for an H100.
  int compute_capability() const { return compute_capability_; }
  int multiprocessors() const { return multiprocessors_; }
  /// Shared memory one block may take, its static arrays and the dynamic part together,
  /// once a kernel opts in past 48 KiB: 227 KiB on an H100, 163 KiB on an A100.
  size_t shared_bytes_a_block() const { return shared_bytes_a_block_; }
  /// "NVIDIA H100 80GB HBM3".
  const std::string& name() const { return name_; }
  /// Makes this device current on the calling thread.
  void make_current() const;
  /// Waits for the stream, raising any error a kernel hit (a hold given up first).
  void synchronize() const;
  /// Holds the stream back from the work queued next until release_stream() (see
  /// StreamHold): a new hold gives up the last.
  void hold_stream() const { hold_.hold(stream()); }
  void release_stream() const { hold_.release(); }
  /// Device memory free now, capped by LUMINAL_CUDA_MEMORY_LIMIT (bytes, or a number
  /// with K, M or G: binary units), which bounds what luminal may count on; a malformed
  /// value is an Error naming the variable.
  size_t free_bytes() const;
  /// The device's memory in all.
  size_t total_bytes() const;

 private:
  int ordinal_;
  cudaStream_t stream_ = nullptr;
  std::unique_ptr<StreamRecorder> recorder_;
  mutable StreamHold hold_;
  bool programmatic_ = false;  // launches (see launch_kernel)
  std::string arch_;
  int compute_capability_ = 0;
  int multiprocessors_ = 0;
  size_t shared_bytes_a_block_ = 0;
  std::string name_;
};

/// Why no device can be used, or "" when one can.
std::string why_unavailable(int ordinal);

/// `key` (a library call's, Device::library_call) followed by each address's bytes.
std::string with_addresses(std::string key, std::initializer_list<const void*> addresses);

/// The most device memory luminal's DeviceBuffers held at once in this process (weights,
/// arenas, caches and scratch; not the CUDA context's own).
size_t peak_device_bytes();

/// Device memory of a fixed size, freed on destruction.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(o.ptr_), bytes_(o.bytes_) {
    o.ptr_ = nullptr, o.bytes_ = 0;
  }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* data() const { return ptr_; }
  size_t bytes() const { return bytes_; }

 private:
  void release();
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

/// `buffer`'s memory, replaced first by `bytes` of new memory where it holds fewer (after
/// `device`'s queued work, which may still read the old).
void* grown(const Device& device, DeviceBuffer& buffer, size_t bytes);

/// Page-locked host memory, which the GPU copies to or from without waiting for the host
/// (cudaMemcpyAsync into pageable memory returns only once the copy is done).
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  explicit PinnedBuffer(size_t bytes);
  ~PinnedBuffer();
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  void* data() const { return ptr_; }

 private:
  void* ptr_ = nullptr;
};

/// A CUDA event for timing, destroyed with the handle.
class Event {
 public:
  Event();
  ~Event();
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  cudaEvent_t get() const { return event_; }

 private:
  cudaEvent_t event_ = nullptr;
};

}  // namespace luminal::cudagen

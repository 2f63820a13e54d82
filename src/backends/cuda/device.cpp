// Checked CUDA runtime calls, the device, its stream and device memory (see device.hpp).
#include "backends/cuda/device.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <string>

#include "backends/cuda/kernel_trace.hpp"
#include "luminal/error.hpp"
#include "runtime/env.hpp"

namespace luminal::cudagen {

void check(cudaError_t e, const char* what) {
  LUM_CHECK(e == cudaSuccess) << what << ": " << cudaGetErrorString(e) << " ("
                              << cudaGetErrorName(e) << ")";
}

void copy_to_device(void* dst, const void* src, size_t bytes, const char* what) {
  check(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice), what);
  check(cudaStreamSynchronize(nullptr), what);
}

std::string why_unavailable(int ordinal) {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e == cudaErrorInsufficientDriver) {
    int driver = 0, runtime = 0;
    cudaDriverGetVersion(&driver);
    cudaRuntimeGetVersion(&runtime);
    if (driver == 0) return "no NVIDIA driver is installed (libcuda.so.1 was not found)";
    return "the NVIDIA driver supports CUDA " + std::to_string(driver / 1000) + "." +
           std::to_string(driver % 1000 / 10) + " but luminal was built with CUDA " +
           std::to_string(runtime / 1000) + "." + std::to_string(runtime % 1000 / 10) +
           ": update the driver";
  }
  if (e == cudaErrorNoDevice || (e == cudaSuccess && count == 0)) return "no CUDA GPU was found";
  if (e != cudaSuccess)
    return std::string("the CUDA runtime cannot start: ") + cudaGetErrorString(e);
  if (ordinal < 0 || ordinal >= count)
    return "there is no CUDA device " + std::to_string(ordinal) + " (this machine has " +
           std::to_string(count) + ")";
  return "";
}

Device::Device(int ordinal) : ordinal_(ordinal) {
  const std::string why = why_unavailable(ordinal);
  LUM_CHECK(why.empty()) << "the CUDA backend cannot run: " << why;
  check(cudaSetDevice(ordinal), "cudaSetDevice");
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, ordinal), "cudaGetDeviceProperties");
  LUM_CHECK(prop.major >= 7) << "the CUDA backend needs a GPU of compute capability 7.0 or newer; "
                             << prop.name << " is " << prop.major << "." << prop.minor;
  compute_capability_ = prop.major * 10 + prop.minor;
  arch_ = "sm_" + std::to_string(compute_capability_);
  multiprocessors_ = prop.multiProcessorCount;
  shared_bytes_a_block_ = prop.sharedMemPerBlockOptin;
  name_ = prop.name;
  check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
  // Programmatic dependent launches need sm_90; LUMINAL_CUDA_PDL=0 turns them off, to
  // measure what they are worth.
  programmatic_ = compute_capability_ >= 90 && !runtime::env_has("LUMINAL_CUDA_PDL", "0");
  recorder_ = std::make_unique<StreamRecorder>(programmatic_);
}

Device::~Device() {
  recorder_.reset();  // (it may be capturing the stream)
  if (stream_) cudaStreamDestroy(stream_);
}

cudaStream_t Device::stream() const {
  recorder_->flush();
  return stream_;
}

std::string with_addresses(std::string key, std::initializer_list<const void*> addresses) {
  for (const void* at : addresses) key.append(reinterpret_cast<const char*>(&at), sizeof at);
  return key;
}

void Device::library_call(std::string key, std::function<void(cudaStream_t)> enqueue) const {
  if (recorder_->recording())
    recorder_->library_call(std::move(key), std::move(enqueue));
  else
    enqueue(stream_);
}

cudaError_t Device::launch(const void* function, dim3 grid, dim3 block, std::span<void* const> args,
                           size_t shared_bytes) const {
  if (tracing()) trace_launch(function);
  if (!recorder_->recording())
    return launch_kernel(function, grid, block, const_cast<void**>(args.data()), shared_bytes,
                         stream_, programmatic_);
  recorder_->kernel(function, grid, block, args, shared_bytes);
  return cudaSuccess;
}

cudaError_t Device::memset(void* dst, int value, size_t bytes) const {
  if (!recorder_->recording()) return cudaMemsetAsync(dst, value, bytes, stream_);
  recorder_->memset(dst, value, bytes);
  return cudaSuccess;
}

cudaError_t Device::copy(void* dst, const void* src, size_t bytes) const {
  if (!recorder_->recording())
    return cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_);
  recorder_->copy(dst, src, bytes);
  return cudaSuccess;
}

void Device::collective(const void* which, std::span<const void* const> sources, void* dst,
                        size_t bytes, std::function<void(cudaStream_t)> enqueue) const {
  if (recorder_->recording())
    recorder_->collective(which, sources, dst, bytes, std::move(enqueue));
  else
    enqueue(stream_);
}

void Device::collective_beside(std::function<void(cudaStream_t)> enqueue) const {
  if (recorder_->recording())
    recorder_->collective_beside(std::move(enqueue));
  else
    enqueue(stream_);
}

void Device::make_current() const {
  check(cudaSetDevice(ordinal_), "cudaSetDevice");
}

void Device::synchronize() const {
  release_stream();
  check(cudaStreamSynchronize(stream()), "a CUDA kernel failed");
}

namespace {

// LUMINAL_CUDA_MEMORY_LIMIT in bytes, or 0 where unset or empty.
size_t memory_limit() {
  const char* v = std::getenv("LUMINAL_CUDA_MEMORY_LIMIT");
  if (!v || !*v) return 0;
  char* end = nullptr;
  const double n = std::strtod(v, &end);
  const std::string unit = end;
  const double scale = unit.empty()  ? 1
                       : unit == "K" ? 1024.0
                       : unit == "M" ? 1024.0 * 1024
                       : unit == "G" ? 1024.0 * 1024 * 1024
                                     : 0;
  LUM_CHECK(end != v && n > 0 && scale > 0)
      << "LUMINAL_CUDA_MEMORY_LIMIT must be a positive number of bytes, optionally with K, M "
         "or G, got '"
      << v << "'";
  return static_cast<size_t>(n * scale);
}

}  // namespace

size_t Device::free_bytes() const {
  make_current();
  size_t free = 0, total = 0;
  check(cudaMemGetInfo(&free, &total), "cudaMemGetInfo");
  const size_t limit = memory_limit();
  return limit > 0 ? std::min(free, limit) : free;
}

size_t Device::total_bytes() const {
  make_current();
  size_t free = 0, total = 0;
  check(cudaMemGetInfo(&free, &total), "cudaMemGetInfo");
  return total;
}

namespace {

// luminal's device memory over all devices, now and at its peak (every allocation is a
// DeviceBuffer).
std::atomic<size_t> allocated_bytes{0}, peak_allocated_bytes{0};

void count_allocation(size_t bytes) {
  const size_t now = allocated_bytes += bytes;
  size_t peak = peak_allocated_bytes.load();
  while (now > peak && !peak_allocated_bytes.compare_exchange_weak(peak, now)) {
  }
}

}  // namespace

size_t peak_device_bytes() {
  return peak_allocated_bytes.load();
}

DeviceBuffer::DeviceBuffer(size_t bytes) : bytes_(bytes) {
  if (bytes == 0) return;
  const cudaError_t e = cudaMalloc(&ptr_, bytes);
  if (e != cudaSuccess) {
    cudaGetLastError();  // clear it: an allocation failure is not sticky
    LUM_FAIL() << "out of GPU memory allocating " << bytes << " bytes: " << cudaGetErrorString(e);
  }
  count_allocation(bytes);
}

void DeviceBuffer::release() {
  if (!ptr_) return;
  cudaFree(ptr_);
  allocated_bytes -= bytes_;
  ptr_ = nullptr, bytes_ = 0;
}

DeviceBuffer::~DeviceBuffer() {
  release();
}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    release();
    ptr_ = o.ptr_, bytes_ = o.bytes_;
    o.ptr_ = nullptr, o.bytes_ = 0;
  }
  return *this;
}

void* grown(const Device& device, DeviceBuffer& buffer, size_t bytes) {
  if (buffer.bytes() < bytes) {
    device.synchronize();
    buffer = DeviceBuffer(bytes);
  }
  return buffer.data();
}

PinnedBuffer::PinnedBuffer(size_t bytes) {
  if (bytes) check(cudaMallocHost(&ptr_, bytes), "allocating page-locked host memory");
}

PinnedBuffer::~PinnedBuffer() {
  if (ptr_) cudaFreeHost(ptr_);
}

Event::Event() {
  check(cudaEventCreate(&event_), "cudaEventCreate");
}

Event::~Event() {
  if (event_) cudaEventDestroy(event_);
}

namespace {

// Run by the driver in stream order: returns once the flag it is given is set, or after
// 20 ms.
void CUDART_CB hold_until_released(void* flag) {
  const std::unique_ptr<std::shared_ptr<std::atomic<bool>>> released(
      static_cast<std::shared_ptr<std::atomic<bool>>*>(flag));
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(20);
  while (!(*released)->load(std::memory_order_acquire) &&
         std::chrono::steady_clock::now() < until) {
  }
}

}  // namespace

void StreamHold::hold(cudaStream_t stream) {
  release();
  released_ = std::make_shared<std::atomic<bool>>(false);
  auto flag = std::make_unique<std::shared_ptr<std::atomic<bool>>>(released_);
  check(cudaLaunchHostFunc(stream, hold_until_released, flag.get()), "holding a stream");
  flag.release();
}

}  // namespace luminal::cudagen

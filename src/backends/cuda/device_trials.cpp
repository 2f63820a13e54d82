// Candidates judged on the device (see device_trials.hpp).
#include "backends/cuda/device_trials.hpp"

#include <cublasLt.h>

#include <algorithm>

#include "luminal/buffer.hpp"

namespace luminal::cudagen {
std::string search_context(const Device& device) {
  int driver = 0;
  cudaDriverGetVersion(&driver);
  return device.name() + " " + device.arch() + " x" + std::to_string(device.multiprocessors()) +
         ", cuBLASLt " + std::to_string(cublasLtGetVersion()) + ", driver " +
         std::to_string(driver);
}

DeviceTrials::DeviceTrials(const Device& device) : device_(device) {
  check(cudaEventCreate(&start_), "cudaEventCreate");
  check(cudaEventCreate(&stop_), "cudaEventCreate");
}

DeviceTrials::~DeviceTrials() {
  if (start_) cudaEventDestroy(start_);
  if (stop_) cudaEventDestroy(stop_);
}

std::vector<float> DeviceTrials::read_back() const {
  Buffer host(type_, numel_);
  device_.synchronize();
  check(cudaMemcpy(host.data(), out_, host.bytes(), cudaMemcpyDeviceToHost),
        "reading a candidate's output back");
  return host.to_f32();
}

double DeviceTrials::time(const runtime::SearchCandidate& c) {
  if (flush_.bytes() == 0) {  // (not for a winner found in the cache)
    int l2 = 0;
    check(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, device_.ordinal()),
          "reading the L2 size");
    flush_ = DeviceBuffer(2 * static_cast<size_t>(std::max(l2, 1 << 20)));
  }
  check(cudaMemsetAsync(flush_.data(), 0, flush_.bytes(), device_.stream()), "emptying the L2");
  // The stream waits until the candidate is queued: cuDNN's host work between its
  // kernels outlasted the flush and was timed as the device's (resnet18's 3x3
  // convolutions took 3.5 times their replayed time, and lost to slower kernels).
  device_.hold_stream();
  check(cudaEventRecord(start_, device_.stream()), "cudaEventRecord");
  try {
    c.run();
  } catch (...) {
    device_.release_stream();
    throw;
  }
  check(cudaEventRecord(stop_, device_.stream()), "cudaEventRecord");
  device_.release_stream();
  check(cudaEventSynchronize(stop_), "timing a candidate");
  float ms = 0;
  check(cudaEventElapsedTime(&ms, start_, stop_), "cudaEventElapsedTime");
  return ms * 1e-3;
}

void DeviceTrials::judge(runtime::SearchProblem& p, const void* out, size_t numel, DType type,
                         double tolerance) {
  out_ = out, numel_ = numel, type_ = type, tolerance_ = tolerance;
  p.keep_reference = [this] {
    kept_.reset();
    if (compared_on_device(type_)) try {
        kept_ = std::make_unique<KeptOutput>(out_, type_, numel_, tolerance_, device_.stream());
        return;
      } catch (const Error&) {  // no room for the copy: compared on the host
      }
    reference_ = read_back();
  };
  p.mismatch = [this] {
    return kept_ ? kept_->mismatch(out_, device_.stream())
                 : runtime::output_mismatch(read_back().data(), reference_, tolerance_);
  };
  p.time = [this](const runtime::SearchCandidate& c) { return time(c); };
}

}  // namespace luminal::cudagen

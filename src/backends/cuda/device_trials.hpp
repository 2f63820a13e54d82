// Judging a kernel's candidates on the device for the search (private to
// src/backends/cuda; runtime/search.hpp): what a winner depends on, runs timed by events
// with the L2 cache emptied first, and outputs compared on the device.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "backends/cuda/device.hpp"
#include "backends/cuda/kept_output.hpp"
#include "luminal/dtype.hpp"
#include "runtime/search.hpp"

namespace luminal::cudagen {

/// What fixes a winner besides the kernel: the GPU (name, architecture, SMs), the driver
/// and cuBLASLt.
std::string search_context(const Device& device);

class DeviceTrials {
 public:
  explicit DeviceTrials(const Device& device);
  ~DeviceTrials();
  DeviceTrials(const DeviceTrials&) = delete;
  DeviceTrials& operator=(const DeviceTrials&) = delete;

  /// Gives `p` its reference, comparison and timer for an output of `numel` elements of
  /// `type` at device address `out`: a candidate matches where no element is further
  /// from the reference's than `tolerance` times the reference's largest magnitude (NaN
  /// only where the reference has NaN). Each timed run follows a write of twice the L2
  /// cache, so what the kernel reads comes from memory, as in a model's run, and is held
  /// back until the host has queued all of it, so the time is the device's alone, as in
  /// a recorded graph's replay (a library's host work between its kernels not counted).
  void judge(runtime::SearchProblem& p, const void* out, size_t numel, DType type,
             double tolerance);

 private:
  std::vector<float> read_back() const;
  double time(const runtime::SearchCandidate& c);

  const Device& device_;
  const void* out_ = nullptr;
  size_t numel_ = 0;
  DType type_ = DType::F32;
  double tolerance_ = 0;
  std::unique_ptr<KeptOutput> kept_;  // float outputs' reference, kept on the device
  std::vector<float> reference_;      // others', read back
  DeviceBuffer flush_;
  cudaEvent_t start_ = nullptr, stop_ = nullptr;
};

}  // namespace luminal::cudagen

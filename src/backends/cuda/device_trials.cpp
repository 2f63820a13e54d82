// Candidates judged on the device (see device_trials.hpp).
#include "backends/cuda/device_trials.hpp"

#include <cublasLt.h>

#include <algorithm>

#include "backends/cuda/codegen.hpp"
#include "luminal/buffer.hpp"
#include "runtime/element_writer.hpp"

namespace luminal::cudagen {
namespace {

// A candidate's output against the reference's, on the device: the host's comparison of
// a language model head's 131 M logits took a second a candidate (copied back, widened
// to f32, scanned twice). Two kernels a type: the reference's largest finite magnitude,
// then the first element further from the reference's than the tolerance times it (NaN
// matching NaN, an infinity the same one), both computed in double as output_mismatch does.
constexpr const char* kSource = R"TRIALS(
LUM_FN double lum_trial_f32(const float* p, long long i) { return p[i]; }
LUM_FN double lum_trial_f16(const uint16_t* p, long long i) { return lum_h2f(p[i]); }
LUM_FN double lum_trial_bf16(const uint16_t* p, long long i) { return lum_bf2f(p[i]); }
#define LUM_TRIALS(T, name)                                                                \
  extern "C" __global__ void __launch_bounds__(256)                                       \
      lum_trial_scale_##name(const T* ref, long long n, unsigned long long* scale) {       \
    double m = 0;                                                                         \
    for (long long i = blockIdx.x * 256ll + threadIdx.x; i < n; i += gridDim.x * 256ll) { \
      const double a = fabs(lum_trial_##name(ref, i));                                    \
      if (a > m && !isinf(a)) m = a;                                                      \
    }                                                                                     \
    if (m > 0) atomicMax(scale, (unsigned long long)__double_as_longlong(m));              \
  }                                                                                       \
  extern "C" __global__ void __launch_bounds__(256)                                       \
      lum_trial_compare_##name(const T* got, const T* ref, long long n,                    \
                               const unsigned long long* scale, double tolerance,         \
                               unsigned long long* first_wrong) {                         \
    const double bound = tolerance * __longlong_as_double((long long)*scale);             \
    for (long long i = blockIdx.x * 256ll + threadIdx.x; i < n; i += gridDim.x * 256ll) { \
      const double g = lum_trial_##name(got, i), r = lum_trial_##name(ref, i);            \
      if (g != r && !(fabs(g - r) <= bound) && !(isnan(g) && isnan(r))) {                 \
        atomicMin(first_wrong, (unsigned long long)i);                                    \
        return;                                                                           \
      }                                                                                   \
    }                                                                                     \
  }
LUM_TRIALS(float, f32)
LUM_TRIALS(uint16_t, f16)
LUM_TRIALS(uint16_t, bf16)
)TRIALS";

// The kernels' name suffix for outputs of `type`, or nullptr where the host compares.
const char* device_compared(DType type) {
  switch (type) {
    case DType::F32:
      return "f32";
    case DType::F16:
      return "f16";
    case DType::BF16:
      return "bf16";
    default:
      return nullptr;
  }
}

}  // namespace

std::string trials_source() {
  return std::string(cuda_prelude()) + std::string(runtime::scalar_prelude()) + kSource;
}

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
    if (device_compared(type_)) try {
        keep_on_device();
        return;
      } catch (const Error&) {  // no room for the copy: compared on the host
        reference_on_device_ = DeviceBuffer();
      }
    reference_ = read_back();
  };
  p.mismatch = [this] {
    return reference_on_device_.data()
               ? mismatch_on_device()
               : runtime::output_mismatch(read_back().data(), reference_, tolerance_);
  };
  p.time = [this](const runtime::SearchCandidate& c) { return time(c); };
}

void DeviceTrials::launch(const std::string& kernel, std::span<void* const> args) {
  if (!module_)
    module_ = std::make_unique<Module>(compile_cubin(trials_source(), device_.arch()).code);
  const unsigned blocks = static_cast<unsigned>(
      std::clamp<size_t>((numel_ + 255) / 256, 1, size_t{4} * device_.multiprocessors()));
  check(cudaLaunchKernel(module_->kernel(kernel + device_compared(type_)), dim3(blocks), dim3(256),
                         const_cast<void**>(args.data()), 0, device_.stream()),
        "launching a search's comparison");
}

void DeviceTrials::keep_on_device() {
  const size_t bytes = numel_ * dtype_size(type_), counters = (bytes + 15) / 16 * 16;
  reference_on_device_ = DeviceBuffer(counters + 2 * sizeof(uint64_t));
  scale_ = static_cast<char*>(reference_on_device_.data()) + counters;
  check(cudaMemcpyAsync(reference_on_device_.data(), out_, bytes, cudaMemcpyDeviceToDevice,
                        device_.stream()),
        "keeping the reference's output");
  check(cudaMemsetAsync(scale_, 0, sizeof(uint64_t), device_.stream()), "clearing the scale");
  long long n = static_cast<long long>(numel_);
  const void* ref = reference_on_device_.data();
  void* args[] = {&ref, &n, &scale_};
  launch("lum_trial_scale_", args);
}

std::string DeviceTrials::mismatch_on_device() {
  void* first_wrong = static_cast<uint64_t*>(scale_) + 1;
  check(cudaMemsetAsync(first_wrong, 0xff, sizeof(uint64_t), device_.stream()),
        "clearing the comparison");
  long long n = static_cast<long long>(numel_);
  const void* ref = reference_on_device_.data();
  double tolerance = tolerance_;
  void* args[] = {&out_, &ref, &n, &scale_, &tolerance, &first_wrong};
  launch("lum_trial_compare_", args);
  uint64_t at = 0;
  check(cudaMemcpyAsync(&at, first_wrong, sizeof at, cudaMemcpyDeviceToHost, device_.stream()),
        "reading the comparison");
  device_.synchronize();
  if (at >= numel_) return "";
  const size_t size = dtype_size(type_);
  Buffer got(type_, 1), ref_at(type_, 1);
  check(cudaMemcpy(got.data(), static_cast<const char*>(out_) + at * size, size,
                   cudaMemcpyDeviceToHost),
        "reading a candidate's output back");
  check(cudaMemcpy(ref_at.data(), static_cast<const char*>(ref) + at * size, size,
                   cudaMemcpyDeviceToHost),
        "reading the reference's output back");
  return runtime::mismatch_at(at, got.to_f32()[0], ref_at.to_f32()[0]);
}

}  // namespace luminal::cudagen

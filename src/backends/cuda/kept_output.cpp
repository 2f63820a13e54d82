// Outputs compared on the device (see kept_output.hpp).
#include "backends/cuda/kept_output.hpp"

#include <algorithm>

#include "backends/cuda/codegen.hpp"
#include "luminal/buffer.hpp"
#include "runtime/element_writer.hpp"
#include "runtime/search.hpp"

namespace luminal::cudagen {
namespace {

// The host's comparison of a language model head's 131 M logits took a second a
// candidate (copied back, widened to f32, scanned twice). Two kernels a type: the
// reference's largest finite magnitude, then the first element further from the
// reference's than the tolerance times it (NaN matching NaN, an infinity the same one),
// both computed in double as output_mismatch does.
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
const char* suffix(DType type) {
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

int attribute(cudaDeviceAttr a) {
  int device = 0, value = 0;
  check(cudaGetDevice(&device), "cudaGetDevice");
  check(cudaDeviceGetAttribute(&value, a, device), "cudaDeviceGetAttribute");
  return value;
}

}  // namespace

std::string comparison_source() {
  return std::string(cuda_prelude()) + std::string(runtime::scalar_prelude()) + kSource;
}

bool compared_on_device(DType type) {
  return suffix(type) != nullptr;
}

KeptOutput::KeptOutput(const void* values, DType type, size_t numel, double tolerance,
                       cudaStream_t stream)
    : type_(type), numel_(numel), tolerance_(tolerance) {
  LUM_CHECK(compared_on_device(type)) << "internal: no device comparison of " << dtype_name(type);
  const int major = attribute(cudaDevAttrComputeCapabilityMajor);
  const int minor = attribute(cudaDevAttrComputeCapabilityMinor);
  multiprocessors_ = attribute(cudaDevAttrMultiProcessorCount);
  module_ = std::make_unique<Module>(
      compile_cubin(comparison_source(), "sm_" + std::to_string(10 * major + minor)).code);
  const size_t bytes = numel * dtype_size(type), counters = (bytes + 15) / 16 * 16;
  copy_ = DeviceBuffer(counters + 2 * sizeof(uint64_t));
  scale_ = static_cast<char*>(copy_.data()) + counters;
  check(cudaMemcpyAsync(copy_.data(), values, bytes, cudaMemcpyDeviceToDevice, stream),
        "keeping the reference's output");
  check(cudaMemsetAsync(scale_, 0, sizeof(uint64_t), stream), "clearing the scale");
  long long n = static_cast<long long>(numel_);
  const void* ref = copy_.data();
  void* args[] = {&ref, &n, &scale_};
  launch("lum_trial_scale_", args, stream);
}

void KeptOutput::launch(const char* kernel, void** args, cudaStream_t stream) const {
  const unsigned blocks = static_cast<unsigned>(
      std::clamp<size_t>((numel_ + 255) / 256, 1, size_t{4} * multiprocessors_));
  check(cudaLaunchKernel(module_->kernel(kernel + std::string(suffix(type_))), dim3(blocks),
                         dim3(256), args, 0, stream),
        "launching a search's comparison");
}

std::string KeptOutput::mismatch(const void* got, cudaStream_t stream) const {
  void* first_wrong = static_cast<uint64_t*>(scale_) + 1;
  check(cudaMemsetAsync(first_wrong, 0xff, sizeof(uint64_t), stream), "clearing the comparison");
  long long n = static_cast<long long>(numel_);
  const void* ref = copy_.data();
  void* scale = scale_;
  double tolerance = tolerance_;
  void* args[] = {&got, &ref, &n, &scale, &tolerance, &first_wrong};
  launch("lum_trial_compare_", args, stream);
  uint64_t at = 0;
  check(cudaMemcpyAsync(&at, first_wrong, sizeof at, cudaMemcpyDeviceToHost, stream),
        "reading the comparison");
  check(cudaStreamSynchronize(stream), "comparing an output on the device");
  if (at >= numel_) return "";
  const size_t size = dtype_size(type_);
  Buffer got_at(type_, 1), ref_at(type_, 1);
  check(cudaMemcpy(got_at.data(), static_cast<const char*>(got) + at * size, size,
                   cudaMemcpyDeviceToHost),
        "reading a candidate's output back");
  check(cudaMemcpy(ref_at.data(), static_cast<const char*>(ref) + at * size, size,
                   cudaMemcpyDeviceToHost),
        "reading the reference's output back");
  return runtime::mismatch_at(at, got_at.to_f32()[0], ref_at.to_f32()[0]);
}

}  // namespace luminal::cudagen

// The strided copy (see copy_view.hpp).
#include "backends/cuda/copy_view.hpp"

#include <algorithm>
#include <cstdint>

#include "backends/cuda/codegen.hpp"

namespace luminal::cudagen {
namespace {

constexpr size_t kMaxDims = 8;

// The kernel's parameters; the source declares the same fields in the same order.
struct Args {
  const void* src;
  void* dst;
  int64_t n, rank, offset;
  int64_t dims[kMaxDims], strides[kMaxDims];
};

constexpr const char* kSource = R"COPY(
struct LumCopyArgs {
  const void* src; void* dst;
  long long n, rank, offset;
  long long dims[8], strides[8];
};
// Each thread takes destination elements, finding each one's source by its index.
#define LUM_COPY_VIEW(name, From, To, convert)                                         \
  extern "C" __global__ void __launch_bounds__(256) name(const LumCopyArgs a) {        \
    const From* src = (const From*)a.src;                                              \
    To* dst = (To*)a.dst;                                                              \
    for (long long i = blockIdx.x * 256ll + threadIdx.x; i < a.n; i += gridDim.x * 256ll) { \
      long long at = a.offset, rest = i;                                               \
      for (long long d = a.rank - 1; d >= 0; --d) {                                    \
        at += rest % a.dims[d] * a.strides[d];                                         \
        rest /= a.dims[d];                                                             \
      }                                                                                \
      dst[i] = convert(src[at]);                                                       \
    }                                                                                  \
  }
LUM_COPY_VIEW(lum_copy_view_1, unsigned char, unsigned char, )
LUM_COPY_VIEW(lum_copy_view_2, unsigned short, unsigned short, )
LUM_COPY_VIEW(lum_copy_view_4, unsigned int, unsigned int, )
LUM_COPY_VIEW(lum_copy_view_8, unsigned long long, unsigned long long, )
LUM_COPY_VIEW(lum_round_view_f16, float, unsigned short, lum_f2h)
LUM_COPY_VIEW(lum_round_view_bf16, float, unsigned short, lum_f2bf)
)COPY";

}  // namespace

std::string copy_view_source() {
  return std::string(cuda_prelude()) + kSource;
}

bool ViewCopy::run(const ConcreteView& view, const void* src, size_t element_bytes, void* dst) {
  if (view.has_mask()) return false;
  if (view.numel() == 0) return true;
  if (view.is_dense()) {
    check(cudaMemcpyAsync(dst,
                          static_cast<const char*>(src) +
                              view.offset * static_cast<int64_t>(element_bytes),
                          static_cast<size_t>(view.numel()) * element_bytes,
                          cudaMemcpyDeviceToDevice, device_.stream()),
          "copying a view");
    return true;
  }
  switch (element_bytes) {
    case 1:
      return launch(view, src, dst, "lum_copy_view_1");
    case 2:
      return launch(view, src, dst, "lum_copy_view_2");
    case 4:
      return launch(view, src, dst, "lum_copy_view_4");
    case 8:
      return launch(view, src, dst, "lum_copy_view_8");
    default:
      return false;
  }
}

bool ViewCopy::run_rounded(const ConcreteView& view, const float* src, DType to, void* dst) {
  if (view.has_mask() || (to != DType::F16 && to != DType::BF16)) return false;
  if (view.numel() == 0) return true;
  return launch(view, src, dst, to == DType::F16 ? "lum_round_view_f16" : "lum_round_view_bf16");
}

bool ViewCopy::launch(const ConcreteView& view, const void* src, void* dst, const char* kernel) {
  const int64_t n = view.numel();
  Args a{src, dst, n, 0, view.offset, {}, {}};
  for (size_t d = 0; d < view.dims.size(); ++d) {
    if (view.dims[d] == 1) continue;
    if (a.rank == static_cast<int64_t>(kMaxDims)) return false;
    a.dims[a.rank] = view.dims[d];
    a.strides[a.rank++] = view.strides[d];
  }
  if (!module_)
    module_ = std::make_unique<Module>(compile_cubin(copy_view_source(), device_.arch()).code);
  void* args[] = {&a};
  const int64_t blocks = std::min<int64_t>((n + 255) / 256, int64_t{device_.multiprocessors()} * 8);
  check(cudaLaunchKernel(module_->kernel(kernel), dim3(static_cast<unsigned>(blocks)), dim3(256),
                         args, 0, device_.stream()),
        "launching a view copy");
  return true;
}

}  // namespace luminal::cudagen

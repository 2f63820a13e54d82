// The strided copy (see copy_view.hpp).
#include "backends/cuda/copy_view.hpp"

#include <algorithm>
#include <cstdint>
#include <string>

#include "backends/cuda/codegen.hpp"
#include "luminal/error.hpp"

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
    lum_after_prior_grids();                                                           \
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
LUM_COPY_VIEW(lum_convert_view_f32_f16, float, unsigned short, lum_f2h)
LUM_COPY_VIEW(lum_convert_view_f32_bf16, float, unsigned short, lum_f2bf)
LUM_COPY_VIEW(lum_convert_view_f16_f32, unsigned short, float, lum_h2f)
LUM_COPY_VIEW(lum_convert_view_bf16_f32, unsigned short, float, lum_bf2f)

// dst[z][c][r] = src[z][r][c] for 2-byte elements, [rows, cols] matrices: a 32 x 32 tile
// through shared memory a block (32 x 8 threads), so both sides move in rows.
extern "C" __global__ void __launch_bounds__(256)
    lum_transpose_2(const unsigned short* __restrict__ src, unsigned short* __restrict__ dst,
                    long long rows, long long cols) {
  lum_after_prior_grids();
  __shared__ unsigned short tile[32][33];
  const long long z = blockIdx.z, r0 = blockIdx.y * 32ll, c0 = blockIdx.x * 32ll;
  src += z * rows * cols;
  dst += z * rows * cols;
  for (int i = threadIdx.y; i < 32; i += 8) {
    const long long r = r0 + i, c = c0 + threadIdx.x;
    if (r < rows && c < cols) tile[i][threadIdx.x] = src[r * cols + c];
  }
  __syncthreads();
  for (int i = threadIdx.y; i < 32; i += 8) {
    const long long c = c0 + i, r = r0 + threadIdx.x;
    if (r < rows && c < cols) dst[c * rows + r] = tile[threadIdx.x][i];
  }
}

// y += r, n f32 values.
extern "C" __global__ void __launch_bounds__(256)
    lum_add_f32(float* __restrict__ y, const float* __restrict__ r, long long n) {
  lum_after_prior_grids();
  for (long long i = blockIdx.x * 256ll + threadIdx.x; i < n; i += gridDim.x * 256ll) y[i] += r[i];
}
)COPY";

}  // namespace

std::string copy_view_source() {
  return std::string(cuda_prelude()) + kSource;
}

bool ViewCopy::run(const ConcreteView& view, const void* src, size_t element_bytes, void* dst) {
  if (view.has_mask()) return false;
  if (view.numel() == 0) return true;
  if (view.is_dense()) {
    check(
        device_.copy(
            dst, static_cast<const char*>(src) + view.offset * static_cast<int64_t>(element_bytes),
            static_cast<size_t>(view.numel()) * element_bytes),
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

bool ViewCopy::run_converted(const ConcreteView& view, const void* src, DType from, DType to,
                             void* dst) {
  const auto half = [](DType t) { return t == DType::F16 || t == DType::BF16; };
  if (view.has_mask() || !((from == DType::F32 && half(to)) || (half(from) && to == DType::F32)))
    return false;
  if (view.numel() == 0) return true;
  const std::string kernel =
      "lum_convert_view_" + std::string(dtype_name(from)) + "_" + std::string(dtype_name(to));
  return launch(view, src, dst, kernel.c_str());
}

ConcreteView unbroadcast(const ConcreteView& view) {
  ConcreteView v = view;
  for (size_t d = 0; d < v.dims.size(); ++d)
    if (v.strides[d] == 0) v.dims[d] = 1, v.mask_lo[d] = 0, v.mask_hi[d] = 1;
  return v;
}

bool unbroadcast_is_dense(const ConcreteView& view) {
  int64_t expected = 1;
  for (size_t d = view.dims.size(); d-- > 0;) {
    if (view.strides[d] == 0) continue;  // read once: a dim of 1 unbroadcast
    if (view.mask_lo[d] > 0 || view.mask_hi[d] < view.dims[d]) return false;
    if (view.dims[d] != 1 && view.strides[d] != expected) return false;
    expected *= view.dims[d];
  }
  return true;
}

ConcreteView packed(const ConcreteView& view) {
  ConcreteView v;
  v.dims = view.dims;
  v.strides.assign(v.dims.size(), 0);
  v.mask_lo.assign(v.dims.size(), 0);
  v.mask_hi = v.dims;
  int64_t step = 1;
  for (size_t d = v.dims.size(); d-- > 0;) {
    if (view.strides[d] == 0) continue;
    v.strides[d] = step;
    step *= v.dims[d];
  }
  return v;
}

void ViewCopy::transpose(const void* src, int64_t batches, int64_t rows, int64_t cols, void* dst) {
  if (batches * rows * cols == 0) return;
  LUM_CHECK(batches <= 65535 && (rows + 31) / 32 <= 65535)
      << "internal: a transpose of " << batches << " x " << rows << " rows";
  if (!module_)
    module_ = std::make_unique<Module>(compile_cubin(copy_view_source(), device_.arch()).code);
  long long rows_arg = rows, cols_arg = cols;
  void* args[] = {&src, &dst, &rows_arg, &cols_arg};
  check(
      device_.launch(module_->kernel("lum_transpose_2"),
                     dim3(static_cast<unsigned>((cols + 31) / 32),
                          static_cast<unsigned>((rows + 31) / 32), static_cast<unsigned>(batches)),
                     dim3(32, 8), args, 0),
      "launching a transpose");
}

void ViewCopy::add(float* y, const float* r, int64_t n) {
  if (n == 0) return;
  if (!module_)
    module_ = std::make_unique<Module>(compile_cubin(copy_view_source(), device_.arch()).code);
  long long n_arg = n;
  void* args[] = {&y, &r, &n_arg};
  const int64_t blocks = std::min<int64_t>((n + 255) / 256, int64_t{device_.multiprocessors()} * 8);
  check(device_.launch(module_->kernel("lum_add_f32"), dim3(static_cast<unsigned>(blocks)),
                       dim3(256), args, 0),
        "launching a residual add");
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
  check(device_.launch(module_->kernel(kernel), dim3(static_cast<unsigned>(blocks)), dim3(256),
                       args, 0),
        "launching a view copy");
  return true;
}

}  // namespace luminal::cudagen

// cuDNN's convolutions as a way to run a window product (see cudnn_convolutions.hpp).
#include "backends/cuda/cudnn_convolutions.hpp"

#include <dlfcn.h>

#include <cstdio>
#include <numeric>

#include "luminal/error.hpp"
#include "runtime/env.hpp"

#if __has_include(<cudnn.h>)
#include <cudnn.h>
#define LUMINAL_HAS_CUDNN 1
#endif

namespace luminal::cudagen {
namespace {

struct Dim {
  int64_t size = 1, stride = 0;
};

// One spatial axis: the output's pixels `out` and the kernel's positions `kernel` read x
// at steps of out.stride and kernel.stride, which are the convolution's stride and
// dilation times x's own step along the axis. That step divides both; of those that do,
// the smallest that is a multiple of `unit` and at least `least` units (as a packed
// tensor's: channels last, the width's step is the channels' span; the height's, a whole
// row of the width's). `extent`: the part of the axis the windows cover.
struct Axis {
  int64_t out = 1, kernel = 1, step = 1, stride = 1, dilation = 1;
  int64_t extent() const { return (out - 1) * stride + (kernel - 1) * dilation + 1; }
};
std::optional<Axis> axis_of(Dim out, Dim kernel, int64_t unit, int64_t least) {
  Axis x;
  x.out = out.size;
  x.kernel = kernel.size;
  int64_t g = 0;
  for (Dim d : {out, kernel})
    if (d.size > 1) {
      if (d.stride <= 0) return std::nullopt;
      g = std::gcd(g, d.stride);
    }
  if (g == 0) return x;  // nothing along it: its step is set later
  x.step = g;
  for (int64_t f = 64; f > 1; --f)
    if (g % f == 0 && (g / f) % unit == 0 && g / f / unit >= least) {
      x.step = g / f;
      break;
    }
  if (out.size > 1) x.stride = out.stride / x.step;
  if (kernel.size > 1) x.dilation = kernel.stride / x.step;
  return x;
}

bool fits_int(int64_t v) {
  return v >= 0 && v < (int64_t{1} << 31);
}

// The convolution for one reading of the sum's dims (`sums`, outermost first, dims of one
// left out) as kernel rows, kernel columns and channels: `channels_last` (r, s, c: the
// filter KRSC) or not (c, r, s: KCRS), `with_r` / `with_s` saying which kernel dims are
// among them.
std::optional<Convolution2d> convolution_for(const std::vector<Dim>& sums, bool channels_last,
                                             bool with_r, bool with_s, Dim image, Dim out_rows,
                                             Dim out_columns, int64_t out_channels,
                                             const std::array<int64_t, 4>& y_strides) {
  Dim r, s, c;
  size_t at = 0;
  if (!channels_last) c = sums[at++];
  if (with_r) r = sums[at++];
  if (with_s) s = sums[at++];
  if (channels_last) c = sums[at++];
  if (at != sums.size() || c.stride <= 0) return std::nullopt;
  std::optional<Axis> w = axis_of(out_columns, s, channels_last ? c.size * c.stride : 1, 1);
  if (!w) return std::nullopt;
  std::optional<Axis> h = axis_of(out_rows, r, w->step, w->extent());
  if (!h) return std::nullopt;
  int64_t hx = h->extent(), wx = w->extent();
  // Where x's memory is a packed tensor the windows cover part of (a stride-2 window that
  // stops short of the last column), its whole extent, as long as the output's size is the
  // same over it: cuDNN's fastest kernels want packed tensors.
  const auto widened = [](const Axis& a, int64_t extent, int64_t outer_step) {
    if (outer_step <= 0 || outer_step % a.step != 0) return extent;
    const int64_t whole = outer_step / a.step;
    const int64_t span = (a.kernel - 1) * a.dilation + 1;
    return whole > extent && (whole - span) / a.stride + 1 == a.out ? whole : extent;
  };
  if (channels_last) {
    if (w->out * w->kernel > 1 && w->step == c.size * c.stride) wx = widened(*w, wx, h->step);
    if (image.size > 1) hx = widened(*h, hx, image.stride);
  } else {
    if (w->out * w->kernel > 1 && w->step == 1) wx = widened(*w, wx, h->step);
    if (h->out * h->kernel > 1) hx = widened(*h, hx, c.stride);
  }
  // Steps of axes with nothing on them, and the images' where there is one, as a packed
  // tensor of this layout would have them.
  if (channels_last) {
    if (w->out * w->kernel == 1) w->step = c.size * c.stride;
    if (h->out * h->kernel == 1) h->step = wx * w->step;
    if (image.size == 1) image.stride = hx * h->step;
  } else {
    if (w->out * w->kernel == 1) w->step = 1;
    if (h->out * h->kernel == 1) h->step = wx * w->step;
    if (image.size == 1) image.stride = c.size * c.stride;
  }
  // x, so described, is a tensor of this layout, each dim within the next one out (else
  // the reading is not of a convolution's image, though it reads the same elements).
  const bool nested = channels_last ? c.size * c.stride <= w->step && wx * w->step <= h->step &&
                                          (image.size == 1 || hx * h->step <= image.stride)
                                    : wx * w->step <= h->step && hx * h->step <= c.stride &&
                                          (image.size == 1 || c.size * c.stride <= image.stride);
  if (!nested) return std::nullopt;
  Convolution2d conv;
  const std::array<int64_t, 4> x_dims = {image.size, c.size, hx, wx},
                               x_strides = {image.stride, c.stride, h->step, w->step},
                               filter = {out_channels, c.size, r.size, s.size},
                               y_dims = {image.size, out_channels, h->out, w->out};
  const std::array<int64_t, 4> axes = {h->stride, w->stride, h->dilation, w->dilation};
  for (const auto* v : {&x_dims, &x_strides, &filter, &y_dims, &y_strides, &axes})
    for (int64_t e : *v)
      if (!fits_int(e)) return std::nullopt;
  for (size_t i = 0; i < 4; ++i) {
    conv.x_dims[i] = static_cast<int>(x_dims[i]);
    conv.x_strides[i] = static_cast<int>(x_strides[i]);
    conv.filter[i] = static_cast<int>(filter[i]);
    conv.y_dims[i] = static_cast<int>(y_dims[i]);
    conv.y_strides[i] = static_cast<int>(y_strides[i]);
  }
  conv.filter_channels_last = channels_last;
  conv.stride = {static_cast<int>(h->stride), static_cast<int>(w->stride)};
  conv.dilation = {static_cast<int>(h->dilation), static_cast<int>(w->dilation)};
  return conv;
}

}  // namespace

std::string Convolution2d::describe() const {
  const auto four = [](const std::array<int, 4>& v) {
    return std::to_string(v[0]) + "x" + std::to_string(v[1]) + "x" + std::to_string(v[2]) + "x" +
           std::to_string(v[3]);
  };
  return "x " + four(x_dims) + " at " + four(x_strides) + ", filter " + four(filter) +
         (filter_channels_last ? " krsc" : " kcrs") + ", y " + four(y_dims) + " at " +
         four(y_strides) + ", stride " + std::to_string(stride[0]) + "x" +
         std::to_string(stride[1]) + ", dilation " + std::to_string(dilation[0]) + "x" +
         std::to_string(dilation[1]);
}

std::string CudnnConvolutions::algorithm_name(int algorithm) {
  // (cudnnConvolutionFwdAlgo_t's first three, the only ones algorithms() offers.)
  constexpr const char* kNames[] = {"implicit gemm", "implicit precomp gemm", "gemm"};
  return algorithm >= 0 && algorithm < 3 ? kNames[algorithm]
                                         : "algorithm " + std::to_string(algorithm);
}

std::optional<Convolution2d> convolution_of(const ConcreteView& a, const ConcreteView& b,
                                            size_t row_dims, bool transposed) {
  const size_t rb = b.dims.size(), ra = a.dims.size();
  if (rb < 3 || ra < rb - 3 + row_dims + 2 || a.has_mask() || b.has_mask()) return std::nullopt;
  const size_t batch = rb - 3;
  // The weight: one packed row of the sum a channel, shared by every image.
  const int64_t k = b.dims[rb - 2], channels = b.dims[rb - 1];
  if ((k > 1 && b.strides[rb - 2] != 1) || (channels > 1 && b.strides[rb - 1] != k))
    return std::nullopt;
  // The images: a batch dim, or (where the output is not transposed, so that the rows
  // hold them) the rows' first of three.
  std::vector<Dim> images, rows, sums;
  for (size_t d = 0; d < batch; ++d) {
    if (b.dims[d] != 1 && b.strides[d] != 0) return std::nullopt;
    if (a.dims[d] != 1) images.push_back({a.dims[d], a.strides[d]});
  }
  for (size_t d = batch; d < batch + row_dims; ++d)
    if (a.dims[d] != 1) rows.push_back({a.dims[d], a.strides[d]});
  for (size_t d = batch + row_dims; d + 1 < ra; ++d)
    if (a.dims[d] != 1) sums.push_back({a.dims[d], a.strides[d]});
  const bool image_in_rows = images.empty() && rows.size() == 3;
  if (image_in_rows) {
    images.push_back(rows.front());
    rows.erase(rows.begin());
  }
  if (images.size() > 1 || rows.size() > 2 || sums.empty() || sums.size() > 3) return std::nullopt;
  const Dim image = images.empty() ? Dim{} : images[0];
  while (rows.size() < 2) rows.insert(rows.begin(), Dim{});
  // Where the output puts (image, channel, output row, output column): row-major
  // [batch..., M, N] or, transposed, [batch..., N, M], the image a batch dim or M's first.
  const int64_t pixels = rows[0].size * rows[1].size;
  const int64_t m = pixels * (image_in_rows ? image.size : 1);
  const int64_t pixel = transposed ? 1 : channels;
  const std::array<int64_t, 4> y_strides = {image_in_rows ? pixels * pixel : m * channels,
                                            transposed ? m : 1, rows[1].size * pixel, pixel};
  // Each reading of the sum's dims as the filter's: with both kernel dims, one, or none.
  for (bool channels_last : {true, false})
    for (auto [with_r, with_s] : {std::pair{true, true}, std::pair{false, true},
                                  std::pair{true, false}, std::pair{false, false}}) {
      if (static_cast<size_t>(with_r) + static_cast<size_t>(with_s) + 1 != sums.size()) continue;
      if (auto conv = convolution_for(sums, channels_last, with_r, with_s, image, rows[0], rows[1],
                                      channels, y_strides))
        return conv;
    }
  return std::nullopt;
}

#ifdef LUMINAL_HAS_CUDNN
namespace {

// The entry points luminal calls, from the shared library.
struct Cudnn {
  decltype(&cudnnCreate) create;
  decltype(&cudnnDestroy) destroy;
  decltype(&cudnnSetStream) set_stream;
  decltype(&cudnnGetErrorString) error_string;
  decltype(&cudnnCreateTensorDescriptor) create_tensor;
  decltype(&cudnnDestroyTensorDescriptor) destroy_tensor;
  decltype(&cudnnSetTensor4dDescriptorEx) set_tensor;
  decltype(&cudnnCreateFilterDescriptor) create_filter;
  decltype(&cudnnDestroyFilterDescriptor) destroy_filter;
  decltype(&cudnnSetFilter4dDescriptor) set_filter;
  decltype(&cudnnCreateConvolutionDescriptor) create_convolution;
  decltype(&cudnnDestroyConvolutionDescriptor) destroy_convolution;
  decltype(&cudnnSetConvolution2dDescriptor) set_convolution;
  decltype(&cudnnSetConvolutionMathType) set_math;
  decltype(&cudnnGetConvolutionForwardAlgorithm_v7) algorithms;
  decltype(&cudnnGetConvolutionForwardWorkspaceSize) workspace;
  decltype(&cudnnConvolutionForward) forward;

  void check(cudnnStatus_t s, const char* what) const {
    LUM_CHECK(s == CUDNN_STATUS_SUCCESS) << "cuDNN: " << what << ": " << error_string(s);
  }
};

// The library, or null where it is turned off or not found (said once at LUMINAL_LOG=info).
const Cudnn* cudnn() {
  static const Cudnn* lib = []() -> const Cudnn* {
    const bool log = runtime::env_has("LUMINAL_LOG", "info");
    if (runtime::env_has("LUMINAL_CUDNN", "off")) return nullptr;
    void* h = dlopen("libcudnn.so.9", RTLD_NOW | RTLD_GLOBAL);
    if (!h) {
      if (log)
        std::fprintf(stderr, "luminal: cuDNN not found (%s): convolutions run luminal's kernels\n",
                     dlerror());
      return nullptr;
    }
    static Cudnn c;
    bool complete = true;
    const auto entry = [&](auto& f, const char* name) {
      f = reinterpret_cast<std::remove_reference_t<decltype(f)>>(dlsym(h, name));
      complete &= f != nullptr;
    };
    entry(c.create, "cudnnCreate");
    entry(c.destroy, "cudnnDestroy");
    entry(c.set_stream, "cudnnSetStream");
    entry(c.error_string, "cudnnGetErrorString");
    entry(c.create_tensor, "cudnnCreateTensorDescriptor");
    entry(c.destroy_tensor, "cudnnDestroyTensorDescriptor");
    entry(c.set_tensor, "cudnnSetTensor4dDescriptorEx");
    entry(c.create_filter, "cudnnCreateFilterDescriptor");
    entry(c.destroy_filter, "cudnnDestroyFilterDescriptor");
    entry(c.set_filter, "cudnnSetFilter4dDescriptor");
    entry(c.create_convolution, "cudnnCreateConvolutionDescriptor");
    entry(c.destroy_convolution, "cudnnDestroyConvolutionDescriptor");
    entry(c.set_convolution, "cudnnSetConvolution2dDescriptor");
    entry(c.set_math, "cudnnSetConvolutionMathType");
    entry(c.algorithms, "cudnnGetConvolutionForwardAlgorithm_v7");
    entry(c.workspace, "cudnnGetConvolutionForwardWorkspaceSize");
    entry(c.forward, "cudnnConvolutionForward");
    if (!complete) {
      if (log)
        std::fprintf(stderr,
                     "luminal: libcudnn.so.9 lacks the convolution entry points luminal "
                     "calls: convolutions run luminal's kernels\n");
      return nullptr;
    }
    return &c;
  }();
  return lib;
}

// The most scratch memory an algorithm may ask for.
constexpr size_t kWorkspaceLimit = size_t{256} << 20;

}  // namespace

struct CudnnConvolutions::Plan {
  const Cudnn& lib;
  cudnnTensorDescriptor_t x = nullptr, y = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;
  bool valid = false;  // cuDNN took the descriptors
  std::vector<int> algorithms;
  std::map<int, size_t> workspace;  // algorithm -> bytes

  explicit Plan(const Cudnn& lib) : lib(lib) {}
  ~Plan() {
    if (x) lib.destroy_tensor(x);
    if (y) lib.destroy_tensor(y);
    if (w) lib.destroy_filter(w);
    if (conv) lib.destroy_convolution(conv);
  }
};

CudnnConvolutions::CudnnConvolutions(const Device& device) : device_(device) {}

CudnnConvolutions::~CudnnConvolutions() {
  plans_.clear();
  if (handle_) cudnn()->destroy(static_cast<cudnnHandle_t>(handle_));
}

CudnnConvolutions::Plan* CudnnConvolutions::plan(const Convolution2d& c, DType t) {
  const std::string key = c.describe() + (t == DType::BF16 ? " bf16" : " f16");
  if (auto it = plans_.find(key); it != plans_.end()) return it->second.get();
  const Cudnn* lib = cudnn();
  if (!lib) return nullptr;
  if (!handle_) {
    device_.make_current();
    cudnnHandle_t h = nullptr;
    if (lib->create(&h) != CUDNN_STATUS_SUCCESS) return nullptr;
    handle_ = h;
  }
  auto p = std::make_unique<Plan>(*lib);
  const cudnnDataType_t type = t == DType::BF16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_HALF;
  const auto& x = c.x_dims;
  const auto& xs = c.x_strides;
  const auto& y = c.y_dims;
  const auto& ys = c.y_strides;
  const auto& f = c.filter;
  p->valid =
      lib->create_tensor(&p->x) == CUDNN_STATUS_SUCCESS &&
      lib->create_tensor(&p->y) == CUDNN_STATUS_SUCCESS &&
      lib->create_filter(&p->w) == CUDNN_STATUS_SUCCESS &&
      lib->create_convolution(&p->conv) == CUDNN_STATUS_SUCCESS &&
      lib->set_tensor(p->x, type, x[0], x[1], x[2], x[3], xs[0], xs[1], xs[2], xs[3]) ==
          CUDNN_STATUS_SUCCESS &&
      lib->set_tensor(p->y, type, y[0], y[1], y[2], y[3], ys[0], ys[1], ys[2], ys[3]) ==
          CUDNN_STATUS_SUCCESS &&
      lib->set_filter(p->w, type, c.filter_channels_last ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW,
                      f[0], f[1], f[2], f[3]) == CUDNN_STATUS_SUCCESS &&
      lib->set_convolution(p->conv, 0, 0, c.stride[0], c.stride[1], c.dilation[0], c.dilation[1],
                           CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT) == CUDNN_STATUS_SUCCESS &&
      lib->set_math(p->conv, CUDNN_TENSOR_OP_MATH) == CUDNN_STATUS_SUCCESS;
  if (p->valid) {
    cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
    int returned = 0;
    if (lib->algorithms(static_cast<cudnnHandle_t>(handle_), p->x, p->w, p->conv, p->y,
                        CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &returned, perf) == CUDNN_STATUS_SUCCESS)
      for (int i = 0; i < returned; ++i) {
        const cudnnConvolutionFwdAlgo_t algo = perf[i].algo;
        const bool gemm = algo == CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM ||
                          algo == CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM ||
                          algo == CUDNN_CONVOLUTION_FWD_ALGO_GEMM;
        size_t bytes = 0;
        if (!gemm || perf[i].status != CUDNN_STATUS_SUCCESS || p->workspace.count(algo) ||
            lib->workspace(static_cast<cudnnHandle_t>(handle_), p->x, p->w, p->conv, p->y, algo,
                           &bytes) != CUDNN_STATUS_SUCCESS ||
            bytes > kWorkspaceLimit)
          continue;
        p->algorithms.push_back(algo);
        p->workspace[algo] = bytes;
      }
  }
  return plans_.emplace(key, std::move(p)).first->second.get();
}

std::vector<int> CudnnConvolutions::algorithms(const Convolution2d& c, DType t, size_t count) {
  if (t != DType::F16 && t != DType::BF16) return {};
  const Plan* p = plan(c, t);
  if (!p || !p->valid) return {};
  std::vector<int> best = p->algorithms;
  if (best.size() > count) best.resize(count);
  return best;
}

void CudnnConvolutions::run(const Convolution2d& c, DType t, int algorithm, const void* x,
                            const void* w, void* y) {
  Plan* p = plan(c, t);
  LUM_CHECK(p && p->valid && p->workspace.count(algorithm))
      << "internal: cuDNN algorithm " << algorithm << " was not offered for " << c.describe();
  const size_t bytes = p->workspace.at(algorithm);
  void* scratch = bytes ? grown(device_, workspace_, bytes) : nullptr;
  // What the call's kernels follow from: the convolution, the algorithm, the addresses.
  std::string call =
      with_addresses(c.describe() + " " + std::string(dtype_name(t)) + " algorithm " +
                         std::to_string(algorithm) + " scratch " + std::to_string(bytes),
                     {x, w, y, scratch});
  device_.library_call(
      std::move(call), [this, p, algorithm, x, w, y, scratch, bytes](cudaStream_t stream) {
        const float one = 1, zero = 0;
        const auto h = static_cast<cudnnHandle_t>(handle_);
        p->lib.check(p->lib.set_stream(h, stream), "setting the stream");
        p->lib.check(p->lib.forward(h, &one, p->x, x, p->w, w, p->conv,
                                    static_cast<cudnnConvolutionFwdAlgo_t>(algorithm), scratch,
                                    bytes, &zero, p->y, y),
                     "a convolution");
      });
}

#else  // no cuDNN headers at build time: no cuDNN way

struct CudnnConvolutions::Plan {};
CudnnConvolutions::CudnnConvolutions(const Device& device) : device_(device) {}
CudnnConvolutions::~CudnnConvolutions() = default;
CudnnConvolutions::Plan* CudnnConvolutions::plan(const Convolution2d&, DType) {
  return nullptr;
}
std::vector<int> CudnnConvolutions::algorithms(const Convolution2d&, DType, size_t) {
  return {};
}
void CudnnConvolutions::run(const Convolution2d& c, DType, int, const void*, const void*, void*) {
  LUM_CHECK(false) << "internal: no cuDNN in this build for " << c.describe();
}

#endif

}  // namespace luminal::cudagen

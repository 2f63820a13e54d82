// The one-row product kernel (see gemv.hpp).
#include "backends/cuda/gemv.hpp"

#include <algorithm>
#include <cstdint>
#include <string>

#include "backends/cuda/codegen.hpp"
#include "backends/cuda/device_trials.hpp"
#include "runtime/element_writer.hpp"

namespace luminal::cudagen {
namespace {

// `split` warps per output row, each taking every split-th 16-byte vector of the row
// (and of x), `unroll` loads in flight; the warps sum through shuffles and then shared
// memory. W is streamed past L1 with a hint to fetch 256 bytes into L2. Rows must start
// 16-byte aligned and K be a whole number of 16-byte vectors. The default shape, 8 warps
// a block, 4 a row, 4 loads in flight, measured on an H100 against a warp per row with
// eight loads in flight: 2.94 and 3.17 TB/s against 2.70 and 2.61 for 14336 x 4096 and
// 4096 x 14336 bf16 (bench/results/cuda.md); the other shapes are the search's
// candidates for each new matrix shape.
constexpr const char* kSource = R"GEMV(
static __device__ __forceinline__ uint4 lum_gv_stream(const uint4* p) {
#if __CUDA_ARCH__ >= 800
  uint4 v;
  asm("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  return v;
#else
  return __ldg(p);
#endif
}
// x . w over the 16-byte vector v of w and the elements of x it meets (one vector of x
// of w's type, two of f32 x against half w).
static __device__ __forceinline__ float lum_gv_dot_f32(const uint4* xv, long long v, uint4 w) {
  const uint4 x = __ldg(xv + v);
  return __uint_as_float(x.x) * __uint_as_float(w.x) + __uint_as_float(x.y) * __uint_as_float(w.y) +
         __uint_as_float(x.z) * __uint_as_float(w.z) + __uint_as_float(x.w) * __uint_as_float(w.w);
}
#define LUM_GV_DOT_HALVES(name, cvt)                                                    \
  static __device__ __forceinline__ float name(const uint4* xv, long long v, uint4 w) { \
    const uint4 x = __ldg(xv + v);                                                      \
    const unsigned int xs[4] = {x.x, x.y, x.z, x.w}, ws[4] = {w.x, w.y, w.z, w.w};      \
    float s = 0.0f;                                                                     \
    _Pragma("unroll") for (int i = 0; i < 4; ++i) {                                     \
      s += cvt((unsigned short)(xs[i] & 0xffff)) * cvt((unsigned short)(ws[i] & 0xffff)); \
      s += cvt((unsigned short)(xs[i] >> 16)) * cvt((unsigned short)(ws[i] >> 16));    \
    }                                                                                   \
    return s;                                                                           \
  }
LUM_GV_DOT_HALVES(lum_gv_dot_f16, lum_h2f)
LUM_GV_DOT_HALVES(lum_gv_dot_bf16, lum_bf2f)
#define LUM_GV_DOT_F32_HALVES(name, cvt)                                                \
  static __device__ __forceinline__ float name(const uint4* xv, long long v, uint4 w) { \
    const uint4 a = __ldg(xv + 2 * v), b = __ldg(xv + 2 * v + 1);                        \
    const unsigned int xs[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};                \
    const unsigned int ws[4] = {w.x, w.y, w.z, w.w};                                    \
    float s = 0.0f;                                                                     \
    _Pragma("unroll") for (int i = 0; i < 4; ++i) {                                     \
      s += __uint_as_float(xs[2 * i]) * cvt((unsigned short)(ws[i] & 0xffff));          \
      s += __uint_as_float(xs[2 * i + 1]) * cvt((unsigned short)(ws[i] >> 16));         \
    }                                                                                   \
    return s;                                                                           \
  }
LUM_GV_DOT_F32_HALVES(lum_gv_dot_f32_f16, lum_h2f)
LUM_GV_DOT_F32_HALVES(lum_gv_dot_f32_bf16, lum_bf2f)

// Up to LUM_GV_MATS matrices of the same K, over the same x, as one launch: their rows
// are numbered one after the other (end: each matrix's last row + 1 in that numbering),
// each matrix with its own rows' stride, its own y, and perhaps a residual r (of y's
// type) added to y as it is stored.
#define LUM_GV_MATS 4
struct LumGvMats {
  const char* w[LUM_GV_MATS];
  void* y[LUM_GV_MATS];
  const void* r[LUM_GV_MATS];
  long long end[LUM_GV_MATS], ldw_bytes[LUM_GV_MATS];
};
// Row `row` of the numbering: its matrix m and the row within it (a select chain, so the
// parameter arrays are not copied to local memory for an indexed read).
static __device__ __forceinline__ int lum_gv_matrix(const LumGvMats& g, long long row,
                                                    long long* local) {
  int m = 0;
  long long first = 0;
  _Pragma("unroll") for (int i = 0; i + 1 < LUM_GV_MATS; ++i) if (row >= g.end[i]) m = i + 1, first = g.end[i];
  *local = row - first;
  return m;
}
template <typename T>
static __device__ __forceinline__ T lum_gv_pick(const T (&a)[LUM_GV_MATS], int m) {
  T v = a[0];
  _Pragma("unroll") for (int i = 1; i < LUM_GV_MATS; ++i) if (m == i) v = a[i];
  return v;
}

// `vecs` counts W's 16-byte vectors per row; y has x's type. A shape's kernels are
// named lum_gemv_<types>_w<warps>_s<split>_u<unroll>.
#define LUM_GEMV(name, Y, dot, load, store, WARPS, SPLIT, UNROLL)                       \
  extern "C" __global__ void __launch_bounds__(32 * WARPS)                              \
      name(const void* __restrict__ x, LumGvMats mats, long long vecs) {                \
    lum_after_prior_grids();                                                            \
    __shared__ float part[WARPS];                                                       \
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;                         \
    const int sub = warp % SPLIT, rows = WARPS / SPLIT;                                 \
    const long long step = 32 * SPLIT, n = mats.end[LUM_GV_MATS - 1];                   \
    const uint4* xv = (const uint4*)x;                                                  \
    for (long long base = (long long)blockIdx.x * rows; base < n;                       \
         base += (long long)gridDim.x * rows) {                                         \
      const long long row = base + warp / SPLIT;                                        \
      long long local = 0;                                                              \
      const int m = lum_gv_matrix(mats, row, &local);                                   \
      float acc = 0.0f;                                                                 \
      if (row < n) {                                                                    \
        const uint4* wv = (const uint4*)(lum_gv_pick(mats.w, m) +                       \
                                         local * lum_gv_pick(mats.ldw_bytes, m));       \
        long long v = lane + 32 * sub;                                                  \
        for (; v + (UNROLL - 1) * step < vecs; v += UNROLL * step) {                    \
          uint4 wr[UNROLL];                                                             \
          _Pragma("unroll") for (int i = 0; i < UNROLL; ++i) wr[i] = lum_gv_stream(wv + v + step * i); \
          _Pragma("unroll") for (int i = 0; i < UNROLL; ++i) acc += dot(xv, v + step * i, wr[i]); \
        }                                                                               \
        for (; v < vecs; v += step) acc += dot(xv, v, lum_gv_stream(wv + v));           \
      }                                                                                 \
      for (int s = 16; s > 0; s >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, s);    \
      if (lane == 0) part[warp] = acc;                                                  \
      __syncthreads();                                                                  \
      if (sub == 0 && lane == 0 && row < n) {                                           \
        float total = 0.0f;                                                             \
        for (int i = 0; i < SPLIT; ++i) total += part[warp + i];                        \
        const Y* r = (const Y*)lum_gv_pick(mats.r, m);                                  \
        ((Y*)lum_gv_pick(mats.y, m))[local] = store(r ? total + load(r[local]) : total); \
      }                                                                                 \
      __syncthreads();  /* part is rewritten for the next rows */                       \
    }                                                                                   \
  }
)GEMV";

// The operand types' kernels: name part, y's type, dot product, y's load and store.
struct Types {
  const char *name, *y, *dot, *load, *store;
};
constexpr Types kTypes[] = {{"f32", "float", "lum_gv_dot_f32", "(float)", "(float)"},
                            {"f16", "unsigned short", "lum_gv_dot_f16", "lum_h2f", "lum_f2h"},
                            {"bf16", "unsigned short", "lum_gv_dot_bf16", "lum_bf2f", "lum_f2bf"},
                            {"f32_f16", "float", "lum_gv_dot_f32_f16", "(float)", "(float)"},
                            {"f32_bf16", "float", "lum_gv_dot_f32_bf16", "(float)", "(float)"}};

std::string kernel_name(const std::string& types, const GemvShape& s) {
  return "lum_gemv_" + types + "_w" + std::to_string(s.warps) + "_s" + std::to_string(s.split) +
         "_u" + std::to_string(s.unroll);
}

}  // namespace

std::string gemv_source(const std::vector<GemvShape>& shapes) {
  std::string source =
      std::string(cuda_prelude()) + std::string(runtime::scalar_prelude()) + kSource;
  for (const GemvShape& s : shapes)
    for (const Types& t : kTypes)
      source += std::string("LUM_GEMV(") + kernel_name(t.name, s) + ", " + t.y + ", " + t.dot +
                ", " + t.load + ", " + t.store + ", " + std::to_string(s.warps) + ", " +
                std::to_string(s.split) + ", " + std::to_string(s.unroll) + ")\n";
  return source;
}

std::string GemvShape::label() const {
  return "warps " + std::to_string(warps) + ", " + std::to_string(split) + " a row, " +
         std::to_string(unroll) + " loads in flight";
}

namespace {

// The kernels' LumGvMats.
struct GemvMats {
  const char* w[kGemvMatrices] = {};
  void* y[kGemvMatrices] = {};
  const void* r[kGemvMatrices] = {};
  long long end[kGemvMatrices] = {}, ldw_bytes[kGemvMatrices] = {};
};

// The kernel name part for the operand types, or nullptr where no kernel multiplies them.
const char* types_of(DType a_type, DType b_type) {
  const auto half = [](DType t) { return t == DType::F16 || t == DType::BF16; };
  if (a_type == b_type && a_type == DType::F32) return "f32";
  if (a_type == b_type && half(a_type)) return a_type == DType::F16 ? "f16" : "bf16";
  if (a_type == DType::F32 && half(b_type)) return b_type == DType::F16 ? "f32_f16" : "f32_bf16";
  return nullptr;
}

// x's address where `a` is one contiguous row of K (batch dims 1), else nullptr.
const char* row_of(const ConcreteView& a, const void* a_data, DType a_type) {
  const size_t rank = a.dims.size();
  if (rank < 3 || a.has_mask() || a.dims[rank - 3] != 1 || a.strides[rank - 2] != 1) return nullptr;
  for (size_t d = 0; d + 3 < rank; ++d)
    if (a.dims[d] != 1) return nullptr;  // one batch
  const auto* x = static_cast<const char*>(a_data) + a.offset * dtype_size(a_type);
  return reinterpret_cast<uintptr_t>(x) % 16 == 0 ? x : nullptr;
}

}  // namespace

bool Gemv::run(const ConcreteView& a, const void* a_data, DType a_type, const ConcreteView& b,
               const void* b_data, DType b_type, void* c_data, const void* residual) {
  single_.resize(1);
  single_[0].view = b;  // (into the kept view: no allocation once it has the room)
  single_[0].data = b_data, single_[0].out = c_data, single_[0].residual = residual;
  return run_shared(a, a_data, a_type, single_, b_type);
}

bool Gemv::run_shared(const ConcreteView& a, const void* a_data, DType a_type,
                      const std::vector<GemvMatrix>& bs, DType b_type) {
  const char* types = types_of(a_type, b_type);
  const char* x = row_of(a, a_data, a_type);
  const size_t rank = a.dims.size();
  if (!types || !x || bs.empty() || bs.size() > kGemvMatrices) return false;
  const int64_t k = a.dims[rank - 2];
  const auto b_size = static_cast<int64_t>(dtype_size(b_type));
  const int64_t per_vec = 16 / b_size;  // elements of a vector of W
  if (k < 1 || k % per_vec != 0) return false;
  GemvMats mats;
  int64_t n = 0;
  for (size_t i = 0; i < bs.size(); ++i) {
    const ConcreteView& b = bs[i].view;
    // W's rows along K, on 16-byte boundaries; every matrix over the same K.
    const int64_t ldw = b.dims.size() == rank ? b.strides[rank - 1] : 0;
    if (b.dims.size() != rank || b.has_mask() || b.dims[rank - 2] != k ||
        b.strides[rank - 2] != 1 || ldw % per_vec != 0 || ldw < k || b.dims[rank - 1] < 1)
      return false;
    mats.w[i] = static_cast<const char*>(bs[i].data) + b.offset * b_size;
    if (reinterpret_cast<uintptr_t>(mats.w[i]) % 16 != 0) return false;
    mats.y[i] = bs[i].out;
    mats.r[i] = bs[i].residual;
    mats.ldw_bytes[i] = ldw * b_size;
    n += b.dims[rank - 1];
    mats.end[i] = n;
  }
  for (size_t i = bs.size(); i < kGemvMatrices; ++i) mats.end[i] = n;
  long long vecs = k / per_vec;
  void* args[] = {&x, &mats, &vecs};
  auto kernel_of = [&](const GemvShape& s) {
    const Module& code = s == kGemvShapes[0] && !every_shape_ ? *module(false) : *module(true);
    return code.kernel(kernel_name(types, s));
  };
  auto launch_kernel = [&](const GemvShape& s, const void* kernel) {
    const int64_t per_block = s.warps / s.split;
    const int64_t blocks =
        std::min<int64_t>((n + per_block - 1) / per_block, int64_t{device_.multiprocessors()} * 64);
    check(device_.launch(kernel, dim3(static_cast<unsigned>(blocks)),
                         dim3(static_cast<unsigned>(32 * s.warps)), args, 0),
          "launching the one-row product");
  };
  auto launch = [&](const GemvShape& s) { launch_kernel(s, kernel_of(s)); };
  const int64_t ldw0 = mats.ldw_bytes[0] / b_size;
  const ShapeKey key{types, n, k, ldw0};
  auto chosen = shape_of_.find(key);
  if (chosen == shape_of_.end()) {
    size_t pick = 0;
    if (searcher_.settings().mode != runtime::SearchMode::Off) {
      // A new matrix shape: its kernel shape is searched.
      runtime::SearchProblem p;
      p.signature = std::string("gemv ") + types + " n=" + std::to_string(n) +
                    " k=" + std::to_string(k) + " ldw=" + std::to_string(ldw0);
      if (bs.size() > 1) p.signature += " matrices=" + std::to_string(bs.size());
      for (const GemvShape& s : kGemvShapes)
        p.candidates.push_back({s.label(), [&, s] { launch(s); }});
      DeviceTrials trials(device_);
      // The warps' partial sums meet in another order: an f32 y moves by a few ulps of
      // the largest terms, a half-precision one by its rounding. (Judged on the first
      // matrix's outputs: the candidates differ only in how a row is read.)
      trials.judge(p, bs[0].out, static_cast<size_t>(mats.end[0]), a_type,
                   a_type == DType::F32 ? 1e-4 : 2e-2);
      pick = searcher_.choose(p).winner;
    }
    chosen = shape_of_.emplace(key, Chosen{pick, kernel_of(kGemvShapes[pick])}).first;
  }
  launch_kernel(kGemvShapes[chosen->second.shape], chosen->second.kernel);
  return true;
}

std::string gemv_module_source(bool every_shape) {
  return gemv_source(every_shape
                         ? std::vector<GemvShape>(std::begin(kGemvShapes), std::end(kGemvShapes))
                         : std::vector<GemvShape>{kGemvShapes[0]});
}

const Module* Gemv::module(bool every_shape) {
  std::unique_ptr<Module>& m = every_shape ? every_shape_ : default_shape_;
  if (!m)
    m = std::make_unique<Module>(
        compile_cubin(gemv_module_source(every_shape), device_.arch()).code);
  return m.get();
}

}  // namespace luminal::cudagen

// ExpertMatMul on the GPU (see expert_products.hpp).
#include "backends/cuda/expert_products.hpp"

#include <algorithm>

#include "backends/cuda/codegen.hpp"
#include "luminal/quant.hpp"

namespace luminal::cudagen {
namespace {

// A warp per output element y[slot, j]: expert ids[slot]'s row j against x's row for the
// slot, eight elements a lane a step (one 16-byte load of half weights, two of f32) where
// k is a multiple of eight, else one. W: 0 f32, 1 f16, 2 bf16.
constexpr const char* kSource = R"EXPERTS(
#define LUM_EX_WARPS 8
template <int W>
LUM_FN float lum_ex_at(const void* w, long long i) {
  if (W == 0) return __ldg((const float*)w + i);
  const uint16_t b = __ldg((const unsigned short*)w + i);
  return W == 1 ? lum_h2f(b) : lum_bf2f(b);
}
template <int W>
LUM_FN float lum_ex_dot8(const void* w, long long at, const float* x) {
  float v[8];
  if (W == 0) {
    const float4 a = __ldg((const float4*)((const float*)w + at)),
                 b = __ldg((const float4*)((const float*)w + at + 4));
    v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
  } else {
    const uint4 p = __ldg((const uint4*)((const uint16_t*)w + at));
    const unsigned h[4] = {p.x, p.y, p.z, p.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      v[2 * i] = W == 1 ? lum_h2f((uint16_t)(h[i] & 0xFFFF)) : lum_bf2f((uint16_t)(h[i] & 0xFFFF));
      v[2 * i + 1] = W == 1 ? lum_h2f((uint16_t)(h[i] >> 16)) : lum_bf2f((uint16_t)(h[i] >> 16));
    }
  }
  const float4 a = __ldg((const float4*)x), b = __ldg((const float4*)(x + 4));
  return v[0] * a.x + v[1] * a.y + v[2] * a.z + v[3] * a.w + v[4] * b.x + v[5] * b.y +
         v[6] * b.z + v[7] * b.w;
}
template <int W>
LUM_FN void lum_expert_gemv(const void* __restrict__ w, const void* __restrict__ ids, int ids64,
                            long long experts, long long slots, long long x_slots,
                            const float* __restrict__ x, float* __restrict__ y, long long n,
                            long long k, long long first) {
  const long long slot = first + blockIdx.y;
  const long long j = (long long)blockIdx.x * LUM_EX_WARPS + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (j >= n) return;
  const long long e = ids64 ? ((const long long*)ids)[slot] : (long long)((const int*)ids)[slot];
  if (e < 0 || e >= experts) {
    if (lane == 0) y[slot * n + j] = __int_as_float(0x7fc00000);
    return;
  }
  const float* xr = x + (slot / slots * x_slots + (x_slots == 1 ? 0 : slot % slots)) * k;
  const long long base = (e * n + j) * k;
  float acc = 0.0f;
  if (k % 8 == 0) {
    for (long long i = 8 * lane; i < k; i += 256) acc += lum_ex_dot8<W>(w, base + i, xr + i);
  } else {
    for (long long i = lane; i < k; i += 32) acc += lum_ex_at<W>(w, base + i) * __ldg(xr + i);
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
  if (lane == 0) y[slot * n + j] = acc;
}
#define LUM_EXPERT_GEMV(NAME, W)                                                              \
  extern "C" __global__ void __launch_bounds__(32 * LUM_EX_WARPS) NAME(                      \
      const void* w, const void* ids, int ids64, long long experts, long long slots,          \
      long long x_slots, const float* x, float* y, long long n, long long k, long long first) { \
    lum_after_prior_grids();                                                                  \
    lum_expert_gemv<W>(w, ids, ids64, experts, slots, x_slots, x, y, n, k, first);            \
  }
LUM_EXPERT_GEMV(lum_expert_gemv_f32, 0)
LUM_EXPERT_GEMV(lum_expert_gemv_f16, 1)
LUM_EXPERT_GEMV(lum_expert_gemv_bf16, 2)
)EXPERTS";

constexpr int64_t kWarps = 8;          // LUM_EX_WARPS: output elements a block
constexpr int64_t kMostSlots = 65535;  // a grid's y dimension

}  // namespace

std::string expert_products_source() {
  return std::string(cuda_prelude()) + kSource;
}

bool ExpertProducts::run(const ConcreteView& x, const void* x_data, const ConcreteView& w,
                         const void* w_data, uint32_t format, const ConcreteView& ids,
                         const void* ids_data, DType ids_type, void* y) {
  if (x.dims.size() != 3 || w.dims.size() != 3 || ids.dims.size() != 2 || x.has_mask() ||
      w.has_mask() || ids.has_mask() || !w.is_dense() || w.offset != 0 || !ids.is_dense() ||
      (ids_type != DType::I32 && ids_type != DType::I64))
    return false;
  Experts e{w_data, w.dims[0], w.dims[1], w.dims[2],
            static_cast<const char*>(ids_data) + ids.offset * static_cast<int64_t>(dtype_size(ids_type)),
            ids_type == DType::I64, ids.dims[0], ids.dims[1], x.dims[1]};
  if (x.dims[2] != e.k || x.dims[0] != e.rows || (e.x_slots != 1 && e.x_slots != e.slots))
    return false;
  // x's rows dense and 16-byte aligned, packed where they are not.
  const int64_t x_rows = e.rows * e.x_slots;
  const float* xp = static_cast<const float*>(x_data) + x.offset;
  if (!x.is_dense() || x.offset % 4 != 0) {
    void* packed = grown(device_, rows_, static_cast<size_t>(x_rows * e.k) * sizeof(float));
    if (!copy_.run(x, x_data, sizeof(float), packed)) return false;
    xp = static_cast<const float*>(packed);
  }
  const auto type = static_cast<GgmlType>(format);
  if (type != GgmlType::F32 && type != GgmlType::F16 && type != GgmlType::BF16)
    return quant_.run_experts(format, e, xp, x_rows, y);
  const int64_t slots_total = e.rows * e.slots;
  if (slots_total == 0 || e.n == 0) return true;
  if (!module_)
    module_ = std::make_unique<Module>(compile_cubin(expert_products_source(), device_.arch()).code);
  const char* name = type == GgmlType::F32   ? "lum_expert_gemv_f32"
                     : type == GgmlType::F16 ? "lum_expert_gemv_f16"
                                             : "lum_expert_gemv_bf16";
  int ids64 = e.ids64 ? 1 : 0;
  long long experts = e.count, slots = e.slots, x_slots = e.x_slots, n = e.n, k = e.k, first = 0;
  const void* ids_at = e.ids;
  void* args[] = {&w_data, &ids_at, &ids64, &experts, &slots, &x_slots, &xp, &y, &n, &k, &first};
  for (; first < slots_total; first += kMostSlots)
    check(device_.launch(module_->kernel(name),
                         dim3(static_cast<unsigned>((e.n + kWarps - 1) / kWarps),
                              static_cast<unsigned>(std::min<int64_t>(kMostSlots, slots_total - first))),
                         dim3(32 * kWarps), args, 0),
          "launching an expert product");
  return true;
}

}  // namespace luminal::cudagen

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
LUM_FN void lum_expert_gemv(const LumStacks& st, const void* __restrict__ ids, int ids64,
                            long long experts, long long slots, long long x_slots,
                            const float* __restrict__ x, float* __restrict__ y, long long width,
                            long long k, long long first) {
  long long block;
  const int m = lum_part_of(st.end, block);
  const long long n = lum_pick(st.n, m), slot = first + blockIdx.y;
  const long long j = block * LUM_EX_WARPS + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (j >= n) return;
  float* out = y + slot * width + lum_pick(st.col, m) + j;
  const long long e = lum_expert_of(ids, ids64, slot);
  if (e < 0 || e >= experts) {
    if (lane == 0) *out = __int_as_float(0x7fc00000);
    return;
  }
  const void* w = lum_pick(st.w, m);
  const float* xr = x + lum_expert_row(slot, slots, x_slots) * k;
  const long long base = (e * n + j) * k;
  float acc = 0.0f;
  if (k % 8 == 0) {
    for (long long i = 8 * lane; i < k; i += 256) acc += lum_ex_dot8<W>(w, base + i, xr + i);
  } else {
    for (long long i = lane; i < k; i += 32) acc += lum_ex_at<W>(w, base + i) * __ldg(xr + i);
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
  if (lane == 0) *out = acc;
}
#define LUM_EXPERT_GEMV(NAME, W)                                                              \
  extern "C" __global__ void __launch_bounds__(32 * LUM_EX_WARPS) NAME(                      \
      LumStacks st, const void* ids, int ids64, long long experts, long long slots,         \
      long long x_slots, const float* x, float* y, long long width, long long k,              \
      long long first) {                                                                      \
    lum_after_prior_grids();                                                                  \
    lum_expert_gemv<W>(st, ids, ids64, experts, slots, x_slots, x, y, width, k, first);       \
  }
LUM_EXPERT_GEMV(lum_expert_gemv_f32, 0)
LUM_EXPERT_GEMV(lum_expert_gemv_f16, 1)
LUM_EXPERT_GEMV(lum_expert_gemv_bf16, 2)
)EXPERTS";

constexpr int64_t kWarps = 8;  // LUM_EX_WARPS: output elements a block

}  // namespace

std::string expert_products_source() {
  return std::string(cuda_prelude()) + kSource;
}

bool expert_products_support(uint32_t format) {
  const auto type = static_cast<GgmlType>(format);
  return type == GgmlType::F32 || type == GgmlType::F16 || type == GgmlType::BF16 ||
         quant_products_support(format);
}

bool ExpertProducts::run(const ConcreteView& x, const void* x_data, const ConcreteView& ids,
                         const void* ids_data, DType ids_type, std::span<const ConcreteView> stacks,
                         std::span<const void* const> stack_data, std::span<const uint32_t> formats,
                         void* y) {
  if (x.dims.size() != 3 || ids.dims.size() != 2 || x.has_mask() || ids.has_mask() ||
      !ids.is_dense() || (ids_type != DType::I32 && ids_type != DType::I64) || stacks.empty())
    return false;
  Experts e{};
  e.count = stacks[0].dims[0], e.k = x.dims[2];
  e.ids =
      static_cast<const char*>(ids_data) + ids.offset * static_cast<int64_t>(dtype_size(ids_type));
  e.ids64 = ids_type == DType::I64;
  e.rows = ids.dims[0], e.slots = ids.dims[1], e.x_slots = x.dims[1];
  if (x.dims[0] != e.rows || (e.x_slots != 1 && e.x_slots != e.slots)) return false;
  for (const ConcreteView& w : stacks) {
    if (w.dims.size() != 3 || w.has_mask() || !w.is_dense() || w.offset != 0 ||
        w.dims[0] != e.count || w.dims[2] != e.k)
      return false;
    e.width += w.dims[1];
  }
  // x's rows dense and 16-byte aligned, packed where they are not.
  const int64_t x_rows = e.rows * e.x_slots;
  const float* xp = static_cast<const float*>(x_data) + x.offset;
  if (!x.is_dense() || x.offset % 4 != 0) {
    void* packed = grown(device_, rows_, static_cast<size_t>(x_rows * e.k) * sizeof(float));
    if (!copy_.run(x, x_data, sizeof(float), packed)) return false;
    xp = static_cast<const float*>(packed);
  }
  // Each run of stacks of one format (up to kExpertStacks) as one launch. (Formats are
  // checked first; should a later run still refuse, the caller's fallback writes all of y.)
  for (const uint32_t f : formats)
    if (!expert_products_support(f)) return false;
  int64_t column = 0;
  for (size_t first = 0, last = 0; first < stacks.size(); first = last) {
    Experts run = e;
    run.stacks = 0;
    for (last = first;
         last < stacks.size() && formats[last] == formats[first] && run.stacks < kExpertStacks;
         ++last) {
      run.stack[run.stacks++] = {stack_data[last], stacks[last].dims[1], column};
      column += stacks[last].dims[1];
    }
    const auto type = static_cast<GgmlType>(formats[first]);
    const bool plain = type == GgmlType::F32 || type == GgmlType::F16 || type == GgmlType::BF16;
    if (!(plain ? run_float(formats[first], run, xp, y)
                : quant_.run_experts(formats[first], run, xp, x_rows, y)))
      return false;
  }
  return true;
}

bool ExpertProducts::run_float(uint32_t format, const Experts& e, const float* x, void* y) {
  if (reinterpret_cast<uintptr_t>(x) % 16 != 0) return false;
  const int64_t slots_total = e.rows * e.slots;
  if (slots_total == 0 || e.width == 0) return true;
  if (!module_)
    module_ =
        std::make_unique<Module>(compile_cubin(expert_products_source(), device_.arch()).code);
  const auto type = static_cast<GgmlType>(format);
  const char* name = type == GgmlType::F32   ? "lum_expert_gemv_f32"
                     : type == GgmlType::F16 ? "lum_expert_gemv_f16"
                                             : "lum_expert_gemv_bf16";
  StackParams st{};
  const int64_t blocks = stack_params(e, kWarps, st);
  int ids64 = e.ids64 ? 1 : 0;
  long long experts = e.count, slots = e.slots, x_slots = e.x_slots, width = e.width, k = e.k,
            first = 0;
  const void* ids = e.ids;
  void* args[] = {&st, &ids, &ids64, &experts, &slots, &x_slots, &x, &y, &width, &k, &first};
  for (; first < slots_total; first += kMostGridY)
    check(device_.launch(
              module_->kernel(name),
              dim3(static_cast<unsigned>(blocks),
                   static_cast<unsigned>(std::min<int64_t>(kMostGridY, slots_total - first))),
              dim3(32 * kWarps), args, 0),
          "launching an expert product");
  return true;
}

}  // namespace luminal::cudagen

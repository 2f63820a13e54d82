#include "backends/cuda/top_k.hpp"

#include "backends/cuda/codegen.hpp"

namespace luminal::cudagen {
namespace {

constexpr const char* kSource = R"TOPK(
#define LUM_TK_THREADS 1024
#define LUM_TK_MOST 1024
#define LUM_TK_PER 4  // keys a thread loads at once (four loads in flight, not one)

// A value's key: larger values have larger keys (the sign bit flipped for positives, every
// bit for negatives), -0 is +0, and NaN is 0, below everything.
LUM_FN unsigned lum_tk_key(float v) {
  if (v != v) return 0u;
  if (v == 0.0f) v = 0.0f;
  const unsigned u = __float_as_uint(v);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}
struct LumTkF32 {
  const float* p;
  __device__ __forceinline__ unsigned key(long long i) const { return lum_tk_key(p[i]); }
};
struct LumTkF16 {
  const unsigned short* p;
  __device__ __forceinline__ unsigned key(long long i) const { return lum_tk_key(lum_h2f(p[i])); }
};
struct LumTkBF16 {
  const unsigned short* p;
  __device__ __forceinline__ unsigned key(long long i) const { return lum_tk_key(lum_bf2f(p[i])); }
};

// One row's k largest (k <= LUM_TK_MOST) into out, largest first, the lower position
// first among equal keys. The k-th largest key is found 8 bits at a time from the top,
// each pass counting the keys that still match the bits found so far; then the keys above
// it, and the first of those equal to it in position order, are gathered and sorted.
template <class Row>
LUM_FN void lum_tk_row(const Row& row, long long n, int k, int* out) {
  __shared__ unsigned hist[256], keys[LUM_TK_MOST];
  __shared__ int ids[LUM_TK_MOST], warp_counts[LUM_TK_PER][LUM_TK_THREADS / 32];
  __shared__ unsigned s_prefix;
  __shared__ int s_left, s_above, s_equal, s_done;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  unsigned prefix = 0u, mask = 0u;
  int left = k;  // of the k, those still to be found among the keys matching prefix
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (int b = tid; b < 256; b += blockDim.x) hist[b] = 0u;
    __syncthreads();
    // (Whole warps every time; a thread's keys LUM_TK_THREADS apart, for coalesced loads.)
    for (long long base = 0; base < n; base += LUM_TK_PER * blockDim.x) {
      unsigned kv[LUM_TK_PER];
#pragma unroll
      for (int e = 0; e < LUM_TK_PER; ++e) {
        const long long i = base + e * blockDim.x + tid;
        kv[e] = i < n ? row.key(i) : 0u;
      }
#pragma unroll
      for (int e = 0; e < LUM_TK_PER; ++e) {
        const bool in = base + e * blockDim.x + tid < n && (kv[e] & mask) == prefix;
        if (!__any_sync(0xffffffffu, in)) continue;  // (past the first pass, most warps)
        const unsigned digit = (kv[e] >> shift) & 255u;
        // Lanes of one digit add once: a hot bin would take 32 atomics one after another.
        const unsigned peers = __match_any_sync(0xffffffffu, in ? digit : 256u);
        if (in && lane == __ffs(peers) - 1) atomicAdd(&hist[digit], (unsigned)__popc(peers));
      }
    }
    __syncthreads();
    if (tid == 0) {
      int above = 0, d = 255;
      for (; d > 0 && above + (int)hist[d] < left; --d) above += (int)hist[d];
      s_left = left - above;
      s_prefix = prefix | ((unsigned)d << shift);
    }
    __syncthreads();
    left = s_left, prefix = s_prefix, mask |= 255u << shift;
  }
  // prefix is now the k-th largest key: k - left keys are above it; the first left of
  // those equal to it complete the k.
  const int above_count = k - left;
  if (tid == 0) s_above = 0, s_equal = 0;
  __syncthreads();
  const int warps = (int)(blockDim.x >> 5);
  for (long long base = 0; base < n; base += LUM_TK_PER * blockDim.x) {
    unsigned kv[LUM_TK_PER], equal[LUM_TK_PER];
#pragma unroll
    for (int e = 0; e < LUM_TK_PER; ++e) {
      const long long i = base + e * blockDim.x + tid;
      kv[e] = i < n ? row.key(i) : 0u;
    }
#pragma unroll
    for (int e = 0; e < LUM_TK_PER; ++e) {
      const long long i = base + e * blockDim.x + tid;
      if (i < n && kv[e] > prefix) {
        const int at = atomicAdd(&s_above, 1);
        keys[at] = kv[e], ids[at] = (int)i;
      }
      equal[e] = __ballot_sync(0xffffffffu, i < n && kv[e] == prefix);
      if (lane == 0) warp_counts[e][warp] = __popc(equal[e]);
    }
    __syncthreads();
    // The equal keys in position order: those of earlier parts, warps and lanes first.
    int before = s_equal;
#pragma unroll
    for (int e = 0; e < LUM_TK_PER; ++e) {
      int at = before + __popc(equal[e] & ((1u << lane) - 1u));
      for (int w = 0; w < warp; ++w) at += warp_counts[e][w];
      if ((equal[e] >> lane & 1u) && at < left)
        keys[above_count + at] = kv[e], ids[above_count + at] = (int)(base + e * blockDim.x + tid);
      for (int w = 0; w < warps; ++w) before += warp_counts[e][w];
    }
    __syncthreads();
    if (tid == 0) s_equal = before, s_done = before >= left && s_above == above_count;
    __syncthreads();
    if (s_done) break;  // (read by every thread before thread 0 writes it again)
  }
  // Bitonic sort of the k (padded to a power of two with entries that sort last).
  int padded = 1;
  while (padded < k) padded <<= 1;
  for (int j = k + tid; j < padded; j += blockDim.x) keys[j] = 0u, ids[j] = 0x7fffffff;
  __syncthreads();
  for (int size = 2; size <= padded; size <<= 1)
    for (int stride = size >> 1; stride > 0; stride >>= 1) {
      for (int t = tid; t < padded; t += blockDim.x) {
        const int p = t ^ stride;
        if (p <= t) continue;
        const bool p_first = keys[p] > keys[t] || (keys[p] == keys[t] && ids[p] < ids[t]);
        const bool t_first = keys[t] > keys[p] || (keys[t] == keys[p] && ids[t] < ids[p]);
        if ((t & size) == 0 ? p_first : t_first) {
          const unsigned kk = keys[t];
          const int ii = ids[t];
          keys[t] = keys[p], ids[t] = ids[p];
          keys[p] = kk, ids[p] = ii;
        }
      }
      __syncthreads();
    }
  for (int j = tid; j < k; j += blockDim.x) out[j] = ids[j];
}

#define LUM_TOP_K(name, Row, T)                                                              \
  extern "C" __global__ void __launch_bounds__(LUM_TK_THREADS)                               \
      name(const T* __restrict__ x, long long n, int k, int* __restrict__ out) {             \
    lum_after_prior_grids();                                                                 \
    lum_tk_row(Row{x + blockIdx.x * n}, n, k, out + (long long)blockIdx.x * k);              \
  }
LUM_TOP_K(lum_top_k_f32, LumTkF32, float)
LUM_TOP_K(lum_top_k_f16, LumTkF16, unsigned short)
LUM_TOP_K(lum_top_k_bf16, LumTkBF16, unsigned short)
)TOPK";

}  // namespace

std::string top_k_source() {
  return std::string(cuda_prelude()) + kSource;
}

bool TopK::run(const ConcreteView& x, const void* data, DType type, int64_t k, void* out) {
  if (x.dims.empty() || k < 1 || k > kTopKMost || x.has_mask() || !x.is_dense()) return false;
  const char* name = type == DType::F32    ? "lum_top_k_f32"
                     : type == DType::F16  ? "lum_top_k_f16"
                     : type == DType::BF16 ? "lum_top_k_bf16"
                                           : nullptr;
  if (!name) return false;
  long long n = x.dims.back();
  int64_t rows = 1;
  for (size_t d = 0; d + 1 < x.dims.size(); ++d) rows *= x.dims[d];
  if (rows == 0) return true;
  if (!module_)
    module_ = std::make_unique<Module>(compile_cubin(top_k_source(), device_.arch()).code);
  const char* x_at =
      static_cast<const char*>(data) + x.offset * static_cast<int64_t>(dtype_size(type));
  int kk = static_cast<int>(k);
  void* args[] = {&x_at, &n, &kk, &out};
  check(
      device_.launch(module_->kernel(name), dim3(static_cast<unsigned>(rows)), dim3(1024), args, 0),
      "launching top_k");
  return true;
}

}  // namespace luminal::cudagen

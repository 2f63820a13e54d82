#include "backends/cuda/top_k.hpp"

#include <algorithm>
#include <span>

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
// What a selection reads: the key of its i-th entry and that entry's position in the row.
// A slice of a row of values (`first`: the slice's start in the row), or the candidates
// the slices picked.
struct LumTkF32 {
  const float* p;
  long long first;
  __device__ __forceinline__ unsigned key(long long i) const { return lum_tk_key(p[i]); }
  __device__ __forceinline__ int id(long long i) const { return (int)(first + i); }
};
struct LumTkF16 {
  const unsigned short* p;
  long long first;
  __device__ __forceinline__ unsigned key(long long i) const { return lum_tk_key(lum_h2f(p[i])); }
  __device__ __forceinline__ int id(long long i) const { return (int)(first + i); }
};
struct LumTkBF16 {
  const unsigned short* p;
  long long first;
  __device__ __forceinline__ unsigned key(long long i) const { return lum_tk_key(lum_bf2f(p[i])); }
  __device__ __forceinline__ int id(long long i) const { return (int)(first + i); }
};
struct LumTkCandidates {
  const unsigned* keys;
  const int* ids;
  __device__ __forceinline__ unsigned key(long long i) const { return keys[i]; }
  __device__ __forceinline__ int id(long long i) const { return ids[i]; }
};

struct LumTkShared {
  unsigned hist[256], keys[LUM_TK_MOST];
  int ids[LUM_TK_MOST], warp_counts[LUM_TK_PER][LUM_TK_THREADS / 32];
  unsigned prefix;
  int left, above, equal, done;
};

// The keys of entries base + e * blockDim.x + this thread (e < LUM_TK_PER): a thread's
// keys a block apart, for coalesced loads; 0 past n.
template <class Row>
LUM_FN void lum_tk_load(const Row& row, long long base, long long n, unsigned (&kv)[LUM_TK_PER]) {
#pragma unroll
  for (int e = 0; e < LUM_TK_PER; ++e) {
    const long long i = base + e * blockDim.x + threadIdx.x;
    kv[e] = i < n ? row.key(i) : 0u;
  }
}

// The k largest of n entries (k <= LUM_TK_MOST) into s.keys and s.ids[0, k), largest
// first, the lower position first among equal keys. The k-th largest key is found 8 bits
// at a time from the top, each pass counting the keys that still match the bits found so
// far; then the keys above it, and the first of those equal to it in entry order, are
// gathered and sorted. Where equal keys' entry order is their position order (a row, or
// the slices' candidates: each slice's sorted, the slices in row order), ties go to the
// lower position.
template <class Row>
LUM_FN void lum_tk_select(const Row& row, long long n, int k, LumTkShared& s) {
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const long long step = LUM_TK_PER * blockDim.x;
  unsigned prefix = 0u, mask = 0u;
  int left = k;  // of the k, those still to be found among the keys matching prefix
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (int b = tid; b < 256; b += blockDim.x) s.hist[b] = 0u;
    __syncthreads();
    for (long long base = 0; base < n; base += step) {  // (whole warps every time)
      unsigned kv[LUM_TK_PER];
      lum_tk_load(row, base, n, kv);
#pragma unroll
      for (int e = 0; e < LUM_TK_PER; ++e) {
        const bool in = base + e * blockDim.x + tid < n && (kv[e] & mask) == prefix;
        if (!__any_sync(0xffffffffu, in)) continue;  // (past the first pass, most warps)
        const unsigned digit = (kv[e] >> shift) & 255u;
        // Lanes of one digit add once: a hot bin would take 32 atomics one after another.
        const unsigned peers = __match_any_sync(0xffffffffu, in ? digit : 256u);
        if (in && lane == __ffs(peers) - 1) atomicAdd(&s.hist[digit], (unsigned)__popc(peers));
      }
    }
    __syncthreads();
    // The digit where the count from the top reaches `left`: lane l sums bins 255 - 8 l
    // down, the lanes' sums are scanned, and the lane where it is reached walks its bins.
    if (warp == 0) {
      const int top = 255 - 8 * lane;
      int sum = 0;
#pragma unroll
      for (int j = 0; j < 8; ++j) sum += (int)s.hist[top - j];
      int through = sum;  // the bins from 255 down to this lane's last
#pragma unroll
      for (int off = 1; off < 32; off <<= 1) {
        const int t = __shfl_up_sync(0xffffffffu, through, off);
        if (lane >= off) through += t;
      }
      const unsigned reached = __ballot_sync(0xffffffffu, through >= left);
      if (lane == (reached ? __ffs(reached) - 1 : 31)) {
        int d = top, above = through - sum;
        for (int j = 0; j < 7 && above + (int)s.hist[d] < left; ++j) above += (int)s.hist[d--];
        s.left = left - above;
        s.prefix = prefix | ((unsigned)d << shift);
      }
    }
    __syncthreads();
    left = s.left, prefix = s.prefix, mask |= 255u << shift;
  }
  // prefix is now the k-th largest key: k - left keys are above it; the first left of
  // those equal to it complete the k.
  const int above_count = k - left;
  if (tid == 0) s.above = 0, s.equal = 0;
  __syncthreads();
  const int warps = (int)(blockDim.x >> 5);
  for (long long base = 0; base < n; base += step) {
    unsigned kv[LUM_TK_PER], equal[LUM_TK_PER];
    lum_tk_load(row, base, n, kv);
#pragma unroll
    for (int e = 0; e < LUM_TK_PER; ++e) {
      const long long i = base + e * blockDim.x + tid;
      if (i < n && kv[e] > prefix) {
        const int at = atomicAdd(&s.above, 1);
        s.keys[at] = kv[e], s.ids[at] = row.id(i);
      }
      equal[e] = __ballot_sync(0xffffffffu, i < n && kv[e] == prefix);
      if (lane == 0) s.warp_counts[e][warp] = __popc(equal[e]);
    }
    __syncthreads();
    // The equal keys in entry order: those of earlier parts, warps and lanes first.
    int before = s.equal;
#pragma unroll
    for (int e = 0; e < LUM_TK_PER; ++e) {
      int at = before + __popc(equal[e] & ((1u << lane) - 1u));
      for (int w = 0; w < warp; ++w) at += s.warp_counts[e][w];
      if ((equal[e] >> lane & 1u) && at < left)
        s.keys[above_count + at] = kv[e],
                        s.ids[above_count + at] = row.id(base + e * blockDim.x + tid);
      for (int w = 0; w < warps; ++w) before += s.warp_counts[e][w];
    }
    __syncthreads();
    if (tid == 0) s.equal = before, s.done = before >= left && s.above == above_count;
    __syncthreads();
    if (s.done) break;  // (read by every thread before thread 0 writes it again)
  }
  // Bitonic sort of the k (padded to a power of two with entries that sort last).
  int padded = 1;
  while (padded < k) padded <<= 1;
  for (int j = k + tid; j < padded; j += blockDim.x) s.keys[j] = 0u, s.ids[j] = 0x7fffffff;
  __syncthreads();
  for (int size = 2; size <= padded; size <<= 1)
    for (int stride = size >> 1; stride > 0; stride >>= 1) {
      for (int t = tid; t < padded; t += blockDim.x) {
        const int p = t ^ stride;
        if (p <= t) continue;
        const unsigned kt = s.keys[t], kp = s.keys[p];
        const int it = s.ids[t], ip = s.ids[p];
        const bool p_first = kp > kt || (kp == kt && ip < it);
        if ((t & size) == 0 ? p_first : !p_first) {
          s.keys[t] = kp, s.ids[t] = ip;
          s.keys[p] = kt, s.ids[p] = it;
        }
      }
      __syncthreads();
    }
}

// A block a row: out[row, :k].
#define LUM_TOP_K(name, Row, T)                                                              \
  extern "C" __global__ void __launch_bounds__(LUM_TK_THREADS)                               \
      name(const T* __restrict__ x, long long n, int k, int* __restrict__ out) {             \
    lum_after_prior_grids();                                                                 \
    __shared__ LumTkShared s;                                                                \
    lum_tk_select(Row{x + blockIdx.x * n, 0}, n, k, s);                                      \
    for (int j = threadIdx.x; j < k; j += blockDim.x) out[(long long)blockIdx.x * k + j] = s.ids[j]; \
  }
// A block a slice of `slice` values of a row (blockIdx.y): the slice's min(k, its length)
// largest, sorted, as candidates at (row * gridDim.x + slice) * k of keys and ids.
#define LUM_TOP_K_SLICES(name, Row, T)                                                       \
  extern "C" __global__ void __launch_bounds__(LUM_TK_THREADS)                               \
      name(const T* __restrict__ x, long long n, int k, long long slice,                     \
           unsigned* __restrict__ keys, int* __restrict__ ids) {                             \
    lum_after_prior_grids();                                                                 \
    __shared__ LumTkShared s;                                                                \
    const long long first = blockIdx.x * slice, length = min(slice, n - first);              \
    const int kk = (int)min((long long)k, length);                                           \
    lum_tk_select(Row{x + blockIdx.y * n + first, first}, length, kk, s);                    \
    const long long at = ((long long)blockIdx.y * gridDim.x + blockIdx.x) * k;               \
    for (int j = threadIdx.x; j < kk; j += blockDim.x) keys[at + j] = s.keys[j], ids[at + j] = s.ids[j]; \
  }
LUM_TOP_K(lum_top_k_f32, LumTkF32, float)
LUM_TOP_K(lum_top_k_f16, LumTkF16, unsigned short)
LUM_TOP_K(lum_top_k_bf16, LumTkBF16, unsigned short)
LUM_TOP_K_SLICES(lum_top_k_slices_f32, LumTkF32, float)
LUM_TOP_K_SLICES(lum_top_k_slices_f16, LumTkF16, unsigned short)
LUM_TOP_K_SLICES(lum_top_k_slices_bf16, LumTkBF16, unsigned short)

// A warp a row of at most LUM_TK_WARP_MOST values, for few picks (a router's experts): k
// rounds of a warp-wide maximum over each lane's values (LUM_TK_WARP_MOST / 32 a lane, in
// registers). A value's rank is its key, then the lower position, in 64 bits; a picked
// value's rank becomes 0, below every unpicked one (a NaN's key is 0, but its position
// part is not).
#define LUM_TK_WARP_MOST 1024
#define LUM_TK_WARP_ROWS 4  // warps (rows) a block
template <class Row>
LUM_FN void lum_tk_warp(const Row& row, long long n, int k, int* __restrict__ out) {
  constexpr int kPer = LUM_TK_WARP_MOST / 32;
  const int lane = threadIdx.x % 32;
  unsigned long long rank[kPer];
#pragma unroll
  for (int e = 0; e < kPer; ++e) {
    const long long i = e * 32 + lane;
    rank[e] = i < n ? (unsigned long long)row.key(i) << 32 | (0xFFFFFFFFu - (unsigned)i) : 0ull;
  }
  for (int j = 0; j < k; ++j) {
    unsigned long long best = 0;
#pragma unroll
    for (int e = 0; e < kPer; ++e) best = rank[e] > best ? rank[e] : best;
    unsigned long long top = best;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
      const unsigned long long other = __shfl_xor_sync(0xffffffffu, top, o);
      top = other > top ? other : top;
    }
    if (best == top) {  // the one lane holding it (positions differ)
#pragma unroll
      for (int e = 0; e < kPer; ++e) rank[e] = rank[e] == top ? 0ull : rank[e];
      out[j] = (int)(0xFFFFFFFFu - (unsigned)(top & 0xFFFFFFFFull));
    }
  }
}
#define LUM_TOP_K_WARP(name, Row, T)                                                         \
  extern "C" __global__ void __launch_bounds__(32 * LUM_TK_WARP_ROWS)                        \
      name(const T* __restrict__ x, long long rows, long long n, int k, int* __restrict__ out) { \
    lum_after_prior_grids();                                                                 \
    const long long r = (long long)blockIdx.x * LUM_TK_WARP_ROWS + threadIdx.x / 32;         \
    if (r < rows) lum_tk_warp(Row{x + r * n, 0}, n, k, out + r * k);                         \
  }
LUM_TOP_K_WARP(lum_top_k_warp_f32, LumTkF32, float)
LUM_TOP_K_WARP(lum_top_k_warp_f16, LumTkF16, unsigned short)
LUM_TOP_K_WARP(lum_top_k_warp_bf16, LumTkBF16, unsigned short)

// A block a row: out[row, :k] from the `count` candidates of its slices (`stride` apart).
extern "C" __global__ void __launch_bounds__(LUM_TK_THREADS)
    lum_top_k_merge(const unsigned* __restrict__ keys, const int* __restrict__ ids,
                    long long count, long long stride, int k, int* __restrict__ out) {
  lum_after_prior_grids();
  __shared__ LumTkShared s;
  const long long row = blockIdx.x;
  lum_tk_select(LumTkCandidates{keys + row * stride, ids + row * stride}, count, k, s);
  for (int j = threadIdx.x; j < k; j += blockDim.x) out[row * k + j] = s.ids[j];
}
)TOPK";

constexpr int64_t kWarpRows = 4;  // LUM_TK_WARP_ROWS

}  // namespace

std::string top_k_source() {
  return std::string(cuda_prelude()) + kSource;
}

bool TopK::run(const ConcreteView& x, const void* data, DType type, int64_t k, void* out) {
  if (x.dims.empty() || k < 1 || k > kTopKMost || x.has_mask() || !x.is_dense()) return false;
  const char* suffix = type == DType::F32    ? "f32"
                       : type == DType::F16  ? "f16"
                       : type == DType::BF16 ? "bf16"
                                             : nullptr;
  if (!suffix) return false;
  long long n = x.dims.back();
  int64_t rows = 1;
  for (size_t d = 0; d + 1 < x.dims.size(); ++d) rows *= x.dims[d];
  if (rows == 0) return true;
  if (!module_)
    module_ = std::make_unique<Module>(compile_cubin(top_k_source(), device_.arch()).code);
  const void* x_at =
      static_cast<const char*>(data) + x.offset * static_cast<int64_t>(dtype_size(type));
  int kk = static_cast<int>(k);
  const std::string suffixed = std::string("_") + suffix;
  auto launch = [&](const std::string& name, dim3 grid, std::span<void* const> args) {
    check(device_.launch(module_->kernel(name.c_str()), grid, dim3(1024), args, 0),
          "launching top_k");
  };
  // A short row and few picks (a router's choice of experts): a warp a row.
  if (n <= kTopKWarpMost && k <= kTopKWarpPicks) {
    long long rows_arg = rows;
    void* args[] = {&x_at, &rows_arg, &n, &kk, &out};
    check(device_.launch(module_->kernel(("lum_top_k_warp" + suffixed).c_str()),
                         dim3(static_cast<unsigned>((rows + kWarpRows - 1) / kWarpRows)),
                         dim3(static_cast<unsigned>(32 * kWarpRows)), args, 0),
          "launching top_k");
    return true;
  }
  // A long row and too few rows to fill the GPU: slices of the row pick their candidates
  // side by side, then one block a row picks from those (one block over a 128k-entry
  // vocabulary took 0.35 ms).
  long long slice = std::max<int64_t>(kTopKSliceLeast, 4 * k);
  const int64_t slices = (n + slice - 1) / slice;
  if (slices < 2 || rows * 2 > device_.multiprocessors()) {
    void* args[] = {&x_at, &n, &kk, &out};
    launch("lum_top_k" + suffixed, dim3(static_cast<unsigned>(rows)), args);
    return true;
  }
  long long stride = slices * k,
            count = (slices - 1) * k + std::min<int64_t>(k, n - (slices - 1) * slice);
  auto* keys = static_cast<unsigned*>(
      grown(device_, candidates_, static_cast<size_t>(rows * stride) * 2 * sizeof(uint32_t)));
  int* ids = reinterpret_cast<int*>(keys + rows * stride);
  void* slice_args[] = {&x_at, &n, &kk, &slice, &keys, &ids};
  launch("lum_top_k_slices" + suffixed,
         dim3(static_cast<unsigned>(slices), static_cast<unsigned>(rows)), slice_args);
  void* merge_args[] = {&keys, &ids, &count, &stride, &kk, &out};
  launch("lum_top_k_merge", dim3(static_cast<unsigned>(rows)), merge_args);
  return true;
}

}  // namespace luminal::cudagen

// What the two attention kernels share (see attention_common.hpp).
#include "backends/cuda/attention_common.hpp"

#include "backends/cuda/codegen.hpp"
#include "runtime/element_writer.hpp"

namespace luminal::cudagen {
namespace {

constexpr const char* kCommonSource = R"ATTN(
struct LumAttnArgs {
  const void *q, *k, *v; const unsigned char* mask;
  void* out; float* partials;
  long long q_off, k_off, v_off, m_off;
  long long q_d, k_d, v_d;
  long long k_t, v_t, m_t;
  long long keys, keys_per_split, splits, shared_rows, row_tiles;
  long long kv_rank, sh_rank;
  unsigned char* tiles;
  long long key_tiles, mask_points;
  long long kv_dim[4], kv_q[4], kv_k[4], kv_v[4], kv_m[4], kv_o[4];
  long long sh_dim[4], sh_q[4], sh_m[4], sh_o[4];
  float scale, unused;
};
struct lum_at_f32 {
  typedef float T;
  static __device__ __forceinline__ float get(float x) { return x; }
  static __device__ __forceinline__ void put(void* p, long long i, float x) { ((float*)p)[i] = x; }
};
struct lum_at_f16 {
  typedef uint16_t T;
  static __device__ __forceinline__ float get(uint16_t x) { return lum_h2f(x); }
  static __device__ __forceinline__ void put(void* p, long long i, float x) { ((uint16_t*)p)[i] = lum_f2h(x); }
};
struct lum_at_bf16 {
  typedef uint16_t T;
  static __device__ __forceinline__ float get(uint16_t x) { return lum_bf2f(x); }
  static __device__ __forceinline__ void put(void* p, long long i, float x) { ((uint16_t*)p)[i] = lum_f2bf(x); }
};

// A row's offsets of q, mask and output, given its kv point's: the row decomposed over
// the dims keys and values do not vary along.
LUM_FN void lum_at_row(const LumAttnArgs& a, long long row, long long& q, long long& m, long long& o) {
  for (long long i = a.sh_rank - 1; i >= 0; --i) {
    const long long x = row % a.sh_dim[i];
    row /= a.sh_dim[i];
    q += x * a.sh_q[i], m += x * a.sh_m[i], o += x * a.sh_o[i];
  }
}
// Offsets of a kv point (index `p`): q, k, v, mask and output.
LUM_FN void lum_at_point(const LumAttnArgs& a, long long p, long long& q, long long& k, long long& v,
                          long long& m, long long& o) {
  q = a.q_off, k = a.k_off, v = a.v_off, m = a.m_off, o = 0;
  for (long long i = a.kv_rank - 1; i >= 0; --i) {
    const long long x = p % a.kv_dim[i];
    p /= a.kv_dim[i];
    k += x * a.kv_k[i], v += x * a.kv_v[i], q += x * a.kv_q[i], m += x * a.kv_m[i], o += x * a.kv_o[i];
  }
}

// Split rows: each piece's output rescaled to the largest max, over the rescaled sums. A
// piece without kept keys (max -inf, sum 0, output 0) weighs 0; a row without any comes
// out NaN, as the decomposition's 0 / 0 does. A block per row: the first warp finds the
// pieces' weights once, then every thread sums its output elements over them.
extern "C" __global__ void __launch_bounds__(LUM_AT_THREADS)
    lum_attention_combine(const float* __restrict__ partials, void* __restrict__ out,
                          long long rows, long long splits) {
  __shared__ float weight[LUM_AT_MAX_SPLITS];
  __shared__ float scale;
  const long long width = LUM_AT_DV + 2;
  const int tid = threadIdx.x;
  for (long long row = blockIdx.x; row < rows; row += gridDim.x) {
    const float* p = partials + row * splits * width;
    if (tid < 32) {
      float top = __int_as_float(0xff800000), total = 0.0f;
      for (long long s = tid; s < splits; s += 32) top = fmaxf(top, p[s * width + LUM_AT_DV]);
      for (int o = 16; o > 0; o >>= 1) top = fmaxf(top, __shfl_xor_sync(0xffffffffu, top, o));
      for (long long s = tid; s < splits; s += 32) {
        const float w = exp2f(p[s * width + LUM_AT_DV] - top);
        weight[s] = w;
        total = fmaf(w, p[s * width + LUM_AT_DV + 1], total);
      }
      for (int o = 16; o > 0; o >>= 1) total += __shfl_xor_sync(0xffffffffu, total, o);
      if (tid == 0) scale = 1.0f / total;
    }
    __syncthreads();
    for (int j = tid; j < LUM_AT_DV; j += LUM_AT_THREADS) {
      float o = 0.0f;
#pragma unroll 16
      for (long long s = 0; s < splits; ++s) o = fmaf(weight[s], p[s * width + j], o);
      LUM_AT_O::put(out, row * LUM_AT_DV + j, o * scale);
    }
    __syncthreads();  // weight is rewritten for the next row
  }
}
)ATTN";

}  // namespace

std::string attention_program(const std::vector<std::pair<std::string, std::string>>& defines,
                              std::string_view kernel) {
  std::string source = std::string(cuda_prelude()) + std::string(runtime::scalar_prelude());
  for (const auto& [name, value] : defines) source += "#define " + name + " " + value + "\n";
  return source + kCommonSource + std::string(kernel);
}

const char* attention_element(DType t) {
  return t == DType::F32 ? "lum_at_f32" : t == DType::F16 ? "lum_at_f16" : "lum_at_bf16";
}

}  // namespace luminal::cudagen

// The Attention kernel on the GPU (see attention.hpp): the op's geometry, the choice
// between the tensor-core kernels (attention_wgmma.cpp on Hopper, attention_mma.cpp:
// prompts), the streaming kernel
// (attention_stream.cpp: decoding and short prompts on sm_80 on, rows of 16-byte
// pieces) and the one on CUDA cores here (the rest), key splits and their combine.
//
// The op's batch dims split in two: those the keys and values vary along (batch, key
// heads) and those they do not (the query heads of one key head, the query positions).
// A block takes one point of the first kind, a tile of query rows of the second, and a
// range of keys: each key and value is then read once for all the rows that share it.
// Here, tiles of up to `rows` rows; keys go in chunks of 128: a group of `lanes` threads
// takes a key's dot products with every row (each thread a slice of the head dim, summed
// by shuffles), the chunk's scores update each row's running max and sum, and the same
// groups add the weighted values into per-thread slices of the output. Keys are loaded
// eight at a time whether masked or not (so no load waits for the mask); masked keys'
// values are not read. When there are too few (kv point, tile) pairs to fill the GPU
// (decoding: one per key head), the keys are split between blocks, each writes its rows'
// max, sum and unnormalised output, and a second kernel combines them (flash-decoding:
// lum_attention_combine, attention_common.cpp).
#include "backends/cuda/attention.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <future>
#include <limits>
#include <numbers>
#include <span>
#include <string>

#include "backends/cuda/attention_common.hpp"
#include "backends/cuda/attention_mma.hpp"
#include "backends/cuda/attention_stream.hpp"
#include "backends/cuda/attention_wgmma.hpp"
#include "backends/cuda/codegen.hpp"
#include "backends/cuda/device_trials.hpp"

namespace luminal::cudagen {
namespace {

// Keys per chunk (given to the source as LUM_AT_CHUNK; this kernel's key splits are whole
// chunks) and query rows per block of the kernel on CUDA cores.
constexpr int kThreads = kAttentionThreads, kChunk = 128, kMaxDims = kAttentionMaxDims,
              kMaxRows = 8;
constexpr int64_t kMaxSplits = kAttentionMaxSplits;
using Args = AttentionArgs;

constexpr const char* kSource = R"ATTN(
// N elements of a row as loaded, converted to float on use: one 16-byte load when N of
// them make 16 bytes (the row aligned), else N strided loads. Kept as loaded so that
// several keys' loads can be in flight in few registers.
template <class E, int N, bool kWide = N * sizeof(typename E::T) == 16>
struct lum_at_raw {
  uint4 u;
  __device__ __forceinline__ void load(const typename E::T* p, long long) { u = __ldg(reinterpret_cast<const uint4*>(p)); }
  __device__ __forceinline__ void zero() { u = make_uint4(0u, 0u, 0u, 0u); }
  __device__ __forceinline__ float get(int i) const { return E::get(reinterpret_cast<const typename E::T*>(&u)[i]); }
};
template <class E, int N>
struct lum_at_raw<E, N, false> {
  typename E::T x[N];
  __device__ __forceinline__ void load(const typename E::T* p, long long stride) {
#pragma unroll
    for (int i = 0; i < N; ++i) x[i] = p[i * stride];
  }
  __device__ __forceinline__ void zero() {
#pragma unroll
    for (int i = 0; i < N; ++i) x[i] = 0;
  }
  __device__ __forceinline__ float get(int i) const { return E::get(x[i]); }
};
constexpr int kAtGroups = LUM_AT_THREADS / LUM_AT_L;
constexpr int kAtKeyVecs = LUM_AT_D / LUM_AT_VK, kAtValueVecs = LUM_AT_DV / LUM_AT_VV;
constexpr int kAtNQ = (kAtKeyVecs + LUM_AT_L - 1) / LUM_AT_L;    // key vectors per thread
constexpr int kAtNV = (kAtValueVecs + LUM_AT_L - 1) / LUM_AT_L;  // value vectors per thread
// Keys per group in flight, for scores and for values (each divides a group's share of
// a chunk): fewer values, whose weights take registers too.
constexpr int kAtU = LUM_AT_L < 8 ? LUM_AT_L : 8;
constexpr int kAtUV = LUM_AT_L < 4 ? LUM_AT_L : 4;

extern "C" __global__ void __launch_bounds__(LUM_AT_THREADS) lum_attention(const LumAttnArgs a) {
  lum_after_prior_grids();
  __shared__ float qs[LUM_AT_R][LUM_AT_D];         // the tile's queries, scaled
  __shared__ float s[LUM_AT_R][LUM_AT_CHUNK];      // a chunk's scores, then weights
  __shared__ float red[LUM_AT_R][LUM_AT_DV];       // the groups' outputs, summed
  __shared__ float row_max[LUM_AT_R], row_sum[LUM_AT_R], row_alpha[LUM_AT_R];
  __shared__ long long row_q[LUM_AT_R], row_m[LUM_AT_R], row_o[LUM_AT_R];
  const float kNegInf = __int_as_float(0xff800000);
  const int tid = threadIdx.x, lane = tid % LUM_AT_L, group = tid / LUM_AT_L;
  const LumAtBlock block = lum_at_block(a);
  const long long split = block.split, tile = block.tile;
  const long long qo = block.q, ko = block.k, vo = block.v, mo = block.m, oo = block.o;
  const int rows = (int)min((long long)LUM_AT_R, a.shared_rows - tile * LUM_AT_R);
  if (tid < LUM_AT_R) {
    long long q = qo, m = mo, o = oo;
    lum_at_row(a, tile * LUM_AT_R + tid, q, m, o);
    row_q[tid] = q, row_m[tid] = m, row_o[tid] = o;
    row_max[tid] = kNegInf, row_sum[tid] = 0.0f;
  }
  __syncthreads();
  const typename LUM_AT_Q::T* qp = (const typename LUM_AT_Q::T*)a.q;
  for (int i = tid; i < LUM_AT_R * LUM_AT_D; i += LUM_AT_THREADS) {
    const int r = i / LUM_AT_D, d = i % LUM_AT_D;
    qs[r][d] = r < rows ? LUM_AT_Q::get(qp[row_q[r] + d * a.q_d]) * a.scale : 0.0f;
  }
  __syncthreads();
  float qr[LUM_AT_R][kAtNQ][LUM_AT_VK];
#pragma unroll
  for (int r = 0; r < LUM_AT_R; ++r)
#pragma unroll
    for (int i = 0; i < kAtNQ; ++i) {
      const int j = lane + LUM_AT_L * i;
#pragma unroll
      for (int e = 0; e < LUM_AT_VK; ++e) qr[r][i][e] = j < kAtKeyVecs ? qs[r][j * LUM_AT_VK + e] : 0.0f;
    }
  float acc[LUM_AT_R][kAtNV][LUM_AT_VV];
#pragma unroll
  for (int r = 0; r < LUM_AT_R; ++r)
#pragma unroll
    for (int i = 0; i < kAtNV; ++i)
#pragma unroll
      for (int e = 0; e < LUM_AT_VV; ++e) acc[r][i][e] = 0.0f;
  const typename LUM_AT_K::T* kp = (const typename LUM_AT_K::T*)a.k + ko;
  const typename LUM_AT_V::T* vp = (const typename LUM_AT_V::T*)a.v + vo;
  const long long t_begin = split * a.keys_per_split;
  const long long t_end = min(a.keys, t_begin + a.keys_per_split);
  const int warp = tid / 32, wl = tid % 32;
  for (long long c0 = t_begin; c0 < t_end; c0 += LUM_AT_CHUNK) {
    // Scores, kAtU keys per group at a time, their loads issued together (masked keys are
    // loaded too, so no load waits for the mask). Every thread of a warp reaches the
    // shuffles, whatever its keys.
    for (int c = group; c < LUM_AT_CHUNK; c += kAtGroups * kAtU) {
      lum_at_raw<LUM_AT_K, LUM_AT_VK> kv[kAtU][kAtNQ];
#pragma unroll
      for (int u = 0; u < kAtU; ++u) {
        const long long t = c0 + c + u * kAtGroups;
#pragma unroll
        for (int i = 0; i < kAtNQ; ++i) {
          const int j = lane + LUM_AT_L * i;
          if (t < t_end && j < kAtKeyVecs)
            kv[u][i].load(kp + t * a.k_t + (long long)j * LUM_AT_VK * a.k_d, a.k_d);
          else
            kv[u][i].zero();
        }
      }
#pragma unroll
      for (int u = 0; u < kAtU; ++u) {
        const long long t = c0 + c + u * kAtGroups;
        float dot[LUM_AT_R];
#pragma unroll
        for (int r = 0; r < LUM_AT_R; ++r) {
          dot[r] = 0.0f;
#pragma unroll
          for (int i = 0; i < kAtNQ; ++i)
#pragma unroll
            for (int e = 0; e < LUM_AT_VK; ++e) dot[r] = fmaf(qr[r][i][e], kv[u][i].get(e), dot[r]);
#pragma unroll
          for (int o = LUM_AT_L / 2; o > 0; o >>= 1) dot[r] += __shfl_xor_sync(0xffffffffu, dot[r], o);
        }
        if (lane == 0)
#pragma unroll
          for (int r = 0; r < LUM_AT_R; ++r)
            s[r][c + u * kAtGroups] =
                t < t_end && r < rows && lum_at_keep(a, row_m[r], t) ? dot[r] : kNegInf;
      }
    }
    __syncthreads();
    // Each row's running max and sum; the chunk's scores become weights.
    for (int r = warp; r < LUM_AT_R; r += LUM_AT_THREADS / 32) {
      const float m_old = row_max[r];
      float mx = kNegInf;
      for (int c = wl; c < LUM_AT_CHUNK; c += 32) mx = fmaxf(mx, s[r][c]);
      for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
      const float m_new = fmaxf(m_old, mx);
      float sum = 0.0f;
      for (int c = wl; c < LUM_AT_CHUNK; c += 32) {
        const float x = s[r][c];
        const float p = x == kNegInf ? 0.0f : exp2f(x - m_new);
        s[r][c] = p;
        sum += p;
      }
      for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
      __syncwarp();
      if (wl == 0) {
        const float alpha = m_new == kNegInf ? 1.0f : exp2f(m_old - m_new);
        row_alpha[r] = alpha;
        row_sum[r] = row_sum[r] * alpha + sum;
        row_max[r] = m_new;
      }
    }
    __syncthreads();
    // Weighted values, into each thread's slices of its rows' outputs.
#pragma unroll
    for (int r = 0; r < LUM_AT_R; ++r) {
      const float alpha = row_alpha[r];
#pragma unroll
      for (int i = 0; i < kAtNV; ++i)
#pragma unroll
        for (int e = 0; e < LUM_AT_VV; ++e) acc[r][i][e] *= alpha;
    }
    for (int c = group; c < LUM_AT_CHUNK; c += kAtGroups * kAtUV) {
      float p[kAtUV][LUM_AT_R];
      lum_at_raw<LUM_AT_V, LUM_AT_VV> vv[kAtUV][kAtNV];
#pragma unroll
      for (int u = 0; u < kAtUV; ++u) {
        bool any = false;
#pragma unroll
        for (int r = 0; r < LUM_AT_R; ++r) {
          p[u][r] = s[r][c + u * kAtGroups];
          any |= p[u][r] != 0.0f;
        }
        const long long t = c0 + c + u * kAtGroups;
#pragma unroll
        for (int i = 0; i < kAtNV; ++i) {
          const int j = lane + LUM_AT_L * i;
          if (any && j < kAtValueVecs)
            vv[u][i].load(vp + t * a.v_t + (long long)j * LUM_AT_VV * a.v_d, a.v_d);
          else
            vv[u][i].zero();
        }
      }
#pragma unroll
      for (int u = 0; u < kAtUV; ++u)
#pragma unroll
        for (int r = 0; r < LUM_AT_R; ++r)
#pragma unroll
          for (int i = 0; i < kAtNV; ++i)
#pragma unroll
            for (int e = 0; e < LUM_AT_VV; ++e) acc[r][i][e] = fmaf(p[u][r], vv[u][i].get(e), acc[r][i][e]);
    }
    __syncthreads();  // s is rewritten by the next chunk
  }
  // The groups' outputs summed, in group order.
  for (int g = 0; g < kAtGroups; ++g) {
    if (group == g)
#pragma unroll
      for (int r = 0; r < LUM_AT_R; ++r)
#pragma unroll
        for (int i = 0; i < kAtNV; ++i) {
          const int j = lane + LUM_AT_L * i;
          if (j >= kAtValueVecs) continue;
#pragma unroll
          for (int e = 0; e < LUM_AT_VV; ++e) {
            float& x = red[r][j * LUM_AT_VV + e];
            x = (g == 0 ? 0.0f : x) + acc[r][i][e];
          }
        }
    __syncthreads();
  }
  for (int i = tid; i < LUM_AT_R * LUM_AT_DV; i += LUM_AT_THREADS) {
    const int r = i / LUM_AT_DV, j = i % LUM_AT_DV;
    if (r >= rows) continue;
    if (a.splits == 1) {
      LUM_AT_O::put(a.out, row_o[r] * LUM_AT_DV + j, red[r][j] / row_sum[r]);
    } else {
      float* p = a.partials + (row_o[r] * a.splits + split) * kAtWidth;
      p[j] = red[r][j];
      if (j == 0) p[kAtMax] = row_max[r], p[kAtMax + 1] = row_sum[r];
    }
  }
}

)ATTN";

// What a pass over the mask (lum_attention_mask_tiles, `pass`) reads and writes: the mask
// and its strides, the rows, keys and tiles it is laid over, and where the tiles go.
std::vector<int64_t> mask_pass_of(const AttentionArgs& a, const void* pass) {
  std::vector<int64_t> out = {reinterpret_cast<int64_t>(pass),
                              reinterpret_cast<int64_t>(a.mask),
                              reinterpret_cast<int64_t>(a.tiles),
                              reinterpret_cast<int64_t>(a.tile_bits),
                              a.m_off,
                              a.m_t,
                              a.keys,
                              a.shared_rows,
                              a.row_tiles,
                              a.key_tiles,
                              a.mask_points,
                              a.kv_rank,
                              a.sh_rank};
  for (const int64_t* dims : {a.kv_dim, a.kv_m, a.sh_dim, a.sh_m})
    out.insert(out.end(), dims, dims + kAttentionMaxDims);
  out.insert(out.end(), a.mask_dims, a.mask_dims + compiler::kMaxComputedMaskDims);
  return out;
}

bool supported(DType t) {
  return t == DType::F32 || t == DType::F16 || t == DType::BF16;
}

// A compiled kernel's cache key: its specialisation's fields (not its source, which would
// be written for every launch), the first telling the two kernels apart.
std::string key_of(std::initializer_list<int64_t> fields) {
  std::string key;
  for (int64_t f : fields) key += std::to_string(f) + " ";
  return key;
}

}  // namespace

int64_t keys_within(const ConcreteView& view, size_t axis, size_t element_bytes, size_t settled) {
  const int64_t keys = view.dims[axis];
  if (settled == std::numeric_limits<size_t>::max()) return keys;
  int64_t last = view.offset;  // of the elements of key 0
  for (size_t i = 0; i < view.dims.size(); ++i) {
    if (view.strides[i] < 0) return 0;
    if (i != axis) last += (view.dims[i] - 1) * view.strides[i];
  }
  const auto elements = static_cast<int64_t>(settled / element_bytes);
  if (last >= elements) return 0;
  const int64_t step = view.strides[axis];
  return step == 0 ? keys : std::min(keys, (elements - 1 - last) / step + 1);
}

std::string attention_source(const AttentionKernel& s) {
  return attention_program({s.q, s.k, s.v, s.out, s.d, s.dv},
                           {{"LUM_AT_VK", std::to_string(s.key_vec)},
                            {"LUM_AT_VV", std::to_string(s.value_vec)},
                            {"LUM_AT_L", std::to_string(s.lanes)},
                            {"LUM_AT_R", std::to_string(s.rows)},
                            {"LUM_AT_CHUNK", std::to_string(kChunk)}},
                           kSource);
}

ComputedMask::ComputedMask(Expr keep_expr) : keep(keep_expr.to_c()) {
  // The dims it reads (and, for its bounds over a tile, each as its own least and
  // greatest value).
  std::string declared, bounded;
  for (const std::string& d : keep_expr.variables()) {
    if (d == "lum_m" || d == "lum_t") continue;
    declared += "const long long " + d + " = lum_a.mask_dims[" + std::to_string(dims.size()) +
                "]; (void)" + d + "; ";
    bounded += "const long long " + d + "_lo = " + d + ", " + d + "_hi = " + d + "; ";
    dims.push_back(d);
  }
  LUM_ASSERT(dims.size() <= compiler::kMaxComputedMaskDims)
      << "a computed mask over " << dims.size() << " dims";
  source = device_expr_prelude() + "#define LUM_AT_KEEP_DIMS " + declared +
           "\n#define LUM_AT_KEEP " + keep + "\n#define LUM_AT_KEEP_BOUNDS " + bounded +
           keep_expr.to_c_bounds("lum_keep") + "\n";
}

const Attention::Compiled& Attention::compiled(const std::string& key, const ComputedMask* mask,
                                               const std::string& kernel,
                                               const std::function<std::string()>& source,
                                               size_t shared_bytes, int threads, int64_t tile_keys,
                                               int64_t tile_bit_rows) {
  Compiled& c = kernels_[mask ? key + mask->keep : key];
  if (!c.module) {
    // Warpgroup products exist only on the architecture-specific target (sm_90a).
    const bool wgmma = kernel == "lum_attention_wgmma";
    c.module = std::make_unique<Module>(
        compile_cubin((mask ? mask->source : "") + source(), device_.arch() + (wgmma ? "a" : ""))
            .code);
    c.kernel = c.module->kernel(kernel);
    c.combine = c.module->kernel("lum_attention_combine");
    if (wgmma || kernel == "lum_attention_mma")
      c.mask_tiles = c.module->kernel("lum_attention_mask_tiles");
    c.shared_bytes = shared_bytes;
    c.threads = threads;
    c.tile_keys = tile_keys;
    if (wgmma) c.tile_bit_rows = tile_bit_rows, c.kernel_params = 4;
    if (shared_bytes > 0)  // (with its static arrays, it may pass the default 48 KiB)
      check(cudaKernelSetAttributeForDevice(
                reinterpret_cast<cudaKernel_t>(const_cast<void*>(c.kernel)),
                cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(shared_bytes),
                device_.ordinal()),
            "allowing attention its shared memory");
    check(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&c.blocks_per_sm, c.kernel, threads,
                                                        shared_bytes),
          "sizing attention's grid");
  }
  return c;
}

bool Attention::run(const ConcreteView& q, const void* q_data, DType q_type, const ConcreteView& k,
                    const void* k_data, DType k_type, const ConcreteView& v, const void* v_data,
                    DType v_type, const ConcreteView& mask, const void* mask_data,
                    const ComputedMask* computed, double scale, void* out, DType out_type,
                    const std::vector<int64_t>& row_strides, SettledBytes settled) {
  const size_t r = q.dims.size();
  if (r < 3 || k.dims.size() != r || v.dims.size() != r || mask.dims.size() + 1 != r) return false;
  if (q.has_mask() || k.has_mask() || v.has_mask() || mask.has_mask()) return false;
  if (!supported(q_type) || !supported(k_type) || !supported(v_type) || !supported(out_type))
    return false;
  const int64_t d = q.dims[r - 2], keys = q.dims[r - 1], dv = v.dims[r - 1];
  if (d < 1 || dv < 1 || keys < 1) return false;

  Args a{};
  a.q = q_data, a.k = k_data, a.v = v_data, a.mask = mask_data, a.out = out;
  a.q_off = q.offset, a.k_off = k.offset, a.v_off = v.offset, a.m_off = mask.offset;
  a.q_d = q.strides[r - 2], a.k_d = k.strides[r - 2], a.v_d = v.strides[r - 1];
  a.k_t = k.strides[r - 1], a.v_t = v.strides[r - 2], a.m_t = mask.strides[r - 2];
  // A computed mask is read by (row, key) coordinates: its "offsets" count query rows.
  auto mask_stride = [&](size_t i) -> int64_t {
    return computed ? (i + 3 == r ? 1 : 0) : mask.strides[i];
  };
  if (computed) {
    a.mask = nullptr, a.m_off = 0, a.m_t = 1;
    std::copy(computed->values.begin(), computed->values.end(), a.mask_dims);
  }
  a.keys = keys;
  a.early_keys = std::min(keys_within(k, r - 1, dtype_size(k_type), settled.k),
                          keys_within(v, r - 2, dtype_size(v_type), settled.v));
  a.scale = static_cast<float>(scale * std::numbers::log2e);  // scores go through 2^x
  // The batch dims ([batch..., M]), by whether keys and values vary along them; output
  // rows where row_strides puts them.
  if (row_strides.size() + 2 != r) return false;
  int64_t kv_points = 1, out_rows = 1;
  a.shared_rows = 1;
  for (size_t i = r - 2; i-- > 0;) {
    const int64_t n = q.dims[i], row_stride = row_strides[i];
    out_rows *= n;
    if (n == 1) continue;
    if (k.strides[i] == 0 && v.strides[i] == 0) {
      if (a.sh_rank == kMaxDims) return false;
      a.sh_dim[a.sh_rank] = n, a.sh_q[a.sh_rank] = q.strides[i];
      a.sh_m[a.sh_rank] = mask_stride(i), a.sh_o[a.sh_rank] = row_stride;
      ++a.sh_rank;
      a.shared_rows *= n;
    } else {
      if (a.kv_rank == kMaxDims) return false;
      const int64_t j = a.kv_rank++;
      a.kv_dim[j] = n, a.kv_q[j] = q.strides[i], a.kv_k[j] = k.strides[i];
      a.kv_v[j] = v.strides[i], a.kv_m[j] = mask_stride(i), a.kv_o[j] = row_stride;
      kv_points *= n;
    }
  }
  // Collected innermost first; the kernels decompose outermost first.
  auto reverse = [](int64_t* x, int64_t n) { std::reverse(x, x + n); };
  for (int64_t* x : {a.sh_dim, a.sh_q, a.sh_m, a.sh_o}) reverse(x, a.sh_rank);
  for (int64_t* x : {a.kv_dim, a.kv_q, a.kv_k, a.kv_v, a.kv_m, a.kv_o}) reverse(x, a.kv_rank);

  const int key_vec = vector_width(k, r - 2, d, k_type, k_data);
  const int value_vec = vector_width(v, r - 1, dv, v_type, v_data);
  // The kernels that can run this op; the first is the cost model's pick, and where there
  // are several (prompts on tensor cores) the search times them.
  struct Candidate {
    const Compiled* kernel;
    int64_t rows;                            // query rows a block
    std::string name;                        // in the search's log
    // The warpgroup kernels' copies' maps (by tile); the queries' for a persistent one.
    TensorMap key_map = {}, value_map = {}, query_map = {};
    size_t option = 0;        // its index among the shape's options (choice_)
    bool persistent = false;  // a block for each that stays resident, not for each item
  };
  std::vector<Candidate> kernels;
  // Tensor cores where a tile of their rows shares each key head and they take the
  // types; each key and value row read in one 16-byte piece or more, and the scale
  // positive (it is applied after the max). On Hopper, warpgroup products first, where a
  // whole block's rows share each key head. The options, in the cost model's order: the
  // warpgroup kernels, then the sm_80 one (which hold for a shape does not depend on
  // where its tensors are, so a shape's choice names one by its index).
  const bool tensor_rows = scale > 0 && key_vec == 8 && value_vec == 8;
  std::vector<WgmmaAttentionKernel> wgmma;
  if (device_.compute_capability() == 90 && tensor_rows &&
      wgmma_attention_supports(q_type, k_type, v_type, d, dv))
    for (const WgmmaAttentionKernel& w :
         wgmma_attention_kernels(q_type, k_type, out_type, d, dv, keys))
      if (a.shared_rows >= w.rows()) wgmma.push_back(w);
  const bool mma_fits = device_.compute_capability() >= 80 && a.shared_rows >= 16 && tensor_rows &&
                        mma_attention_supports(q_type, k_type, v_type, d, dv);
  const MmaAttentionKernel mma{q_type, k_type, v_type, out_type, d, dv};
  const std::string mma_key =
      mma_fits
          ? key_of({1, int64_t(q_type), int64_t(k_type), int64_t(v_type), int64_t(out_type), d, dv})
          : "";
  auto wgmma_key = [&](const WgmmaAttentionKernel& w) {
    return key_of({3, int64_t(q_type), int64_t(k_type), int64_t(out_type), d, dv, w.keys,
                   w.key_stages, w.value_stages, w.consumers, w.blocks_per_sm, w.persistent});
  };
  // Option i (the warpgroup kernel's) holds where its copies' tensor maps encode for these
  // tensors (their addresses' alignment counts); the last (the sm_80 kernel) always.
  struct Option {
    size_t index;
    TensorMap key_map = {}, value_map = {}, query_map = {};
  };
  auto encodes = [&](Option& o) {
    if (o.index == wgmma.size()) return mma_fits;
    return o.index < wgmma.size() &&
           wgmma_attention_maps(a, k_data, v_data, d, dv, wgmma[o.index].keys, o.key_map,
                                o.value_map) &&
           (!wgmma[o.index].persistent || wgmma_attention_query_map(a, q_data, d, o.query_map));
  };
  // The module of option i: its cache key and source.
  auto module_key = [&](size_t i) { return i == wgmma.size() ? mma_key : wgmma_key(wgmma[i]); };
  auto module_source = [&](size_t i) {
    return i == wgmma.size() ? mma_attention_source(mma) : wgmma_attention_source(wgmma[i]);
  };
  // (Only prompts on tensor cores have options to choose between: decoding looks up
  // nothing.)
  std::optional<ShapeKey> shape;
  std::optional<size_t> chosen;
  if (!wgmma.empty() || mma_fits) {
    shape = ShapeKey{q_type, k_type, v_type,        out_type,  d,
                     dv,     keys,   a.shared_rows, kv_points, computed ? computed->keep : ""};
    if (const auto it = choice_.find(*shape); it != choice_.end()) chosen = it->second;
  }
  const bool searching = searcher_.settings().mode != runtime::SearchMode::Off;
  std::vector<Option> options;
  if (chosen)  // a shape the search has seen runs its winner alone
    if (Option o{*chosen}; encodes(o)) options.push_back(o);
  if (options.empty()) {
    for (size_t i = 0; i < wgmma.size(); ++i)
      // (With the search off only the cost model's pick is compiled.)
      if (Option o{i}; encodes(o)) {
        options.push_back(o);
        if (!searching) break;
      }
    if (mma_fits && (searching || options.empty())) options.push_back({wgmma.size()});
  }
  // Where several will be timed, those after the first compile while it does (NVRTC
  // takes a second or more a module, on one core; compiled() then finds them in the
  // kernel cache or waits for them).
  std::vector<std::future<void>> compiling;
  if (options.size() > 1) {
    const std::string mask_source = computed ? computed->source : "";
    std::vector<std::string> wgmma_sources, mma_sources;
    for (size_t i = 1; i < options.size(); ++i) {
      const size_t o = options[i].index;
      const std::string key = module_key(o);
      const auto loaded = kernels_.find(computed ? key + computed->keep : key);
      if (loaded != kernels_.end() && loaded->second.module) continue;
      (o == wgmma.size() ? mma_sources : wgmma_sources).push_back(mask_source + module_source(o));
    }
    for (auto [sources, arch] :
         {std::pair{&wgmma_sources, device_.arch() + "a"}, std::pair{&mma_sources, device_.arch()}})
      for (auto& f : compile_in_background(std::move(*sources), arch))
        compiling.push_back(std::move(f));
  }
  for (const Option& o : options) {
    const std::string key = module_key(o.index);
    auto source = [&] { return module_source(o.index); };
    if (o.index == wgmma.size()) {
      Candidate c{
          &compiled(key, computed, "lum_attention_mma", source, mma_attention_shared_bytes(mma)),
          kMmaAttentionRows, "mma.sync, 64 rows a block"};
      c.option = o.index;
      kernels.push_back(std::move(c));
      continue;
    }
    const WgmmaAttentionKernel& w = wgmma[o.index];
    kernels.push_back({&compiled(key, computed, "lum_attention_wgmma", source,
                                 wgmma_attention_shared_bytes(w), w.threads(), w.keys, w.rows()),
                       w.rows(), w.describe(), o.key_map, o.value_map, o.query_map, o.index,
                       w.persistent});
  }
  if (kernels.empty() && device_.compute_capability() >= 80 &&
      key_vec * static_cast<int>(dtype_size(k_type)) == 16 &&
      value_vec * static_cast<int>(dtype_size(v_type)) == 16 &&
      stream_attention_supports(k_type, v_type, d, dv)) {
    auto stream_kernel = [&](bool tensor_cores) {
      const int64_t rows = std::min(stream_attention_max_rows(tensor_cores), a.shared_rows);
      return StreamAttentionKernel{
          q_type, k_type, v_type, out_type, d, dv, static_cast<int>(rows), tensor_cores};
    };
    StreamAttentionKernel spec =
        stream_kernel(scale > 0 && mma_attention_supports(q_type, k_type, v_type, d, dv));
    // Tensor cores where their stages (16 keys a warp, three deep) fit a block's shared
    // memory on this GPU, beside the kernel's own arrays (under 1 KiB): at head dim 256
    // they take about 200 KB, within an sm_90 block's 227 KB and past sm_80's 163.
    if (spec.tensor_cores &&
        stream_attention_shared_bytes(spec) + 1024 > device_.shared_bytes_a_block())
      spec = stream_kernel(false);
    const int64_t rows = spec.rows;
    const std::string key = key_of({2, int64_t(q_type), int64_t(k_type), int64_t(v_type),
                                    int64_t(out_type), d, dv, rows, spec.tensor_cores});
    kernels.push_back(
        {&compiled(
             key, computed, "lum_attention_stream", [&] { return stream_attention_source(spec); },
             stream_attention_shared_bytes(spec), kAttentionThreads,
             stream_attention_stage_keys(spec)),
         rows, "streaming"});
  } else if (kernels.empty()) {
    AttentionKernel spec{q_type, k_type, v_type, out_type, d, dv, key_vec, value_vec, 1, 1};
    const int64_t key_vecs = d / spec.key_vec;
    while (spec.lanes < 32 && spec.lanes < key_vecs) spec.lanes *= 2;
    // Rows per block: as many as share the keys, up to 8, while each thread's queries and
    // outputs stay in registers and the block's arrays in 44 KiB of shared memory.
    const int64_t per_row_regs =
        (key_vecs + spec.lanes - 1) / spec.lanes * spec.key_vec +
        (dv / spec.value_vec + spec.lanes - 1) / spec.lanes * spec.value_vec;
    int64_t rows = std::min<int64_t>({kMaxRows, a.shared_rows, 128 / per_row_regs});
    while (rows > 0 && rows * ((d + dv + kChunk + 3) * 4 + 24) > 44 * 1024) --rows;
    if (rows < 1) return false;
    spec.rows = static_cast<int>(rows);
    const std::string key =
        key_of({0, int64_t(q_type), int64_t(k_type), int64_t(v_type), int64_t(out_type), d, dv,
                key_vec, value_vec, spec.lanes, rows});
    kernels.push_back({&compiled(
                           key, computed, "lum_attention", [&] { return attention_source(spec); },
                           0, kAttentionThreads, kChunk),
                       rows, "CUDA cores"});
  }
  // One launch of kernel `c` (its mask pass and combine included), on a copy of the
  // arguments, which each kernel's rows complete.
  auto launch = [&](Candidate& c, Args a) {
    const Compiled* kernel = c.kernel;
    const int64_t rows = c.rows;
    a.row_tiles = (a.shared_rows + rows - 1) / rows;

    // Split the keys where (kv point, tile) pairs alone would leave SMs idle, into as many
    // pieces as fill the GPU once, each of whole tiles (fine enough that the pieces come
    // out as many as asked: one SM with a block less than the others waits for them).
    const int64_t pairs = kv_points * a.row_tiles;
    const int64_t key_tiles = (keys + kernel->tile_keys - 1) / kernel->tile_keys;
    const int64_t resident =
        int64_t{device_.multiprocessors()} * std::max(kernel->blocks_per_sm, 1);
    const int64_t splits =
        std::clamp<int64_t>(resident / pairs, 1, std::min(key_tiles, kMaxSplits));
    a.keys_per_split = (key_tiles + splits - 1) / splits * kernel->tile_keys;
    a.splits = (keys + a.keys_per_split - 1) / a.keys_per_split;
    if (a.splits > 1)
      a.partials = static_cast<float*>(grown(
          device_, partials_,
          static_cast<size_t>(out_rows * a.splits * attention_piece_floats(dv)) * sizeof(float)));

    void* params[] = {&a, &c.key_map, &c.value_map, &c.query_map};
    const std::span<void*> args(params, 1);
    if (kernel->mask_tiles) {
      a.key_tiles = (keys + kernel->tile_keys - 1) / kernel->tile_keys;
      a.mask_points = 1;
      for (int64_t i = 0; i < a.kv_rank; ++i)
        if (a.kv_m[i] != 0) a.mask_points = kv_points;
      const int64_t tiles = a.mask_points * a.row_tiles * a.key_tiles;
      a.tiles = static_cast<uint8_t*>(grown(device_, tiles_, static_cast<size_t>(tiles)));
      if (kernel->tile_bit_rows > 0)  // four words a row of each tile
        a.tile_bits = static_cast<uint32_t*>(
            grown(device_, tile_bits_, static_cast<size_t>(tiles * kernel->tile_bit_rows * 16)));
      // A warp takes 32 rows of a row tile over kMaskTileChunk key tiles.
      const int64_t groups =
          a.mask_points * a.row_tiles * ((a.key_tiles + kMaskTileChunk - 1) / kMaskTileChunk);
      const int64_t per_block = kernel->threads / rows;
      std::vector<int64_t> pass = mask_pass_of(a, kernel->mask_tiles);
      if (pass != last_mask_pass_) {
        check(device_.launch(kernel->mask_tiles,
                             dim3(static_cast<unsigned>((groups + per_block - 1) / per_block)),
                             dim3(static_cast<unsigned>(kernel->threads)), args, 0),
              "launching attention's pass over the mask");
        last_mask_pass_ = std::move(pass);
        last_pass_read_values_ = a.mask != nullptr;
      }
    }
    // (A persistent kernel's blocks take the items in turn.)
    const int64_t items = pairs * a.splits;
    const int64_t grid = c.persistent ? std::min(items, resident) : items;
    check(device_.launch(kernel->kernel, dim3(static_cast<unsigned>(grid)),
                         dim3(static_cast<unsigned>(kernel->threads)),
                         std::span(params, kernel->kernel_params), kernel->shared_bytes),
          "launching attention");
    if (a.splits > 1) {
      long long n = out_rows, splits_arg = a.splits;
      void* combine_args[] = {&a.partials, &out, &n, &splits_arg};
      const int64_t blocks = std::min<int64_t>(out_rows, int64_t{device_.multiprocessors()} * 16);
      check(device_.launch(kernel->combine, dim3(static_cast<unsigned>(blocks)),
                           dim3(static_cast<unsigned>(kernel->threads)), combine_args, 0),
            "launching attention's combine");
    }
  };

  // Several kernels for a new shape: all are timed, the fastest correct one kept (the cost
  // model's pick, the first, unless the search is off). (Where a shape's winner cannot read
  // these tensors, the others run untimed: the first.)
  size_t pick = 0;
  if (kernels.size() > 1 && !chosen) {
    runtime::SearchProblem p;
    p.signature = "attention";
    for (DType t : {q_type, k_type, v_type, out_type})
      p.signature += " " + std::string(dtype_name(t));
    for (int64_t x : {d, dv, keys, a.shared_rows, kv_points})
      p.signature += " " + std::to_string(x);
    if (computed) p.signature += " computed-mask";
    for (Candidate& c : kernels)
      p.candidates.push_back({c.name, [&] {
                                last_mask_pass_.clear();  // (each trial's time has its pass)
                                launch(c, a);
                              }});
    DeviceTrials trials(device_);
    trials.judge(p, out, static_cast<size_t>(out_rows * dv), out_type,
                 out_type == DType::F32 ? 1e-3 : 2e-2);
    pick = searcher_.choose(p).winner;
    choice_.emplace(*shape, kernels[pick].option);
  }
  launch(kernels[pick], a);
  return true;
}

}  // namespace luminal::cudagen

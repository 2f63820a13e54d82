// WindowMatMul's kernels and the choice between them and copied columns (see
// window_products.hpp).
#include "backends/cuda/window_products.hpp"

#include <algorithm>
#include <vector>

#include "backends/cuda/codegen.hpp"
#include "backends/cuda/device_trials.hpp"
#include "backends/cuda/tensor_cores.hpp"

namespace luminal::cudagen {
namespace {

// Dims at most of each kind the kernels take (the rows' with the batch dims folded into
// them, the sum's, the batch's left), as in the source.
constexpr size_t kRowDims = 8, kColDims = 6, kBatchDims = 4;

constexpr const char* kSource = R"WP(
#define LUM_WP_BK 32
// Halves a row of a tile in shared memory: 80 bytes, so the eight rows one matrix load
// reads lie in distinct banks.
#define LUM_WP_PITCH 40
// An operand: its element (row, k) of product z at p + the batch's offset + the row's + the
// column's, each a sum over its dims (outermost first) of index times stride.
struct LumWinOperand {
  const uint16_t* p;
  int row_rank, col_rank;
  long long row_dim[8], row_s[8];
  long long col_dim[6], col_s[6];
  long long batch_s[4];
};
struct LumWinArgs {
  LumWinOperand a, b;  // rows m of a, rows n of b, both along the sum k
  uint16_t* out;       // [z][m][n]
  long long m, n, k;   // each below 2^31
  int batch_rank, unused;
  long long batch_dim[4];
};
template <int N>
LUM_FN long long lum_wp_offset(const long long (&dim)[N], const long long (&s)[N], int rank,
                               unsigned i) {
  long long at = 0;
#pragma unroll
  for (int d = N - 1; d >= 0; --d)
    if (d < rank) {
      at += (long long)(i % (unsigned)dim[d]) * s[d];
      i /= (unsigned)dim[d];
    }
  return at;
}
LUM_FN long long lum_wp_row(const LumWinOperand& o, unsigned r) {
  return lum_wp_offset(o.row_dim, o.row_s, o.row_rank, r);
}
LUM_FN long long lum_wp_column(const LumWinOperand& o, unsigned k) {
  return lum_wp_offset(o.col_dim, o.col_s, o.col_rank, k);
}
// Product blockIdx.z's first elements of a and b.
LUM_FN void lum_wp_batch(const LumWinArgs& p, const uint16_t*& a, const uint16_t*& b) {
  long long a0 = 0, b0 = 0, z = blockIdx.z;
#pragma unroll
  for (int d = 3; d >= 0; --d)
    if (d < p.batch_rank) {
      const long long i = z % p.batch_dim[d];
      z /= p.batch_dim[d];
      a0 += i * p.a.batch_s[d];
      b0 += i * p.b.batch_s[d];
    }
  a = p.a.p + a0;
  b = p.b.p + b0;
}
// acc += the staged slice's product: four warps, 2 x 2, each BM / 2 rows by BN / 2 columns.
template <bool kBf16, int BM, int BN>
LUM_FN void lum_wp_products(float (&acc)[BM / 32][BN / 16][4], const uint16_t* as,
                            const uint16_t* bs) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, wm = warp >> 1, wn = warp & 1;
#pragma unroll
  for (int kk = 0; kk < LUM_WP_BK; kk += 16) {
    uint32_t af[BM / 32][4];
#pragma unroll
    for (int i = 0; i < BM / 32; ++i)
      lum_ldsm(af[i], lum_smem_addr(&as[(wm * (BM / 2) + i * 16 + (lane & 15)) * LUM_WP_PITCH +
                                        kk + (lane >> 4) * 8]));
#pragma unroll
    for (int j = 0; j < BN / 32; ++j) {
      uint32_t bf[4];
      lum_ldsm(bf, lum_smem_addr(&bs[(wn * (BN / 2) + j * 16 + (lane >> 4) * 8 + (lane & 7)) *
                                         LUM_WP_PITCH +
                                     kk + ((lane >> 3) & 1) * 8]));
#pragma unroll
      for (int i = 0; i < BM / 32; ++i) {
        lum_mma<kBf16>(acc[i][2 * j], af[i], bf[0], bf[1]);
        lum_mma<kBf16>(acc[i][2 * j + 1], af[i], bf[2], bf[3]);
      }
    }
  }
}
// The block's tile of out[z][m][n] (row-major), two columns a store where they can.
template <bool kBf16, int BM, int BN>
LUM_FN void lum_wp_store(const LumWinArgs& p, const float (&acc)[BM / 32][BN / 16][4],
                         long long m0, long long n0) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, wm = warp >> 1, wn = warp & 1;
  uint16_t* out = p.out + (long long)blockIdx.z * p.m * p.n;
  const bool pairs = (p.n & 1) == 0;
#pragma unroll
  for (int i = 0; i < BM / 32; ++i)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const long long m = m0 + wm * (BM / 2) + i * 16 + (lane >> 2) + 8 * h;
      if (m >= p.m) continue;
#pragma unroll
      for (int j = 0; j < BN / 16; ++j) {
        const long long n = n0 + wn * (BN / 2) + j * 8 + (lane & 3) * 2;
        const uint32_t v = lum_pack_half2<kBf16>(acc[i][j][2 * h], acc[i][j][2 * h + 1]);
        if (pairs && n + 1 < p.n) {
          *(uint32_t*)(out + m * p.n + n) = v;
        } else {
          if (n < p.n) out[m * p.n + n] = (uint16_t)(v & 0xffffu);
          if (n + 1 < p.n) out[m * p.n + n + 1] = (uint16_t)(v >> 16);
        }
      }
    }
}

// Any strides of a; b of one row dim and one column dim (a weight: b_n and b_k). Each
// thread gathers one row of a's 128 x 32 slice, element by element, into registers while
// the slice before is multiplied, then b's share.
#define LUM_WP_ROWS 128
// Thread t's share of b's 32 x BN slice: its element i at k = kk + i k_step, n = nn +
// i n_step; along k where b's rows run along it (a convolution's weights), else along n,
// so that a warp's loads lie side by side either way.
struct LumWpShare {
  int kk, nn, k_step, n_step;
};
template <int BN>
LUM_FN LumWpShare lum_wp_share(const LumWinArgs& p) {
  const int t = threadIdx.x;
  const bool along_k = p.b.col_s[0] == 1;
  return {along_k ? (t & 31) : t / BN, along_k ? (t >> 5) : (t % BN), along_k ? 0 : 128 / BN,
          along_k ? 4 : 0};
}
template <int BN>
LUM_FN void lum_wp_gather(const LumWinArgs& p, const uint16_t* a, const uint16_t* b, long long row,
                          bool valid, const long long* cols, long long s, long long n0,
                          uint32_t (&ra)[LUM_WP_BK / 2], uint32_t (&rb)[BN / 8]) {
  const long long k0 = s * LUM_WP_BK;
  const bool whole_k = k0 + LUM_WP_BK <= p.k;
  if (valid && whole_k) {
#pragma unroll
    for (int j = 0; j < LUM_WP_BK; j += 2)
      ra[j / 2] = a[row + cols[j]] | (uint32_t)a[row + cols[j + 1]] << 16;
  } else {
#pragma unroll
    for (int j = 0; j < LUM_WP_BK; j += 2) {
      const uint32_t lo = valid && k0 + j < p.k ? a[row + cols[j]] : 0;
      const uint32_t hi = valid && k0 + j + 1 < p.k ? a[row + cols[j + 1]] : 0;
      ra[j / 2] = lo | hi << 16;
    }
  }
  const long long b_n = p.b.row_rank ? p.b.row_s[0] : 0, b_k = p.b.col_s[0];
  const LumWpShare my = lum_wp_share<BN>(p);
  const bool whole = whole_k && n0 + BN <= p.n;
#pragma unroll
  for (int i = 0; i < BN / 4; ++i) {
    const long long k = k0 + my.kk + i * my.k_step, n = n0 + my.nn + i * my.n_step;
    const uint32_t v = whole || (k < p.k && n < p.n) ? b[k * b_k + n * b_n] : 0;
    rb[i / 2] = i % 2 ? rb[i / 2] | v << 16 : v;
  }
}
template <int BN>
LUM_FN void lum_wp_stage(const LumWinArgs& p, const uint32_t (&ra)[LUM_WP_BK / 2],
                         const uint32_t (&rb)[BN / 8], uint16_t* as, uint16_t* bs) {
  const int t = threadIdx.x;
  uint4* row = (uint4*)(as + t * LUM_WP_PITCH);
#pragma unroll
  for (int q = 0; q < LUM_WP_BK / 8; ++q)
    row[q] = make_uint4(ra[4 * q], ra[4 * q + 1], ra[4 * q + 2], ra[4 * q + 3]);
  const LumWpShare my = lum_wp_share<BN>(p);
#pragma unroll
  for (int i = 0; i < BN / 4; ++i)
    bs[(my.nn + i * my.n_step) * LUM_WP_PITCH + my.kk + i * my.k_step] =
        (uint16_t)(rb[i / 2] >> (16 * (i % 2)));
}
template <bool kBf16, int BN>
LUM_FN void lum_window_product(const LumWinArgs& p) {
  __shared__ __align__(16) uint16_t as[2][LUM_WP_ROWS * LUM_WP_PITCH];
  __shared__ __align__(16) uint16_t bs[2][BN * LUM_WP_PITCH];
  __shared__ long long cols[2][LUM_WP_BK];  // slice s's column offsets at cols[s & 1]
  const int t = threadIdx.x;
  const long long m0 = (long long)blockIdx.x * LUM_WP_ROWS, n0 = (long long)blockIdx.y * BN;
  const uint16_t *a, *b;
  lum_wp_batch(p, a, b);
  const bool valid = m0 + t < p.m;
  const long long row = valid ? lum_wp_row(p.a, (unsigned)(m0 + t)) : 0;
  const long long slices = (p.k + LUM_WP_BK - 1) / LUM_WP_BK;
  // (Written by the first warp a slice ahead.)
  if (t < LUM_WP_BK) {
    cols[0][t] = t < p.k ? lum_wp_column(p.a, t) : 0;
    if (slices > 1) cols[1][t] = LUM_WP_BK + t < p.k ? lum_wp_column(p.a, LUM_WP_BK + t) : 0;
  }
  __syncthreads();
  uint32_t ra[LUM_WP_BK / 2], rb[BN / 8];
  lum_wp_gather<BN>(p, a, b, row, valid, cols[0], 0, n0, ra, rb);
  lum_wp_stage<BN>(p, ra, rb, as[0], bs[0]);
  __syncthreads();
  float acc[LUM_WP_ROWS / 32][BN / 16][4] = {};
  for (long long s = 0; s < slices; ++s) {
    const int buf = (int)(s & 1);
    const bool more = s + 1 < slices;
    // The next slice's loads are on their way while this one's products run.
    if (more) lum_wp_gather<BN>(p, a, b, row, valid, cols[buf ^ 1], s + 1, n0, ra, rb);
    lum_wp_products<kBf16, LUM_WP_ROWS, BN>(acc, as[buf], bs[buf]);
    if (more) {
      lum_wp_stage<BN>(p, ra, rb, as[buf ^ 1], bs[buf ^ 1]);
      // Slice s + 2's offsets where slice s's were, read for the last time above.
      const long long k = (s + 2) * LUM_WP_BK + t;
      if (t < LUM_WP_BK && s + 2 < slices) cols[buf][t] = k < p.k ? lum_wp_column(p.a, k) : 0;
    }
    __syncthreads();
  }
  lum_wp_store<kBf16, LUM_WP_ROWS, BN>(p, acc, m0, n0);
}

// Runs of eight, either operand gathered: each operand's innermost column dim is
// contiguous and a multiple of 8 long (a channels-last image; a weight read along k) and
// every other offset a multiple of 8 elements, so a slice's rows are four 16-byte pieces
// each, copied to shared memory without registers (cp.async), kStages slices in flight.
// A tile of R rows (this thread's: (t / 4) + 32 i, at offsets rows[i], valid where `valid`
// has bit i) of slice s into shared memory.
template <int R>
LUM_FN void lum_wp_fetch(const LumWinOperand& o, const uint16_t* x, const long long (&rows)[R / 32],
                         unsigned valid, long long k_len, long long s, uint16_t* tile) {
  const int t = threadIdx.x, piece = t & 3;
  const unsigned k = (unsigned)(s * LUM_WP_BK) + piece * 8;
  const bool valid_k = k < k_len;
  const long long col = valid_k ? lum_wp_column(o, k) : 0;
#pragma unroll
  for (int i = 0; i < R / 32; ++i) {
    const bool ok = valid_k && (valid >> i & 1);
    lum_cp16(lum_smem_addr(tile + ((t >> 2) + 32 * i) * LUM_WP_PITCH + piece * 8),
             ok ? x + rows[i] + col : x, ok ? 16 : 0);
  }
}
// This thread's rows of a tile of R rows from r0 (of `count`): their offsets, and which exist.
template <int R>
LUM_FN unsigned lum_wp_rows(const LumWinOperand& o, long long r0, long long count,
                            long long (&rows)[R / 32]) {
  unsigned valid = 0;
#pragma unroll
  for (int i = 0; i < R / 32; ++i) {
    const long long r = r0 + (threadIdx.x >> 2) + 32 * i;
    rows[i] = r < count ? lum_wp_row(o, (unsigned)r) : 0;
    valid |= (r < count ? 1u : 0u) << i;
  }
  return valid;
}
template <bool kBf16, int BM, int BN, int kStages>
LUM_FN void lum_window_product_runs(const LumWinArgs& p) {
  __shared__ __align__(16) uint16_t as[kStages][BM * LUM_WP_PITCH];
  __shared__ __align__(16) uint16_t bs[kStages][BN * LUM_WP_PITCH];
  const long long m0 = (long long)blockIdx.x * BM, n0 = (long long)blockIdx.y * BN;
  const uint16_t *a, *b;
  lum_wp_batch(p, a, b);
  long long a_rows[BM / 32], b_rows[BN / 32];
  const unsigned a_valid = lum_wp_rows<BM>(p.a, m0, p.m, a_rows);
  const unsigned b_valid = lum_wp_rows<BN>(p.b, n0, p.n, b_rows);
  const long long slices = (p.k + LUM_WP_BK - 1) / LUM_WP_BK;
#pragma unroll
  for (int s = 0; s + 1 < kStages; ++s) {
    if (s < slices) {
      lum_wp_fetch<BM>(p.a, a, a_rows, a_valid, p.k, s, as[s]);
      lum_wp_fetch<BN>(p.b, b, b_rows, b_valid, p.k, s, bs[s]);
    }
    lum_cp_commit();
  }
  float acc[BM / 32][BN / 16][4] = {};
  for (long long s = 0; s < slices; ++s) {
    lum_cp_wait<kStages - 2>();
    __syncthreads();
    // Into the buffer the slice before this one was multiplied from (every warp is past it).
    const long long next = s + kStages - 1;
    if (next < slices) {
      lum_wp_fetch<BM>(p.a, a, a_rows, a_valid, p.k, next, as[next % kStages]);
      lum_wp_fetch<BN>(p.b, b, b_rows, b_valid, p.k, next, bs[next % kStages]);
    }
    lum_cp_commit();
    lum_wp_products<kBf16, BM, BN>(acc, as[s % kStages], bs[s % kStages]);
  }
  lum_wp_store<kBf16, BM, BN>(p, acc, m0, n0);
}
// (The runs kernels of 64 x 128 and 128 x 64 fit 128 registers a thread without spilling:
// four blocks an SM, not three, to hide the latencies between their tensor-core steps.)
#define LUM_WP_KERNEL(name, blocks, call)                                              \
  extern "C" __global__ void __launch_bounds__(128, blocks) name(const LumWinArgs p) { \
    lum_after_prior_grids();                                                           \
    call(p);                                                                           \
  }
#if __CUDA_ARCH__ >= 800
LUM_WP_KERNEL(lum_window_product_f16_128x64, 1, (lum_window_product<false, 64>))
LUM_WP_KERNEL(lum_window_product_bf16_128x64, 1, (lum_window_product<true, 64>))
LUM_WP_KERNEL(lum_window_product_runs_f16_128x64, 4, (lum_window_product_runs<false, 128, 64, 3>))
LUM_WP_KERNEL(lum_window_product_runs_f16_64x128, 4, (lum_window_product_runs<false, 64, 128, 3>))
LUM_WP_KERNEL(lum_window_product_runs_f16_128x128, 1, (lum_window_product_runs<false, 128, 128, 2>))
LUM_WP_KERNEL(lum_window_product_runs_bf16_128x64, 4, (lum_window_product_runs<true, 128, 64, 3>))
LUM_WP_KERNEL(lum_window_product_runs_bf16_64x128, 4, (lum_window_product_runs<true, 64, 128, 3>))
LUM_WP_KERNEL(lum_window_product_runs_bf16_128x128, 1, (lum_window_product_runs<true, 128, 128, 2>))
#endif
)WP";

// LumWinOperand and LumWinArgs as the kernels take them.
struct Operand {
  const void* p = nullptr;
  int row_rank = 0, col_rank = 0;
  long long row_dim[kRowDims] = {}, row_s[kRowDims] = {};
  long long col_dim[kColDims] = {}, col_s[kColDims] = {};
  long long batch_s[kBatchDims] = {};
  // Appends a dim of the rows or of the sum (dims of 1 are left out); false past the most.
  bool add(bool row, long long dim, long long stride) {
    if (dim == 1) return true;
    int& rank = row ? row_rank : col_rank;
    if (rank == static_cast<int>(row ? kRowDims : kColDims)) return false;
    (row ? row_dim : col_dim)[rank] = dim;
    (row ? row_s : col_s)[rank++] = stride;
    return true;
  }
  // Whether the kernel over runs of eight reads it (see its source).
  bool runs() const {
    const auto eights = [](const long long* v, int n) {
      return std::all_of(v, v + n, [](long long x) { return x % 8 == 0; });
    };
    const int inner = col_rank - 1;
    return inner >= 0 && col_s[inner] == 1 && col_dim[inner] % 8 == 0 && eights(col_s, inner) &&
           eights(row_s, row_rank) && eights(batch_s, kBatchDims) &&
           reinterpret_cast<uintptr_t>(p) % 16 == 0;
  }
};
struct Args {
  Operand a, b;
  void* out = nullptr;
  long long m = 1, n = 1, k = 1;
  int batch_rank = 0, unused = 0;
  long long batch_dim[kBatchDims] = {};
};

// The ways a product can run: a kernel (gathering runs of eight, or any strides of the
// image) with its block's tile of the output, the columns copied out and multiplied by
// cuBLASLt, or cuDNN's convolution.
enum Way : size_t { kRuns128x64, kRuns64x128, kRuns128x128, kTiles128x64, kColumns, kCudnn };
constexpr const char* kWayLabels[] = {"runs 128x64",  "runs 64x128", "runs 128x128",
                                      "tiles 128x64", "columns",     "cudnn"};
// How many of cuDNN's algorithms for a convolution are timed (its heuristics' first).
constexpr size_t kCudnnAlgorithms = 2;
constexpr int kTileRows[] = {128, 64, 128, 128}, kTileColumns[] = {64, 128, 128, 64};

// How many products (blockIdx.z) the kernels' arguments cover.
long long products_of(const Args& p) {
  long long count = 1;
  for (int d = 0; d < p.batch_rank; ++d) count *= p.batch_dim[d];
  return count;
}

std::string describe(const Operand& o) {
  std::string s = "rows";
  for (int d = 0; d < o.row_rank; ++d)
    s += " " + std::to_string(o.row_dim[d]) + ":" + std::to_string(o.row_s[d]);
  s += " sums";
  for (int d = 0; d < o.col_rank; ++d)
    s += " " + std::to_string(o.col_dim[d]) + ":" + std::to_string(o.col_s[d]);
  return s;
}

}  // namespace

std::string window_products_source() {
  return std::string(cuda_prelude()) + std::string(tensor_core_source()) + kSource;
}

bool WindowProducts::run(const ConcreteView& a, const void* a_data, const ConcreteView& b,
                         const void* b_data, DType t, size_t row_dims, bool transposed, void* out) {
  const size_t rb = b.dims.size(), ra = a.dims.size();
  if ((t != DType::F16 && t != DType::BF16) || a.has_mask() || b.has_mask() ||
      device_.compute_capability() < 80 || rb < 3 || ra < rb - 3 + row_dims + 2)
    return false;
  const size_t batch = rb - 3;
  // The kernels' arguments for the output as asked (`flip`: transposed) or not. The image
  // (a, gathered) and the weight (b): the image's rows are its R dims, and, but where the
  // output is transposed, the batch dims outside them that b does not vary along (a
  // convolution's images), while the output's rows stay in order.
  const auto args_for = [&](bool flip) -> std::optional<Args> {
    Operand image, weight;
    image.p = static_cast<const uint16_t*>(a_data) + a.offset;
    weight.p = static_cast<const uint16_t*>(b_data) + b.offset;
    size_t folded = batch;
    while (!flip && folded > 0 && (b.strides[folded - 1] == 0 || b.dims[folded - 1] == 1)) --folded;
    bool fits = true;
    for (size_t d = folded; d < batch + row_dims; ++d)
      fits &= image.add(true, a.dims[d], a.strides[d]);
    for (size_t d = batch + row_dims; d + 1 < ra; ++d)
      fits &= image.add(false, a.dims[d], a.strides[d]);
    fits &= weight.add(true, b.dims[rb - 1], b.strides[rb - 1]);
    fits &= weight.add(false, b.dims[rb - 2], b.strides[rb - 2]);
    Args p;
    long long rows = 1;
    for (size_t d = 0; d < folded; ++d) {
      if (b.dims[d] == 1) continue;
      if (p.batch_rank == static_cast<int>(kBatchDims)) return std::nullopt;
      image.batch_s[p.batch_rank] = a.strides[d];
      weight.batch_s[p.batch_rank] = b.strides[d];
      p.batch_dim[p.batch_rank++] = b.dims[d];
    }
    for (int d = 0; d < image.row_rank; ++d) rows *= image.row_dim[d];
    p.k = b.dims[rb - 2];
    // Transposed: out[z][channel][pixel], the weight's rows the output's.
    p.a = flip ? weight : image;
    p.b = flip ? image : weight;
    p.m = flip ? b.dims[rb - 1] : rows;
    p.n = flip ? rows : b.dims[rb - 1];
    if (!fits || products_of(p) > 65535 || (p.n + 63) / 64 > 65535 ||
        p.m >= (int64_t{1} << 31) || p.n >= (int64_t{1} << 31) || p.k >= (int64_t{1} << 31))
      return std::nullopt;
    return p;
  };
  std::optional<Args> asked = args_for(transposed);
  // (Transposed, the product can also be stored as it comes and transposed after.)
  std::optional<Args> plain = transposed ? args_for(false) : asked;
  if (!asked) return false;
  const long long products = products_of(*asked);
  const int64_t numel = asked->m * asked->n * products;
  if (numel == 0) return true;
  const std::string type = t == DType::BF16 ? "bf16" : "f16";

  const auto kernel = [&](size_t way, Args& p, void* dst) {
    if (!module_)
      module_ =
          std::make_unique<Module>(compile_cubin(window_products_source(), device_.arch()).code);
    const int bm = kTileRows[way], bn = kTileColumns[way];
    const std::string name = std::string("lum_window_product_") +
                             (way <= kRuns128x128 ? "runs_" : "") + type + "_" +
                             std::to_string(bm) + "x" + std::to_string(bn);
    p.out = dst;
    void* args[] = {&p};
    const dim3 grid(static_cast<unsigned>((p.m + bm - 1) / bm),
                    static_cast<unsigned>((p.n + bn - 1) / bn),
                    static_cast<unsigned>(products_of(p)));
    check(device_.launch(module_->kernel(name), grid, dim3(128), args, 0),
          "launching a window product");
  };
  // The columns row-major, [batch..., M, K] (a without its N dim), times b by cuBLASLt.
  ConcreteView cols_view = a;
  cols_view.dims.pop_back();
  cols_view.strides.pop_back();
  cols_view.mask_lo.pop_back();
  cols_view.mask_hi.pop_back();
  ConcreteView dense = b;  // [batch..., M, K, N] over the columns
  dense.offset = 0;
  dense.strides[rb - 1] = 0;
  dense.strides[rb - 2] = 1;
  dense.strides[rb - 3] = dense.dims[rb - 2];
  for (int64_t d = static_cast<int64_t>(batch) - 1, step = b.dims[rb - 2] * b.dims[rb - 3]; d >= 0;
       --d) {
    dense.strides[static_cast<size_t>(d)] = step;
    step *= b.dims[static_cast<size_t>(d)];
  }
  const auto columns = [&](void* dst) {
    void* c = grown(device_, columns_, static_cast<size_t>(cols_view.numel()) * 2);
    LUM_CHECK(copy_.run(cols_view, a_data, 2, c)) << "internal: a window product's columns";
    LUM_CHECK(gemm_.run(dense, c, b, b_data, t, dst, t))
        << "internal: no cuBLASLt product over a window product's columns";
  };
  // Transposed after: [batch..., M, N] in scratch to [batch..., N, M].
  int64_t batches = 1;
  for (size_t d = 0; d < batch; ++d) batches *= b.dims[d];
  // cuDNN's convolution storing the output as asked (`as_asked`), or as the product comes.
  std::optional<Convolution2d> convolutions[2];
  const auto convolution = [&](bool as_asked) -> const std::optional<Convolution2d>& {
    std::optional<Convolution2d>& c = convolutions[as_asked];
    if (!c) c = convolution_of(a, b, row_dims, as_asked && transposed);
    return c;
  };
  const auto run_choice = [&](Choice c) {
    void* dst = c.after ? grown(device_, unflipped_, static_cast<size_t>(numel) * 2) : out;
    if (c.way == kCudnn) {
      const std::optional<Convolution2d>& conv = convolution(!c.after);
      LUM_CHECK(conv) << "internal: a window product chose cuDNN but is no convolution";
      cudnn_.run(*conv, t, c.algorithm, static_cast<const uint16_t*>(a_data) + a.offset,
                 static_cast<const uint16_t*>(b_data) + b.offset, dst);
    } else if (c.way == kColumns)
      columns(dst);
    else
      kernel(c.way, c.after || !transposed ? *plain : *asked, dst);
    if (c.after) copy_.transpose(dst, batches, b.dims[rb - 3], b.dims[rb - 1], out);
  };

  const bool runs = asked->a.runs() && asked->b.runs();
  const bool plain_runs = plain && plain->a.runs() && plain->b.runs();
  const std::string signature =
      "window " + type + (transposed ? " transposed" : "") + (runs ? " runs" : "") +
      " m=" + std::to_string(asked->m) + " n=" + std::to_string(asked->n) +
      " k=" + std::to_string(asked->k) + " image " + describe(transposed ? asked->b : asked->a) +
      " weight " + describe(transposed ? asked->a : asked->b) +
      " products=" + std::to_string(products);
  auto chosen = way_.find(signature);
  if (chosen == way_.end()) {
    // cuDNN's convolutions first where it runs this one (its heuristics' best the cost
    // model's pick: on an H200 2-10 times faster than luminal's kernels for resnet18's
    // 3x3 convolutions, within 1.5 times either way for the 1x1 ones), so that a shape
    // the search's budget leaves untimed, or a search turned off, gets them. Then
    // luminal's: runs of eight where the kernel takes them, else (not transposed) any
    // strides; a tile of 64 columns (on an H200, faster than 128 for each of resnet18's
    // convolutions), or of 64 rows where there are no more. Transposed, the product as
    // it comes and transposed after is a candidate too.
    std::vector<Choice> ways;
    for (bool after : {false, true}) {
      if (after && !transposed) continue;
      if (const std::optional<Convolution2d>& conv = convolution(!after))
        for (int algorithm : cudnn_.algorithms(*conv, t, kCudnnAlgorithms))
          ways.push_back({kCudnn, after, algorithm});
    }
    if (runs && transposed) {
      ways.push_back({asked->m <= 64 ? kRuns64x128 : kRuns128x64, false});
      ways.push_back({asked->m <= 64 ? kRuns128x64 : kRuns64x128, false});
    } else if (runs) {
      ways.push_back({kRuns128x64, false});
      if (asked->n > 64) ways.push_back({kRuns128x128, false});
    } else if (!transposed) {
      ways.push_back({kTiles128x64, false});
    }
    if (transposed && plain) ways.push_back({plain_runs ? kRuns128x64 : kTiles128x64, true});
    ways.push_back({kColumns, transposed});
    size_t pick = 0;
    if (ways.size() > 1 && searcher_.settings().mode != runtime::SearchMode::Off) {
      runtime::SearchProblem sp;
      sp.signature = signature;
      for (Choice c : ways)
        sp.candidates.push_back(
            {std::string(kWayLabels[c.way]) +
                 (c.way == kCudnn ? " " + CudnnConvolutions::algorithm_name(c.algorithm) : "") +
                 (c.after ? ", transposed after" : ""),
             [&, c] { run_choice(c); }});
      DeviceTrials trials(device_);
      // The same sums in f32 in another order, rounded once to the half type.
      trials.judge(sp, out, static_cast<size_t>(numel), t, 2e-2);
      pick = searcher_.choose(sp).winner;
    }
    chosen = way_.emplace(signature, ways[pick]).first;
  }
  run_choice(chosen->second);
  return true;
}

}  // namespace luminal::cudagen

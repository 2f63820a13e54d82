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
#define LUM_WP_BM 128
#define LUM_WP_BK 32
// Halves a row of a tile in shared memory: 80 bytes, so the eight rows one matrix load
// reads lie in distinct banks.
#define LUM_WP_PITCH 40
struct LumWinArgs {
  const uint16_t* a; const uint16_t* b; uint16_t* out;
  long long m, n, k;        // rows, columns and sum of each product (each below 2^31)
  long long b_k, b_n;       // b's element (k, n): b[k * b_k + n * b_n]
  int row_rank, col_rank, batch_rank, b_along_k;
  long long row_dim[8], row_a[8];   // the rows' dims, outermost first, and a's strides
  long long col_dim[6], col_a[6];   // the sum's
  long long batch_dim[4], batch_a[4], batch_b[4];
};
// Offsets into a of row m (< p.m) and of the sum's element k (< p.k).
LUM_FN long long lum_wp_row(const LumWinArgs& p, unsigned m) {
  long long at = 0;
#pragma unroll
  for (int d = 7; d >= 0; --d)
    if (d < p.row_rank) {
      at += (long long)(m % (unsigned)p.row_dim[d]) * p.row_a[d];
      m /= (unsigned)p.row_dim[d];
    }
  return at;
}
LUM_FN long long lum_wp_column(const LumWinArgs& p, unsigned k) {
  long long at = 0;
#pragma unroll
  for (int d = 5; d >= 0; --d)
    if (d < p.col_rank) {
      at += (long long)(k % (unsigned)p.col_dim[d]) * p.col_a[d];
      k /= (unsigned)p.col_dim[d];
    }
  return at;
}
// Product blockIdx.z's first elements of a and b.
LUM_FN void lum_wp_batch(const LumWinArgs& p, const uint16_t*& a, const uint16_t*& b) {
  long long a0 = 0, b0 = 0, z = blockIdx.z;
#pragma unroll
  for (int d = 3; d >= 0; --d)
    if (d < p.batch_rank) {
      const long long i = z % p.batch_dim[d];
      z /= p.batch_dim[d];
      a0 += i * p.batch_a[d];
      b0 += i * p.batch_b[d];
    }
  a = p.a + a0;
  b = p.b + b0;
}
// acc += the staged slice's product: four warps, 2 x 2, each 64 rows by BN / 2 columns.
template <bool kBf16, int BN>
LUM_FN void lum_wp_products(float (&acc)[4][BN / 16][4], const uint16_t* as, const uint16_t* bs) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, wm = warp >> 1, wn = warp & 1;
#pragma unroll
  for (int kk = 0; kk < LUM_WP_BK; kk += 16) {
    uint32_t af[4][4];
#pragma unroll
    for (int i = 0; i < 4; ++i)
      lum_ldsm(af[i], lum_smem_addr(&as[(wm * 64 + i * 16 + (lane & 15)) * LUM_WP_PITCH + kk +
                                        (lane >> 4) * 8]));
#pragma unroll
    for (int j = 0; j < BN / 32; ++j) {
      uint32_t bf[4];
      lum_ldsm(bf, lum_smem_addr(&bs[(wn * (BN / 2) + j * 16 + (lane >> 4) * 8 + (lane & 7)) *
                                         LUM_WP_PITCH +
                                     kk + ((lane >> 3) & 1) * 8]));
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        lum_mma<kBf16>(acc[i][2 * j], af[i], bf[0], bf[1]);
        lum_mma<kBf16>(acc[i][2 * j + 1], af[i], bf[2], bf[3]);
      }
    }
  }
}
// The block's tile of out[z][m][n] (row-major), two columns a store where they can.
template <bool kBf16, int BN>
LUM_FN void lum_wp_store(const LumWinArgs& p, const float (&acc)[4][BN / 16][4], long long m0,
                         long long n0) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, wm = warp >> 1, wn = warp & 1;
  uint16_t* out = p.out + (long long)blockIdx.z * p.m * p.n;
  const bool pairs = (p.n & 1) == 0;
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const long long m = m0 + wm * 64 + i * 16 + (lane >> 2) + 8 * h;
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

// Any strides: each thread gathers one row of a's slice, element by element, into
// registers while the slice before is multiplied (a's tile, 128 x 32, then b's).
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
  const int t = threadIdx.x;
  // Along k where b's rows run along it (a convolution's weights), else along n: the
  // warp's loads side by side either way.
  const int kk = p.b_along_k ? (t & 31) : t / BN;
  const int nn = p.b_along_k ? (t >> 5) : (t % BN);
  const int k_step = p.b_along_k ? 0 : 128 / BN, n_step = p.b_along_k ? 4 : 0;
  const bool whole = whole_k && n0 + BN <= p.n;
#pragma unroll
  for (int i = 0; i < BN / 4; ++i) {
    const long long k = k0 + kk + i * k_step, n = n0 + nn + i * n_step;
    const uint32_t v = whole || (k < p.k && n < p.n) ? b[k * p.b_k + n * p.b_n] : 0;
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
  const int kk = p.b_along_k ? (t & 31) : t / BN;
  const int nn = p.b_along_k ? (t >> 5) : (t % BN);
  const int k_step = p.b_along_k ? 0 : 128 / BN, n_step = p.b_along_k ? 4 : 0;
#pragma unroll
  for (int i = 0; i < BN / 4; ++i)
    bs[(nn + i * n_step) * LUM_WP_PITCH + kk + i * k_step] = (uint16_t)(rb[i / 2] >> (16 * (i % 2)));
}
template <bool kBf16, int BN>
LUM_FN void lum_window_product(const LumWinArgs& p) {
  __shared__ __align__(16) uint16_t as[2][LUM_WP_BM * LUM_WP_PITCH];
  __shared__ __align__(16) uint16_t bs[2][BN * LUM_WP_PITCH];
  __shared__ long long cols[2][LUM_WP_BK];  // slice s's column offsets at cols[s & 1]
  const int t = threadIdx.x;
  const long long m0 = (long long)blockIdx.x * LUM_WP_BM, n0 = (long long)blockIdx.y * BN;
  const uint16_t *a, *b;
  lum_wp_batch(p, a, b);
  const bool valid = m0 + t < p.m;
  const long long row = valid ? lum_wp_row(p, (unsigned)(m0 + t)) : 0;
  const long long slices = (p.k + LUM_WP_BK - 1) / LUM_WP_BK;
  // (Written by the first warp a slice ahead.)
  if (t < LUM_WP_BK) {
    cols[0][t] = t < p.k ? lum_wp_column(p, t) : 0;
    if (slices > 1) cols[1][t] = LUM_WP_BK + t < p.k ? lum_wp_column(p, LUM_WP_BK + t) : 0;
  }
  __syncthreads();
  uint32_t ra[LUM_WP_BK / 2], rb[BN / 8];
  lum_wp_gather<BN>(p, a, b, row, valid, cols[0], 0, n0, ra, rb);
  lum_wp_stage<BN>(p, ra, rb, as[0], bs[0]);
  __syncthreads();
  float acc[4][BN / 16][4] = {};
  for (long long s = 0; s < slices; ++s) {
    const int buf = (int)(s & 1);
    const bool more = s + 1 < slices;
    // The next slice's loads are on their way while this one's products run.
    if (more) lum_wp_gather<BN>(p, a, b, row, valid, cols[buf ^ 1], s + 1, n0, ra, rb);
    lum_wp_products<kBf16, BN>(acc, as[buf], bs[buf]);
    if (more) {
      lum_wp_stage<BN>(p, ra, rb, as[buf ^ 1], bs[buf ^ 1]);
      // Slice s + 2's offsets where slice s's were, read for the last time above.
      const long long k = (s + 2) * LUM_WP_BK + t;
      if (t < LUM_WP_BK && s + 2 < slices) cols[buf][t] = k < p.k ? lum_wp_column(p, k) : 0;
    }
    __syncthreads();
  }
  lum_wp_store<kBf16, BN>(p, acc, m0, n0);
}

// Runs of eight: the sum's innermost dim is contiguous in a (a channels-last image) and a
// multiple of 8 long, b is read along k, and every offset is a multiple of 8 elements, so
// a slice's rows are four 16-byte pieces each, copied to shared memory without
// registers (cp.async), kStages slices in flight.
LUM_FN void lum_wp_cp16(uint16_t* dst, const uint16_t* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(lum_smem_addr(dst)),
               "l"(src), "r"(valid ? 16 : 0));
}
template <int BN>
LUM_FN void lum_wp_fetch(const LumWinArgs& p, const uint16_t* a, const uint16_t* b,
                         const long long (&rows)[4], unsigned valid_rows, long long s,
                         long long n0, uint16_t* as, uint16_t* bs) {
  const int t = threadIdx.x, piece = t & 3;
  const unsigned k = (unsigned)(s * LUM_WP_BK) + piece * 8;
  const bool valid_k = k < p.k;
  const long long col = valid_k ? lum_wp_column(p, k) : 0;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const bool ok = valid_k && (valid_rows >> i & 1);
    lum_wp_cp16(as + ((t >> 2) + 32 * i) * LUM_WP_PITCH + piece * 8, ok ? a + rows[i] + col : a, ok);
  }
#pragma unroll
  for (int i = 0; i < BN / 32; ++i) {
    const long long n = n0 + (t >> 2) + 32 * i;
    const bool ok = valid_k && n < p.n;
    lum_wp_cp16(bs + ((t >> 2) + 32 * i) * LUM_WP_PITCH + piece * 8, ok ? b + n * p.b_n + k : b, ok);
  }
}
template <bool kBf16, int BN, int kStages>
LUM_FN void lum_window_product_runs(const LumWinArgs& p) {
  __shared__ __align__(16) uint16_t as[kStages][LUM_WP_BM * LUM_WP_PITCH];
  __shared__ __align__(16) uint16_t bs[kStages][BN * LUM_WP_PITCH];
  const int t = threadIdx.x;
  const long long m0 = (long long)blockIdx.x * LUM_WP_BM, n0 = (long long)blockIdx.y * BN;
  const uint16_t *a, *b;
  lum_wp_batch(p, a, b);
  // This thread's four rows: (t / 4) + 32 i.
  long long rows[4];
  unsigned valid_rows = 0;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const long long m = m0 + (t >> 2) + 32 * i;
    rows[i] = m < p.m ? lum_wp_row(p, (unsigned)m) : 0;
    valid_rows |= (m < p.m ? 1u : 0u) << i;
  }
  const long long slices = (p.k + LUM_WP_BK - 1) / LUM_WP_BK;
#pragma unroll
  for (int s = 0; s + 1 < kStages; ++s) {
    if (s < slices) lum_wp_fetch<BN>(p, a, b, rows, valid_rows, s, n0, as[s], bs[s]);
    asm volatile("cp.async.commit_group;");
  }
  float acc[4][BN / 16][4] = {};
  for (long long s = 0; s < slices; ++s) {
    asm volatile("cp.async.wait_group %0;" ::"n"(kStages - 2));
    __syncthreads();
    // Into the buffer the slice before this one was multiplied from (every warp is past it).
    const long long next = s + kStages - 1;
    if (next < slices)
      lum_wp_fetch<BN>(p, a, b, rows, valid_rows, next, n0, as[next % kStages], bs[next % kStages]);
    asm volatile("cp.async.commit_group;");
    lum_wp_products<kBf16, BN>(acc, as[s % kStages], bs[s % kStages]);
  }
  lum_wp_store<kBf16, BN>(p, acc, m0, n0);
}
#define LUM_WP_KERNEL(name, call)                                                     \
  extern "C" __global__ void __launch_bounds__(128) name(const LumWinArgs p) {        \
    lum_after_prior_grids();                                                          \
    call(p);                                                                          \
  }
#if __CUDA_ARCH__ >= 800
LUM_WP_KERNEL(lum_window_product_f16_64, (lum_window_product<false, 64>))
LUM_WP_KERNEL(lum_window_product_f16_128, (lum_window_product<false, 128>))
LUM_WP_KERNEL(lum_window_product_bf16_64, (lum_window_product<true, 64>))
LUM_WP_KERNEL(lum_window_product_bf16_128, (lum_window_product<true, 128>))
LUM_WP_KERNEL(lum_window_product_runs_f16_64, (lum_window_product_runs<false, 64, 3>))
LUM_WP_KERNEL(lum_window_product_runs_f16_128, (lum_window_product_runs<false, 128, 2>))
LUM_WP_KERNEL(lum_window_product_runs_bf16_64, (lum_window_product_runs<true, 64, 3>))
LUM_WP_KERNEL(lum_window_product_runs_bf16_128, (lum_window_product_runs<true, 128, 2>))
#endif
)WP";

struct Args {
  const void* a;
  const void* b;
  void* out;
  long long m, n, k;
  long long b_k, b_n;
  int row_rank, col_rank, batch_rank, b_along_k;
  long long row_dim[kRowDims], row_a[kRowDims];
  long long col_dim[kColDims], col_a[kColDims];
  long long batch_dim[kBatchDims], batch_a[kBatchDims], batch_b[kBatchDims];
};

// The ways a product can run: a kernel (gathering runs of eight, or any strides) with 64
// or 128 columns a block, or the columns copied out and multiplied by cuBLASLt.
enum Way : size_t { kRuns64, kRuns128, kTiles64, kTiles128, kColumns };
constexpr const char* kWayLabels[] = {"runs n64", "runs n128", "tiles n64", "tiles n128",
                                      "columns"};

// Whether the kernel over runs of eight takes `p` (see its source).
bool takes_runs(const Args& p) {
  const auto eights = [](const long long* v, int n) {
    return std::all_of(v, v + n, [](long long x) { return x % 8 == 0; });
  };
  const int inner = p.col_rank - 1;
  return inner >= 0 && p.col_a[inner] == 1 && p.col_dim[inner] % 8 == 0 && eights(p.col_a, inner) &&
         eights(p.row_a, p.row_rank) && eights(p.batch_a, p.batch_rank) &&
         eights(p.batch_b, p.batch_rank) && p.b_k == 1 && p.b_n % 8 == 0 &&
         reinterpret_cast<uintptr_t>(p.a) % 16 == 0 && reinterpret_cast<uintptr_t>(p.b) % 16 == 0;
}

}  // namespace

std::string window_products_source() {
  return std::string(cuda_prelude()) + std::string(tensor_core_source()) + kSource;
}

bool WindowProducts::run(const ConcreteView& a, const void* a_data, const ConcreteView& b,
                         const void* b_data, DType t, size_t row_dims, void* out) {
  if ((t != DType::F16 && t != DType::BF16) || a.has_mask() || b.has_mask() ||
      device_.compute_capability() < 80)
    return false;
  const size_t rb = b.dims.size(), batch = rb - 3, ra = a.dims.size();
  if (rb < 3 || ra < batch + row_dims + 2) return false;
  Args p{};
  p.a = static_cast<const uint16_t*>(a_data) + a.offset;
  p.b = static_cast<const uint16_t*>(b_data) + b.offset;
  p.out = out;
  p.n = b.dims[rb - 1];
  p.b_k = b.strides[rb - 2];
  p.b_n = b.strides[rb - 1];
  p.b_along_k = p.b_k == 1;
  // The rows: a's R dims, and outside them the batch dims b does not vary along (the
  // images of a convolution), innermost first, while the output's rows stay in order.
  std::vector<std::pair<int64_t, int64_t>> rows, sums;
  std::vector<size_t> batch_dims;
  for (size_t d = batch; d < batch + row_dims; ++d) rows.emplace_back(a.dims[d], a.strides[d]);
  size_t folded = batch;
  while (folded > 0 && (b.strides[folded - 1] == 0 || b.dims[folded - 1] == 1)) {
    --folded;
    rows.insert(rows.begin(), {a.dims[folded], a.strides[folded]});
  }
  for (size_t d = batch + row_dims; d + 1 < ra; ++d) sums.emplace_back(a.dims[d], a.strides[d]);
  std::erase_if(rows, [](const auto& d) { return d.first == 1; });
  std::erase_if(sums, [](const auto& d) { return d.first == 1; });
  for (size_t d = 0; d < folded; ++d)
    if (b.dims[d] != 1) batch_dims.push_back(d);
  if (rows.size() > kRowDims || sums.size() > kColDims || batch_dims.size() > kBatchDims)
    return false;
  p.m = p.k = 1;
  for (const auto& [dim, stride] : rows) {
    p.row_dim[p.row_rank] = dim;
    p.row_a[p.row_rank++] = stride;
    p.m *= dim;
  }
  for (const auto& [dim, stride] : sums) {
    p.col_dim[p.col_rank] = dim;
    p.col_a[p.col_rank++] = stride;
    p.k *= dim;
  }
  long long products = 1;
  for (size_t d : batch_dims) {
    p.batch_dim[p.batch_rank] = b.dims[d];
    p.batch_a[p.batch_rank] = a.strides[d];
    p.batch_b[p.batch_rank++] = b.strides[d];
    products *= b.dims[d];
  }
  if (p.m * p.n == 0 || products == 0) return true;
  if (products > 65535 || (p.n + 63) / 64 > 65535 || p.m >= (int64_t{1} << 31) ||
      p.k >= (int64_t{1} << 31))
    return false;

  const std::string type = t == DType::BF16 ? "bf16" : "f16";
  const auto kernel = [&](const char* kind, int bn) {
    if (!module_)
      module_ =
          std::make_unique<Module>(compile_cubin(window_products_source(), device_.arch()).code);
    const std::string name =
        "lum_window_product_" + std::string(kind) + type + "_" + std::to_string(bn);
    void* args[] = {&p};
    const dim3 grid(static_cast<unsigned>((p.m + 127) / 128),
                    static_cast<unsigned>((p.n + bn - 1) / bn), static_cast<unsigned>(products));
    check(device_.launch(module_->kernel(name), grid, dim3(128), args, 0),
          "launching a window product");
  };
  // The columns row-major, [batch..., M, K] (a without its N dim), then an ordinary
  // product over them.
  ConcreteView cols_view = a;
  cols_view.dims.pop_back();
  cols_view.strides.pop_back();
  cols_view.mask_lo.pop_back();
  cols_view.mask_hi.pop_back();
  ConcreteView dense = b;  // [batch..., M, K, N] over the columns
  dense.offset = 0;
  dense.strides[rb - 1] = 0;
  dense.strides[rb - 2] = 1;
  dense.strides[rb - 3] = p.k;
  for (int64_t d = static_cast<int64_t>(batch) - 1, step = p.k * b.dims[rb - 3]; d >= 0; --d) {
    dense.strides[static_cast<size_t>(d)] = step;
    step *= b.dims[static_cast<size_t>(d)];
  }
  const auto columns = [&] {
    const size_t bytes = static_cast<size_t>(cols_view.numel()) * 2;
    void* c = grown(device_, columns_, bytes);
    LUM_CHECK(copy_.run(cols_view, a_data, 2, c)) << "internal: a window product's columns";
    LUM_CHECK(gemm_.run(dense, c, b, b_data, t, out, t))
        << "internal: no cuBLASLt product over a window product's columns";
  };
  const auto run_way = [&](size_t way) {
    if (way == kColumns)
      columns();
    else
      kernel(way <= kRuns128 ? "runs_" : "", way == kRuns64 || way == kTiles64 ? 64 : 128);
  };

  const bool runs = takes_runs(p);
  std::string signature = "window " + type + (runs ? " runs" : "") + " m=" + std::to_string(p.m) +
                          " n=" + std::to_string(p.n) + " k=" + std::to_string(p.k) + " rows";
  for (int d = 0; d < p.row_rank; ++d)
    signature += " " + std::to_string(p.row_dim[d]) + ":" + std::to_string(p.row_a[d]);
  signature += " sums";
  for (int d = 0; d < p.col_rank; ++d)
    signature += " " + std::to_string(p.col_dim[d]) + ":" + std::to_string(p.col_a[d]);
  signature += " b " + std::to_string(p.b_k) + ":" + std::to_string(p.b_n) +
               " products=" + std::to_string(products);
  auto chosen = way_.find(signature);
  if (chosen == way_.end()) {
    // The cost model's pick: runs of eight where the kernel takes them, 64 columns a block
    // (on an H200, faster than 128 for each of resnet18's convolutions).
    const size_t first = runs ? kRuns64 : kTiles64;
    std::vector<size_t> ways{first};
    if (p.n > 64) ways.push_back(first + 1);
    ways.push_back(kColumns);
    size_t pick = 0;
    if (searcher_.settings().mode != runtime::SearchMode::Off) {
      runtime::SearchProblem sp;
      sp.signature = signature;
      for (size_t w : ways) sp.candidates.push_back({kWayLabels[w], [&, w] { run_way(w); }});
      DeviceTrials trials(device_);
      // The same sums in f32 in another order, rounded once to the half type.
      trials.judge(sp, out, static_cast<size_t>(p.m * p.n * products), t, 2e-2);
      pick = searcher_.choose(sp).winner;
    }
    chosen = way_.emplace(signature, ways[pick]).first;
  }
  run_way(chosen->second);
  return true;
}

}  // namespace luminal::cudagen

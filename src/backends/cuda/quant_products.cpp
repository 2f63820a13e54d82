// Products over ggml block formats on the GPU (see quant_products.hpp).
#include "backends/cuda/quant_products.hpp"

#include <algorithm>

#include "backends/cuda/codegen.hpp"
#include "luminal/error.hpp"
#include "luminal/quant.hpp"

namespace luminal::cudagen {
namespace {

// The decoders follow src/core/quant.cpp (the format definitions) value for value. A
// 32-element sub-block is the unit: the whole block of the 32-element formats, one of
// eight of a K-format's 256.
constexpr const char* kSource = R"QUANT(
constexpr int kQSubs = LUM_Q_ELEMS / 32;  // sub-blocks a block

// Every block size and field offset of these formats is even, and nothing wider than two
// bytes is aligned in general: fields are read two bytes at a time.
LUM_FN unsigned lum_q_u16(const unsigned char* p) { return *(const unsigned short*)p; }
LUM_FN float lum_q_half(const unsigned char* p) { return lum_h2f((uint16_t)lum_q_u16(p)); }
template <int N>
LUM_FN void lum_q_bytes(const unsigned char* p, unsigned char (&out)[N]) {
#pragma unroll
  for (int i = 0; i < N / 2; ++i) {
    const unsigned u = lum_q_u16(p + 2 * i);
    out[2 * i] = (unsigned char)(u & 0xFF), out[2 * i + 1] = (unsigned char)(u >> 8);
  }
}
// The 6-bit scale and min of sub-block j of a Q4_K / Q5_K block's 12-byte table.
LUM_FN void lum_q_scale_min(int j, const unsigned char (&s)[12], int& sc, int& m) {
  if (j < 4) {
    sc = s[j] & 63, m = s[j + 4] & 63;
  } else {
    sc = (s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4);
    m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
}

// Sub-block s of the block at b, decoded into w.
LUM_FN void lum_q_decode(const unsigned char* b, int s, float (&w)[32]) {
#if LUM_Q_FORMAT == 2 || LUM_Q_FORMAT == 3  // Q4_0, Q4_1
  constexpr bool kMin = LUM_Q_FORMAT == 3;
  const float d = lum_q_half(b), m = kMin ? lum_q_half(b + 2) : 0.0f;
  unsigned char q[16];
  lum_q_bytes(b + (kMin ? 4 : 2), q);
#pragma unroll
  for (int j = 0; j < 16; ++j) {
    if (kMin) {
      w[j] = (float)(q[j] & 0xF) * d + m, w[j + 16] = (float)(q[j] >> 4) * d + m;
    } else {
      w[j] = (float)((q[j] & 0xF) - 8) * d, w[j + 16] = (float)((q[j] >> 4) - 8) * d;
    }
  }
#elif LUM_Q_FORMAT == 6 || LUM_Q_FORMAT == 7  // Q5_0, Q5_1
  constexpr bool kMin = LUM_Q_FORMAT == 7;
  const float d = lum_q_half(b), m = kMin ? lum_q_half(b + 2) : 0.0f;
  const unsigned char* h = b + (kMin ? 4 : 2);
  const unsigned qh = lum_q_u16(h) | lum_q_u16(h + 2) << 16;
  unsigned char q[16];
  lum_q_bytes(h + 4, q);
#pragma unroll
  for (int j = 0; j < 16; ++j) {
    const int hi0 = (int)(((qh >> j) << 4) & 0x10), hi1 = (int)((qh >> (j + 12)) & 0x10);
    if (kMin) {
      w[j] = (float)((q[j] & 0xF) | hi0) * d + m, w[j + 16] = (float)((q[j] >> 4) | hi1) * d + m;
    } else {
      w[j] = (float)(((q[j] & 0xF) | hi0) - 16) * d;
      w[j + 16] = (float)(((q[j] >> 4) | hi1) - 16) * d;
    }
  }
#elif LUM_Q_FORMAT == 8  // Q8_0
  const float d = lum_q_half(b);
  unsigned char q[32];
  lum_q_bytes(b + 2, q);
#pragma unroll
  for (int j = 0; j < 32; ++j) w[j] = (float)(signed char)q[j] * d;
#elif LUM_Q_FORMAT == 12 || LUM_Q_FORMAT == 13  // Q4_K, Q5_K
  // Sub-blocks 2p and 2p + 1 share 32 bytes of quants: the low and the high nibbles.
  // Blocks of 144 and 176 bytes keep rows 16-byte aligned: the quants (and Q5_K's high
  // bits) are read 16 bytes at a time, the rest in 4-byte words.
  constexpr bool kFive = LUM_Q_FORMAT == 13;
  const unsigned head = *(const unsigned*)b;  // d, dmin
  const float d = lum_h2f((uint16_t)(head & 0xFFFF)), dmin = lum_h2f((uint16_t)(head >> 16));
  unsigned char table[12];
#pragma unroll
  for (int i = 0; i < 3; ++i) {
    const unsigned word = ((const unsigned*)(b + 4))[i];
#pragma unroll
    for (int e = 0; e < 4; ++e) table[4 * i + e] = (unsigned char)(word >> (8 * e));
  }
  int sc, m;
  lum_q_scale_min(s, table, sc, m);
  const float d1 = d * (float)sc, m1 = dmin * (float)m;
  const uint4* qp = (const uint4*)(b + (kFive ? 48 : 16) + 32 * (s / 2));
  const uint4 qa = qp[0], qb = qp[1];
  const unsigned q[8] = {qa.x, qa.y, qa.z, qa.w, qb.x, qb.y, qb.z, qb.w};
  unsigned qh[8] = {};
  if (kFive) {
    const uint4 ha = ((const uint4*)(b + 16))[0], hb = ((const uint4*)(b + 16))[1];
    qh[0] = ha.x, qh[1] = ha.y, qh[2] = ha.z, qh[3] = ha.w;
    qh[4] = hb.x, qh[5] = hb.y, qh[6] = hb.z, qh[7] = hb.w;
  }
  const int shift = (s & 1) * 4;
#pragma unroll
  for (int l = 0; l < 32; ++l) {
    const int at = 8 * (l % 4);
    const int hi = kFive ? (int)((qh[l / 4] >> (at + s)) & 1) * 16 : 0;
    w[l] = d1 * (float)((int)((q[l / 4] >> (at + shift)) & 0xF) + hi) - m1;
  }
#elif LUM_Q_FORMAT == 14  // Q6_K
  // Halves of 128 elements, each four groups of 32: group g takes its low four bits from
  // the low or high nibbles of 32 of the half's 64 bytes, its top two from bits 2g of the
  // half's 32 high-bit bytes, and a scale per 16 elements.
  const int half = s / 4, g = s % 4;
  const float d = lum_q_half(b + 208);
  unsigned char ql[32], qh[32], scales[2];
  lum_q_bytes(b + 64 * half + (g & 1) * 32, ql);
  lum_q_bytes(b + 128 + 32 * half, qh);
  lum_q_bytes(b + 192 + 8 * half + 2 * g, scales);
  const int nibble = (g >> 1) * 4;
#pragma unroll
  for (int l = 0; l < 32; ++l) {
    const int q = (int)(((ql[l] >> nibble) & 0xF) | (((qh[l] >> (2 * g)) & 3) << 4)) - 32;
    w[l] = d * (float)(signed char)scales[l / 16] * (float)q;
  }
#else
#error "no decoder for this format"
#endif
}

// y[r, j] = x[r] . W[j] for rows r < rows (at most eight): a warp per weight row j, its
// lanes over the row's sub-blocks. x's rows are f32, `x_row` apart, 16-byte aligned.
extern "C" __global__ void __launch_bounds__(256)
    lum_qgemv(const unsigned char* __restrict__ w, const float* __restrict__ x,
              float* __restrict__ y, long long n, long long k, long long rows, long long x_row,
              long long row_bytes) {
  const int lane = threadIdx.x % 32;
  const long long j = (long long)blockIdx.x * 8 + threadIdx.x / 32;
  if (j >= n) return;
  const unsigned char* wj = w + j * row_bytes;
  float acc[8];
#pragma unroll
  for (int r = 0; r < 8; ++r) acc[r] = 0.0f;
  for (long long sb = lane; sb < k / 32; sb += 32) {
    float v[32];
    lum_q_decode(wj + sb / kQSubs * LUM_Q_BYTES, (int)(sb % kQSubs), v);
#pragma unroll
    for (int r = 0; r < 8; ++r) {
      if (r >= rows) break;
      const float4* xp = (const float4*)(x + r * x_row + sb * 32);
      float sum = 0.0f;
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        const float4 t = __ldg(xp + i);
        sum = fmaf(v[4 * i], t.x, sum), sum = fmaf(v[4 * i + 1], t.y, sum);
        sum = fmaf(v[4 * i + 2], t.z, sum), sum = fmaf(v[4 * i + 3], t.w, sum);
      }
      acc[r] += sum;
    }
  }
#pragma unroll
  for (int r = 0; r < 8; ++r) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) acc[r] += __shfl_xor_sync(0xffffffffu, acc[r], o);
    if (lane == 0 && r < rows) y[r * n + j] = acc[r];
  }
}

// Weight rows [0, n) decoded into f16, row-major [n, k]: a thread per sub-block.
extern "C" __global__ void __launch_bounds__(256)
    lum_qdecode_f16(const unsigned char* __restrict__ w, uint16_t* __restrict__ out, long long n,
                    long long k, long long row_bytes) {
  const long long subs = k / 32, total = n * subs;
  for (long long i = (long long)blockIdx.x * 256 + threadIdx.x; i < total;
       i += (long long)gridDim.x * 256) {
    const long long row = i / subs, sb = i % subs;
    float v[32];
    lum_q_decode(w + row * row_bytes + sb / kQSubs * LUM_Q_BYTES, (int)(sb % kQSubs), v);
    uint4* o = (uint4*)(out + row * k + sb * 32);
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      unsigned p[4];
#pragma unroll
      for (int e = 0; e < 4; ++e)
        p[e] = (unsigned)lum_f2h(v[8 * q + 2 * e]) | (unsigned)lum_f2h(v[8 * q + 2 * e + 1]) << 16;
      o[q] = make_uint4(p[0], p[1], p[2], p[3]);
    }
  }
}
)QUANT";

// A [rows, k, cols] product operand view: strides along each.
ConcreteView operand(int64_t rows, int64_t k, int64_t cols, int64_t s_rows, int64_t s_k,
                     int64_t s_cols) {
  ConcreteView v;
  v.dims = {rows, k, cols};
  v.strides = {s_rows, s_k, s_cols};
  v.mask_lo = {0, 0, 0};
  v.mask_hi = v.dims;
  return v;
}

}  // namespace

bool quant_products_support(uint32_t format) {
  switch (static_cast<GgmlType>(format)) {
    case GgmlType::Q4_0:
    case GgmlType::Q4_1:
    case GgmlType::Q5_0:
    case GgmlType::Q5_1:
    case GgmlType::Q8_0:
    case GgmlType::Q4_K:
    case GgmlType::Q5_K:
    case GgmlType::Q6_K:
      return true;
    default:
      return false;
  }
}

std::string quant_products_source(uint32_t format) {
  size_t elems = 0, bytes = 0;
  LUM_CHECK(quant_products_support(format) && ggml_block_layout(format, elems, bytes))
      << "internal: no GPU decoder for " << ggml_type_name(format);
  return std::string(cuda_prelude()) + "#define LUM_Q_FORMAT " + std::to_string(format) +
         "\n#define LUM_Q_ELEMS " + std::to_string(elems) + "\n#define LUM_Q_BYTES " +
         std::to_string(bytes) + "\n" + kSource;
}

const void* QuantProducts::kernel(uint32_t format, const char* name) {
  std::unique_ptr<Module>& m = modules_[format];
  if (!m)
    m = std::make_unique<Module>(compile_cubin(quant_products_source(format), device_.arch()).code);
  return m->kernel(name);
}

bool QuantProducts::run(uint32_t format, const ConcreteView& x, const void* x_data,
                        const ConcreteView& w, const void* w_data, void* y) {
  size_t block_elems = 0, block_bytes = 0;
  if (!quant_products_support(format) || !ggml_block_layout(format, block_elems, block_bytes))
    return false;
  const size_t rank = x.dims.size();
  if (rank < 3 || w.dims.size() != 2 || x.has_mask() || w.has_mask()) return false;
  const int64_t k = w.dims[1], n = w.dims[0];
  const int64_t elems = static_cast<int64_t>(block_elems);
  if (x.dims[rank - 2] != k || x.dims[rank - 1] != n || w.strides[1] != 1 || w.strides[0] != k ||
      k % elems != 0 || w.offset % k != 0)
    return false;
  const int64_t row_bytes = k / elems * static_cast<int64_t>(block_bytes);
  const auto* weights = static_cast<const unsigned char*>(w_data) + w.offset / k * row_bytes;
  for (size_t d = 0; d + 2 < rank; ++d)  // rows read once each (no broadcast batch dim)
    if (x.dims[d] > 1 && x.strides[d] == 0) return false;
  const int64_t rows = x.numel() / (k * n);
  if (rows == 0 || n == 0) return true;

  if (rows <= kQuantGemvRows) {
    // x's rows, packed unless they already lie dense and 16-byte aligned.
    const ConcreteView x_rows = unbroadcast(x);
    const float* xp = static_cast<const float*>(x_data) + x.offset;
    if (!x_rows.is_dense() || x.offset % 4 != 0) {
      void* packed_rows = grown(device_, rows_, static_cast<size_t>(rows * k) * sizeof(float));
      if (!copy_.run(x_rows, x_data, sizeof(float), packed_rows)) return false;
      xp = static_cast<const float*>(packed_rows);
    }
    const void* gemv = kernel(format, "lum_qgemv");
    for (int64_t r0 = 0; r0 < rows; r0 += 8) {
      const float* xr = xp + r0 * k;
      float* yr = static_cast<float*>(y) + r0 * n;
      long long n_arg = n, k_arg = k, rows_arg = std::min<int64_t>(8, rows - r0), x_row = k,
                bytes_arg = row_bytes;
      void* args[] = {&weights, &xr, &yr, &n_arg, &k_arg, &rows_arg, &x_row, &bytes_arg};
      check(cudaLaunchKernel(gemv, dim3(static_cast<unsigned>((n + 7) / 8)), dim3(256), args, 0,
                             device_.stream()),
            "launching a quantised product");
    }
    return true;
  }

  // A prompt: x rounded to f16 once, then each chunk of weight rows decoded and
  // multiplied, its output columns put in place.
  const ConcreteView x_rows = unbroadcast(x);
  void* rounded = grown(device_, rows_, static_cast<size_t>(rows * k) * 2);
  if (!copy_.run_converted(x_rows, x_data, DType::F32, DType::F16, rounded)) return false;
  const int64_t chunk = std::clamp<int64_t>(kQuantChunkBytes / (2 * k), 1, n);
  void* decoded = grown(device_, decoded_, static_cast<size_t>(chunk * k) * 2);
  void* out =
      chunk < n ? grown(device_, out_, static_cast<size_t>(rows * chunk) * sizeof(float)) : y;
  const void* decode = kernel(format, "lum_qdecode_f16");
  for (int64_t j0 = 0; j0 < n; j0 += chunk) {
    const int64_t c = std::min(chunk, n - j0);
    const unsigned char* wj = weights + j0 * row_bytes;
    long long c_arg = c, k_arg = k, bytes_arg = row_bytes;
    void* args[] = {&wj, &decoded, &c_arg, &k_arg, &bytes_arg};
    const int64_t blocks =
        std::min<int64_t>((c * (k / 32) + 255) / 256, int64_t{device_.multiprocessors()} * 16);
    check(cudaLaunchKernel(decode, dim3(static_cast<unsigned>(blocks)), dim3(256), args, 0,
                           device_.stream()),
          "launching a weight decode");
    if (!gemm_.run(operand(rows, k, c, k, 1, 0), rounded, operand(rows, k, c, 0, 1, k), decoded,
                   DType::F16, out, DType::F32))
      return false;
    if (chunk < n)
      check(cudaMemcpy2DAsync(static_cast<float*>(y) + j0, static_cast<size_t>(n) * sizeof(float),
                              out, static_cast<size_t>(c) * sizeof(float),
                              static_cast<size_t>(c) * sizeof(float), static_cast<size_t>(rows),
                              cudaMemcpyDeviceToDevice, device_.stream()),
            "placing a quantised product's columns");
  }
  return true;
}

}  // namespace luminal::cudagen

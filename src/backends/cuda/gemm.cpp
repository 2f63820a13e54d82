// cuBLASLt products for the MatMul kernel (see gemm.hpp).
//
// Row-major c[M, N] = a[M, K] b[K, N] is, read column-major, c^T[N, M] = b^T[N, K] a^T[K, M],
// so b is cuBLASLt's first operand and a its second; each is passed as whichever of
// itself or its transpose has unit stride down the columns.
#include "backends/cuda/gemm.hpp"

#include <cstdint>
#include <vector>

#include "backends/cuda/device_trials.hpp"
#include "luminal/error.hpp"

namespace luminal::cudagen {
namespace {

void check_lt(cublasStatus_t s, const char* what) {
  LUM_CHECK(s == CUBLAS_STATUS_SUCCESS)
      << "cuBLASLt " << what << " failed: " << cublasLtGetStatusString(s);
}

cudaDataType_t data_type(DType t) {
  switch (t) {
    case DType::F32:
      return CUDA_R_32F;
    case DType::F16:
      return CUDA_R_16F;
    case DType::BF16:
      return CUDA_R_16BF;
    default:
      LUM_FAIL() << "internal: no cuBLASLt type for " << dtype_name(t);
  }
}

// One operand as a column-major matrix of `rows` x `cols` (before the transpose `op`).
struct Operand {
  cublasOperation_t op = CUBLAS_OP_N;
  uint64_t rows = 0, cols = 0;
  int64_t ld = 0;
};

// A logical matrix whose element (i, j) lies at i * si + j * sj, as column-major
// operand of logical shape rows_l x cols_l (i down the rows). Sizes of 1 accept any stride.
bool as_operand(int64_t rows_l, int64_t cols_l, int64_t si, int64_t sj, Operand& out) {
  if (si == 1 || rows_l == 1) {  // columns are contiguous: as is
    out = {CUBLAS_OP_N, static_cast<uint64_t>(rows_l), static_cast<uint64_t>(cols_l),
           cols_l == 1 ? rows_l : std::max<int64_t>(sj, rows_l)};
    return sj >= rows_l || cols_l == 1;
  }
  if (sj == 1 || cols_l == 1) {  // rows are contiguous: the transpose is column-major
    out = {CUBLAS_OP_T, static_cast<uint64_t>(cols_l), static_cast<uint64_t>(rows_l),
           rows_l == 1 ? cols_l : std::max<int64_t>(si, cols_l)};
    return si >= cols_l || rows_l == 1;
  }
  return false;
}

// The largest power of two up to 256 dividing every address the calls will pass: the
// base plus the offset, stepped by each batch stride (elements of `esize` bytes).
uint32_t alignment(const void* base, int64_t offset, const std::vector<int64_t>& strides,
                   size_t esize) {
  auto bits = reinterpret_cast<uintptr_t>(base) + static_cast<uintptr_t>(offset) * esize;
  for (int64_t s : strides) bits |= static_cast<uintptr_t>(s) * esize;
  uint32_t bytes = 256;
  while (bytes > 1 && bits % bytes != 0) bytes /= 2;
  return bytes;
}

// Algorithms the heuristic is asked for (the first is its pick), and the multiply-adds
// below which a product is not searched (launch time, not the algorithm, sets its pace).
constexpr int kAlgorithms = 8;
constexpr double kSearchedMultiplyAdds = 1 << 27;

// An algorithm as the cache remembers it: its place in the heuristic's list and its
// configuration.
std::string algorithm_label(size_t i, const cublasLtMatmulAlgo_t& algo) {
  auto attr = [&](cublasLtMatmulAlgoConfigAttributes_t a) {
    uint32_t v = 0;
    size_t written = 0;
    cublasLtMatmulAlgoConfigGetAttribute(&algo, a, &v, sizeof v, &written);
    return std::to_string(v);
  };
  return "#" + std::to_string(i) + " (algo " + attr(CUBLASLT_ALGO_CONFIG_ID) + ", tile " +
         attr(CUBLASLT_ALGO_CONFIG_TILE_ID) + ", stages " + attr(CUBLASLT_ALGO_CONFIG_STAGES_ID) +
         ", split-k " + attr(CUBLASLT_ALGO_CONFIG_SPLITK_NUM) + ")";
}

}  // namespace

struct Gemm::Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t first = nullptr, second = nullptr, out = nullptr, addend = nullptr;
  cublasLtMatmulAlgo_t algo{};
  ~Plan() {
    if (desc) cublasLtMatmulDescDestroy(desc);
    for (auto* l : {first, second, out, addend})
      if (l) cublasLtMatrixLayoutDestroy(l);
  }
  // The layout cuBLASLt reads C through: the addend's, else the output's (beta = 0).
  cublasLtMatrixLayout_t c() const { return addend ? addend : out; }
};

Gemm::Gemm(const Device& device, runtime::Searcher& searcher)
    : device_(device), workspace_(32u << 20), searcher_(searcher) {
  check_lt(cublasLtCreate(&handle_), "create");
}

Gemm::~Gemm() {
  for (auto& [key, plan] : plans_) delete plan;
  if (handle_) cublasLtDestroy(handle_);
}

bool Gemm::reads_addend(const ConcreteView& c) {
  const size_t r = c.dims.size();
  if (r < 2 || c.has_mask()) return false;
  const int64_t m = c.dims[r - 2], n = c.dims[r - 1];
  return (n == 1 || c.strides[r - 1] == 1) && (m == 1 || c.strides[r - 2] >= n);
}

bool Gemm::run(const ConcreteView& a, const void* a_data, const ConcreteView& b, const void* b_data,
               DType dtype, void* c_data, DType c_type, const GemmAddends& add) {
  const size_t rank = a.dims.size();
  if (rank < 3 || b.dims.size() != rank || a.has_mask() || b.has_mask()) return false;
  const ConcreteView* r = add.c;
  if (r && (r->dims.size() != rank - 1 || !reads_addend(*r))) return false;
  const int64_t m = a.dims[rank - 3], k = a.dims[rank - 2], n = a.dims[rank - 1];
  const size_t esize = dtype_size(dtype), c_size = dtype_size(c_type);
  // Batch dims, merged where all operands step through them as one run.
  std::vector<int64_t> count, sa, sb, sr, sc;
  int64_t c_stride = m * n;
  for (size_t d = rank - 3; d-- > 0;) {
    const int64_t size = a.dims[d];
    if (size == 1) continue;
    const int64_t r_stride = r ? r->strides[d] : 0;
    if (!count.empty() && sa.front() * count.front() == a.strides[d] &&
        sb.front() * count.front() == b.strides[d] && sr.front() * count.front() == r_stride) {
      count.front() *= size;
    } else {
      count.insert(count.begin(), size);
      sa.insert(sa.begin(), a.strides[d]);
      sb.insert(sb.begin(), b.strides[d]);
      sr.insert(sr.begin(), r_stride);
      sc.insert(sc.begin(), c_stride);
    }
    c_stride *= size;
  }
  if (m == 0 || n == 0 || c_stride == 0) return true;
  if (k == 0 && (r || add.bias)) return false;  // (no product to add to: the caller's)
  if (k == 0) {
    check(device_.memset(c_data, 0, static_cast<size_t>(c_stride) * c_size), "cudaMemsetAsync");
    return true;
  }
  Operand first, second;  // b^T as N x K, a^T as K x M
  if (!as_operand(n, k, b.strides[rank - 1], b.strides[rank - 2], first) ||
      !as_operand(k, m, a.strides[rank - 2], a.strides[rank - 3], second))
    return false;
  const int64_t inner = count.empty() ? 1 : count.back();
  const int64_t inner_sa = count.empty() ? 0 : sa.back(), inner_sb = count.empty() ? 0 : sb.back();
  const int64_t inner_sr = count.empty() ? 0 : sr.back(), inner_sc = count.empty() ? 0 : sc.back();
  // The addend as cuBLASLt's C: N x M column-major, its rows' stride the leading dim.
  const int64_t ldr = r ? (m == 1 ? n : r->strides[rank - 3]) : 0;
  const uint32_t align_a = alignment(a_data, a.offset, sa, esize);
  const uint32_t align_b = alignment(b_data, b.offset, sb, esize);
  const uint32_t align_c = alignment(c_data, 0, sc, c_size);
  const uint32_t align_r = r ? alignment(add.c_data, r->offset, sr, c_size) : 0;
  const uint32_t align_bias = add.bias ? alignment(add.bias, 0, {}, c_size) : 0;
  const bool in_place = r && add.c_data == c_data;  // (the search would add it again)
  const std::string key =
      std::to_string(static_cast<int>(dtype)) + "," + std::to_string(static_cast<int>(c_type)) +
      ":" + std::to_string(first.op) + "," + std::to_string(first.rows) + "," +
      std::to_string(first.cols) + "," + std::to_string(first.ld) + ":" +
      std::to_string(second.op) + "," + std::to_string(second.rows) + "," +
      std::to_string(second.cols) + "," + std::to_string(second.ld) + ":" + std::to_string(inner) +
      "," + std::to_string(inner_sa) + "," + std::to_string(inner_sb) + ":" +
      std::to_string(align_a) + "," + std::to_string(align_b) + "," + std::to_string(align_c) +
      (r ? ":c" + std::to_string(ldr) + "," + std::to_string(inner_sr) + "," +
               std::to_string(align_r) + (in_place ? ",in place" : "")
         : "") +
      (add.bias ? ":bias" + std::to_string(align_bias) : "");
  Plan*& plan = plans_[key];
  if (!plan) {
    auto p = std::make_unique<Plan>();
    const cudaDataType_t t = data_type(dtype);
    const cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
    check_lt(cublasLtMatmulDescCreate(&p->desc, compute, CUDA_R_32F), "matmul descriptor");
    check_lt(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &first.op,
                                            sizeof first.op),
             "transa");
    check_lt(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &second.op,
                                            sizeof second.op),
             "transb");
    if (add.bias) {
      // cuBLASLt's rows are our N: its bias is one value a column of ours, shared by
      // every row and (batch stride 0) every batch.
      const uint32_t epilogue = CUBLASLT_EPILOGUE_BIAS;
      check_lt(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue,
                                              sizeof epilogue),
               "epilogue");
      check_lt(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &add.bias,
                                              sizeof add.bias),
               "bias");
    }
    auto layout = [&](cublasLtMatrixLayout_t& l, cudaDataType_t type, uint64_t rows, uint64_t cols,
                      int64_t ld, int64_t batch_stride) {
      check_lt(cublasLtMatrixLayoutCreate(&l, type, rows, cols, ld), "layout");
      const int32_t batch = static_cast<int32_t>(inner);
      check_lt(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch,
                                                sizeof batch),
               "batch count");
      check_lt(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                                &batch_stride, sizeof batch_stride),
               "batch stride");
    };
    layout(p->first, t, first.rows, first.cols, first.ld, inner_sb);
    layout(p->second, t, second.rows, second.cols, second.ld, inner_sa);
    layout(p->out, data_type(c_type), static_cast<uint64_t>(n), static_cast<uint64_t>(m), n,
           inner_sc);
    if (r && !in_place)
      layout(p->addend, data_type(c_type), static_cast<uint64_t>(n), static_cast<uint64_t>(m), ldr,
             inner_sr);
    cublasLtMatmulPreference_t pref = nullptr;
    check_lt(cublasLtMatmulPreferenceCreate(&pref), "preference");
    const uint64_t ws = workspace_.bytes();
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                         sizeof ws);
    const uint32_t aa = align_b, ab = align_a, ad = align_c;  // cuBLASLt's A is our b
    const uint32_t ac = r && !in_place ? align_r : align_c;
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &aa,
                                         sizeof aa);
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &ab,
                                         sizeof ab);
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &ac,
                                         sizeof ac);
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &ad,
                                         sizeof ad);
    std::vector<cublasLtMatmulHeuristicResult_t> algos(kAlgorithms);
    int found = 0;
    const cublasStatus_t s =
        cublasLtMatmulAlgoGetHeuristic(handle_, p->desc, p->first, p->second, p->c(), p->out, pref,
                                       kAlgorithms, algos.data(), &found);
    cublasLtMatmulPreferenceDestroy(pref);
    if (s != CUBLAS_STATUS_SUCCESS || found == 0) {
      plans_.erase(key);
      return false;
    }
    algos.resize(static_cast<size_t>(found));
    p->algo = algos[0].algo;
    // Searched on the call's first matrices (not where the output is also the addend:
    // each timed run would add it again).
    if (found > 1 && !in_place && static_cast<double>(m) * n * k * inner >= kSearchedMultiplyAdds) {
      const std::string signature = "gemm " + std::string(dtype_name(dtype)) + "->" +
                                    std::string(dtype_name(c_type)) + " m=" + std::to_string(m) +
                                    " n=" + std::to_string(n) + " k=" + std::to_string(k) +
                                    " batch=" + std::to_string(inner) + " [" + key + "]";
      search(*p, algos, signature,
             static_cast<const char*>(a_data) + a.offset * static_cast<int64_t>(esize),
             static_cast<const char*>(b_data) + b.offset * static_cast<int64_t>(esize),
             r ? static_cast<const char*>(add.c_data) + r->offset * static_cast<int64_t>(c_size)
               : nullptr,
             c_data, static_cast<size_t>(m * n * inner) * c_size, c_type);
    }
    plan = p.release();
  }
  // Outer batch dims that did not merge into the strided batch: one call each.
  const size_t outer_dims = count.empty() ? 0 : count.size() - 1;
  int64_t outer = 1;
  for (size_t i = 0; i < outer_dims; ++i) outer *= count[i];
  for (int64_t o = 0; o < outer; ++o) {
    int64_t oa = a.offset, ob = b.offset, orr = r ? r->offset : 0, oc = 0, rest = o;
    for (size_t i = outer_dims; i-- > 0;) {
      const int64_t idx = rest % count[i];
      rest /= count[i];
      oa += idx * sa[i], ob += idx * sb[i], orr += idx * sr[i], oc += idx * sc[i];
    }
    const auto* pa = static_cast<const char*>(a_data) + oa * static_cast<int64_t>(esize);
    const auto* pb = static_cast<const char*>(b_data) + ob * static_cast<int64_t>(esize);
    auto* pc = static_cast<char*>(c_data) + oc * static_cast<int64_t>(c_size);
    const void* pr =
        r ? static_cast<const char*>(add.c_data) + orr * static_cast<int64_t>(c_size) : pc;
    void* const scratch = workspace_.data();
    const size_t scratch_bytes = workspace_.bytes();
    // What the call's kernels follow from: the plan, its algorithm, the addresses, beta.
    std::string call = key + (r ? ":beta 1" : ":beta 0");
    call.append(reinterpret_cast<const char*>(&plan->algo), sizeof plan->algo);
    call = with_addresses(std::move(call), {pa, pb, pr, pc, add.bias, scratch});
    device_.library_call(std::move(call), [this, plan, pa, pb, pr, pc, bias = add.bias, scratch,
                                           scratch_bytes, beta = r ? 1.0f : 0.0f](cudaStream_t s) {
      const float one = 1;
      if (bias)  // (the plan is shared by every product of its shape and alignments)
        check_lt(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                &bias, sizeof bias),
                 "bias");
      check_lt(cublasLtMatmul(handle_, plan->desc, &one, pb, plan->first, pa, plan->second, &beta,
                              pr, plan->c(), pc, plan->out, &plan->algo, scratch, scratch_bytes, s),
               "matmul");
    });
  }
  return true;
}

void Gemm::search(Plan& plan, const std::vector<cublasLtMatmulHeuristicResult_t>& algos,
                  const std::string& signature, const void* pa, const void* pb, const void* pr,
                  void* pc, size_t c_bytes, DType c_type) {
  const float one = 1, zero = 0;
  runtime::SearchProblem p;
  p.signature = signature;
  for (size_t i = 0; i < algos.size(); ++i)
    p.candidates.push_back({algorithm_label(i, algos[i].algo), [&, i] {
                              check_lt(cublasLtMatmul(handle_, plan.desc, &one, pb, plan.first, pa,
                                                      plan.second, pr ? &one : &zero, pr ? pr : pc,
                                                      plan.c(), pc, plan.out, &algos[i].algo,
                                                      workspace_.data(), workspace_.bytes(),
                                                      device_.stream()),
                                       "matmul");
                            }});
  // Another order of summation moves an f32 result by a few ulps of its largest terms;
  // a half-precision one by its rounding.
  DeviceTrials trials(device_);
  trials.judge(p, pc, c_bytes / dtype_size(c_type), c_type, c_type == DType::F32 ? 1e-4 : 2e-2);
  plan.algo = algos[searcher_.choose(p).winner].algo;
}

}  // namespace luminal::cudagen

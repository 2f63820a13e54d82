// The CUDA backend on a GPU (ctest label gpu; every test skips where none exists):
// random graphs of primitives against the reference interpreter, products through
// cuBLASLt, dims changing without a recompile, kernel-recorded errors, and the clear
// error where no GPU can be used.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <numeric>
#include <random>
#include <tuple>

#include <nlohmann/json.hpp>

#include "backends/cuda/attention_wgmma.hpp"
#include "backends/cuda/device_trials.hpp"
#include "luminal/luminal.hpp"
#include "luminal/nn/attention.hpp"
#include "testing/attention_cases.hpp"
#include "testing/attention_gradient_cases.hpp"
#include "testing/expect_error.hpp"
#include "testing/expert_cases.hpp"
#include "testing/extraction_search.hpp"
#include "testing/map_groups.hpp"
#include "testing/matmul_layouts.hpp"
#include "testing/quant_blocks.hpp"
#include "testing/random_graph.hpp"
#include "testing/reductions_across_rows.hpp"
#include "testing/row_ops.hpp"
#include "testing/run_outputs.hpp"
#include "testing/scoped_env.hpp"
#include "testing/top_k_cases.hpp"

namespace luminal {
namespace {

#define SKIP_WITHOUT_GPU()                                             \
  do {                                                                 \
    std::string why;                                                   \
    if (!cuda_available(&why)) GTEST_SKIP() << "no GPU here: " << why; \
  } while (0)

TEST(Cuda, WithoutAGpuCompileNamesWhatIsMissing) {
  std::string why;
  if (cuda_available(&why)) GTEST_SKIP() << "a GPU is present";
  Graph cx;
  Tensor x = cx.named_tensor("x", {4});
  (x + 1.0).retrieve();
  try {
    cx.compile(cuda());
    FAIL() << "compiled for CUDA without a GPU";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("CUDA"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << e.what();
  }
}

TEST(Cuda, RandomGraphsMatchTheReference) {
  SKIP_WITHOUT_GPU();
  testing::expect_random_graphs_match_reference(cuda());
}

TEST(Cuda, MatMulsMatchTheReference) {
  SKIP_WITHOUT_GPU();
  testing::expect_matmuls_match_reference(cuda());
}

// LUMINAL_CUDA_CHECK=1: the first run's kernels (products, a softmax, a copy, maps) each
// against the reference interpreter's value of their node; none differs here, and the
// run's outputs are the same.
TEST(Cuda, CheckModeComparesEveryKernelWithTheReference) {
  SKIP_WITHOUT_GPU();
  testing::ScopedEnv check("LUMINAL_CUDA_CHECK", "1");
  Graph cx;
  Tensor x = cx.named_tensor("x", {"n", 64}), w = cx.named_tensor("w", {64, 48});
  Tensor y = (x.matmul(w).softmax(1).transpose(0, 1).contiguous() * 3.0 + 1.0).retrieve();
  cx.set_dim("n", 40);
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0, 1);
  const auto draw = [&](size_t n) {
    std::vector<float> v(n);
    for (float& e : v) e = normal(rng);
    return v;
  };
  x.set(draw(40 * 64));
  w.set(draw(64 * 48));
  cx.compile(cuda());
  ::testing::internal::CaptureStderr();
  cx.execute();
  const std::string said = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(said.find("luminal cuda check: 0 of "), std::string::npos) << said;
  EXPECT_EQ(said.find("differs from the reference:"), std::string::npos) << said;
  const std::vector<float> got = y.to_f32();
  cx.compile(reference());
  cx.execute();
  const std::vector<float> want = y.to_f32();
  for (size_t i = 0; i < want.size(); ++i) ASSERT_NEAR(got[i], want[i], 1e-3) << i;
}

// A search compares a candidate's output with the reference's on the device (a kernel's
// search, and the program search's outputs left there), as the host's comparison
// (runtime::output_mismatch) would: the same verdict and words for
// each float type, over an output of several grid-stride rounds, with NaN matching only
// NaN, an infinity only the same one, and the first wrong element named.
TEST(Cuda, SearchComparesCandidatesOnTheDeviceAsTheHostDoes) {
  SKIP_WITHOUT_GPU();
  const cudagen::Device device(0);
  const size_t n = 300007;
  std::mt19937 rng(3);
  std::normal_distribution<double> normal(0, 100);
  std::vector<double> ref(n);
  for (double& x : ref) x = normal(rng);
  ref[17] = std::numeric_limits<double>::quiet_NaN();
  const double largest = 600;  // beyond any normal draw here: the scale
  ref[1234] = -largest;
  const double inf = std::numeric_limits<double>::infinity();
  ref[4321] = -inf;  // a masked score: matched by itself, not the scale
  std::vector<std::vector<double>> candidates(7, ref);
  for (size_t i = 0; i < n; ++i)  // within 2% of the largest magnitude everywhere
    if (i != 17) candidates[1][i] += (i % 2 ? 1 : -1) * 0.005 * largest;
  candidates[2][250001] += 0.05 * largest;  // two elements off: the first named
  candidates[2][77] -= 0.05 * largest;
  candidates[3][299999] = std::numeric_limits<double>::quiet_NaN();
  candidates[4][17] = 1;  // a number where the reference has NaN
  candidates[5][4321] = inf;
  candidates[6][5000] = inf;
  for (DType t : {DType::F32, DType::F16, DType::BF16}) {
    cudagen::DeviceBuffer out(n * dtype_size(t));
    const auto write = [&](const std::vector<double>& values) {
      const Buffer b = Buffer::from_doubles(values, t);
      cudagen::copy_to_device(out.data(), b.data(), b.bytes(), "writing a candidate");
      return b.to_f32();
    };
    runtime::SearchProblem p;
    cudagen::DeviceTrials trials(device);
    trials.judge(p, out.data(), n, t, 2e-2);
    const std::vector<float> reference = write(ref);
    p.keep_reference();
    // The same through DeviceData (the program search's outputs left on the GPU).
    const std::unique_ptr<DeviceComparison> kept =
        to_cuda(Buffer::from_doubles(ref, t)).kept_for_comparison(2e-2);
    ASSERT_TRUE(kept) << dtype_name(t);
    for (size_t c = 0; c < candidates.size(); ++c) {
      const std::vector<float> got = write(candidates[c]);
      const std::string expected = runtime::output_mismatch(got.data(), reference, 2e-2);
      EXPECT_EQ(p.mismatch(), expected) << dtype_name(t) << ", candidate " << c;
      EXPECT_EQ(expected.empty(), c < 2) << dtype_name(t) << ", candidate " << c;
      EXPECT_EQ(kept->mismatch(to_cuda(Buffer::from_doubles(candidates[c], t))), expected)
          << dtype_name(t) << ", candidate " << c;
    }
  }
  // Integers are compared on the host (exactly).
  EXPECT_FALSE(to_cuda(Buffer::from_doubles({1, 2}, DType::I32)).kept_for_comparison(0));
}

TEST(Cuda, OneRowProductsMatchTheReference) {
  SKIP_WITHOUT_GPU();
  testing::expect_one_row_products_match_reference(cuda());
}

TEST(Cuda, HalfWeightProductsMatchTheReference) {
  SKIP_WITHOUT_GPU();
  testing::expect_half_weight_products_match_reference(cuda());
}

TEST(Cuda, F32ByF16ProductsMatchTheReference) {
  SKIP_WITHOUT_GPU();
  testing::expect_f32_by_f16_products_match_reference(cuda());
}

// With the search off, each op runs the cost model's pick (on Hopper's prompts the
// warpgroup kernel), not whichever kernel the search found correct and faster.
TEST(Cuda, AttentionMatchesTheReference) {
  SKIP_WITHOUT_GPU();
  const testing::ScopedEnv mode("LUMINAL_SEARCH", "off");
  testing::expect_attention_matches_reference(cuda(), "cuda");
}

// Each of the prompts' tensor-core kernels that the search may pick, picked: the
// warpgroup kernels of one consumer a block (two and three blocks an SM, each also
// persistent) and of two, and the sm_80 one (cases without such a kernel search as usual).
TEST(Cuda, EachPromptAttentionKernelMatchesTheReference) {
  SKIP_WITHOUT_GPU();
  for (const char* kernel :
       {"wgmma, 64 rows a block, 128 keys a tile, 2 blocks an SM",
        "wgmma, 64 rows a block, 64 keys a tile, 3 blocks an SM", "128 rows a block",
        "2 blocks an SM, persistent", "3 blocks an SM, persistent", "mma.sync"}) {
    SCOPED_TRACE(kernel);
    const testing::ScopedEnv pick("LUMINAL_SEARCH_PICK", kernel);
    testing::expect_attention_matches_reference(cuda(), "cuda");
  }
}

// Attention's backward pass in half precision through its three tensor-core kernels (none
// run on the host), against the reference interpreter over the f32 graph of the same
// inputs (the reference would round a half graph op by op).
TEST(Cuda, AttentionGradientsMatchTheReference) {
  SKIP_WITHOUT_GPU();
  for (const testing::AttentionGradientCase& c : testing::attention_gradient_cases(true)) {
    std::mt19937 rng(7), same(7);
    Graph cx, exact;
    const std::vector<Tensor> grads = testing::attention_gradient_graph(cx, c, rng);
    testing::AttentionGradientCase f32 = c;
    f32.dtype = DType::F32;
    const std::vector<Tensor> exact_grads = testing::attention_gradient_graph(exact, f32, same);
    const auto got = testing::run_outputs(cx, cuda(), grads);
    EXPECT_EQ(cx.last_run_stats().host_fallbacks, 0u) << c.label();
    const auto want = testing::run_outputs(exact, reference(), exact_grads);
    for (size_t o = 0; o < 3; ++o) {
      ASSERT_EQ(got[o].size(), want[o].size());
      double err = 0, norm = 0, top = 0, worst = 0;
      for (size_t i = 0; i < got[o].size(); ++i) {
        const double diff = double(got[o][i]) - want[o][i];
        err += diff * diff, norm += double(want[o][i]) * want[o][i];
        top = std::max(top, std::fabs(double(want[o][i])));
        worst = std::max(worst, std::fabs(diff));
      }
      EXPECT_LT(std::sqrt(err / norm), 3e-2) << c.label() << ", gradient "
                                             << "qkv"[o];
      EXPECT_LT(worst, 0.1 * top) << c.label() << ", gradient "
                                  << "qkv"[o];
    }
  }
}

TEST(Cuda, RowOpsMatchTheReference) {
  SKIP_WITHOUT_GPU();
  testing::expect_row_ops_match_reference(cuda());
}

TEST(Cuda, FewLongRowsMatchTheReference) {
  SKIP_WITHOUT_GPU();
  testing::expect_few_long_rows_match_reference(cuda());
}

// Rounding to bf16 and f16 in a kernel, both where a value is stored and where it stays in
// a register for the next op, gives the reference's bits: every sign and exponent of f32
// with the mantissas at and around each format's halfway points, and random ones.
TEST(Cuda, HalfRoundingGivesTheReferencesBits) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(7);
  std::vector<float> values;
  for (uint32_t sign_exponent = 0; sign_exponent < 512; ++sign_exponent) {
    std::vector<uint32_t> mantissas = {0,       1,      0x7fff,   0x8000,   0x8001, 0x17fff,
                                       0x18000, 0xffff, 0x7fffff, 0x400000, 0xfff,  0x1000,
                                       0x1001,  0x2fff, 0x3000,   0x3001};
    for (int i = 0; i < 48; ++i) mantissas.push_back(rng() & 0x7fffffu);
    for (uint32_t m : mantissas) {
      const uint32_t bits = sign_exponent << 23 | m;
      float f;
      std::memcpy(&f, &bits, sizeof f);
      values.push_back(f);
    }
  }
  const auto run = [&](const Backend& backend) {
    Graph cx;
    Tensor x = cx.named_tensor("x", {static_cast<int64_t>(values.size())});
    x.set(values);
    std::vector<Tensor> outs;
    for (DType t : {DType::BF16, DType::F16}) {
      outs.push_back(x.cast(t).retrieve());
      outs.push_back(x.cast(t).cast(DType::F32).retrieve());
    }
    return testing::run_outputs(cx, backend, outs);
  };
  const auto want = run(reference()), got = run(cuda());
  for (size_t o = 0; o < want.size(); ++o)
    for (size_t i = 0; i < values.size(); ++i) {
      const float w = want[o][i], g = got[o][i];
      if (std::isnan(w) ? std::isnan(g) : std::memcmp(&w, &g, sizeof w) == 0) continue;
      uint32_t bits;
      std::memcpy(&bits, &values[i], sizeof bits);
      ADD_FAILURE() << "output " << o << ", input bits 0x" << std::hex << bits << ": got " << g
                    << ", want " << w;
      break;
    }
}

TEST(Cuda, ReductionsAcrossRowsMatchTheReference) {
  SKIP_WITHOUT_GPU();
  testing::expect_reductions_across_rows_match_reference(cuda());
}

// Values that are multiples of 1/64 in [-1, 1]: exact in bf16, their products exact in
// f32, and so are sums of them while below 4096 in magnitude (random sums of a few
// thousand stay far below), whatever the order: a product of them has an exact expected
// value under any algorithm.
std::vector<float> exact_values(std::mt19937& rng, size_t n) {
  std::vector<float> v(n);
  for (float& x : v) x = static_cast<float>(std::uniform_int_distribution<int>(-64, 64)(rng)) / 64;
  return v;
}

// Runs the product a[m, k] b[k, n] in type t with search on (a fresh cache, LUMINAL_LOG
// on) twice, expecting the search's log line `searched` the first time and "(cached)"
// the second, no candidate found wrong, and the exact result (rounded once for bf16).
// With `b_stored_nk`, b is the transpose of a stored [n, k] matrix (a weight, read
// along k).
void expect_searched_product(int64_t m, int64_t k, int64_t n, DType t, const std::string& searched,
                             bool b_stored_nk = false) {
  const testing::ScopedCacheDir cache("product-search");
  const testing::ScopedEnv log("LUMINAL_LOG", "info");
  const testing::ScopedEnv mode("LUMINAL_SEARCH", "fast");
  std::mt19937 rng(11);
  const std::vector<float> av = exact_values(rng, static_cast<size_t>(m * k));
  const std::vector<float> bv = exact_values(rng, static_cast<size_t>(k * n));
  std::vector<double> want(static_cast<size_t>(m * n), 0.0);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t p = 0; p < k; ++p)
      for (int64_t j = 0; j < n; ++j)
        want[static_cast<size_t>(i * n + j)] +=
            double{av[static_cast<size_t>(i * k + p)]} *
            bv[static_cast<size_t>(b_stored_nk ? j * k + p : p * n + j)];
  for (const std::string pass : {"searched", "cached"}) {
    Graph cx;
    Tensor a = cx.named_tensor("a", {m, k});
    Tensor b = b_stored_nk ? cx.named_tensor("b", {n, k}) : cx.named_tensor("b", {k, n});
    a.set(av);
    b.set(bv);
    const Tensor bt = b_stored_nk ? b.cast(t).permute({1, 0}) : b.cast(t);
    Tensor y = a.cast(t).matmul(bt).cast(DType::F32).retrieve();
    ::testing::internal::CaptureStderr();
    const std::vector<float> got = testing::run_outputs(cx, cuda(), {y})[0];
    const std::string err = ::testing::internal::GetCapturedStderr();
    const std::string line = "luminal: search " + searched;
    EXPECT_NE(err.find(line), std::string::npos) << pass << ", no '" << line << "':\n" << err;
    const std::string verdict = pass == "searched" ? "the cost model's pick" : "(cached)";
    EXPECT_NE(err.find(verdict), std::string::npos) << pass << ":\n" << err;
    EXPECT_EQ(err.find("is wrong"), std::string::npos) << err;
    const double tol = t == DType::F32 ? 0.0 : std::ldexp(1.0, -8);
    for (size_t i = 0; i < got.size(); ++i)
      ASSERT_LE(std::fabs(got[i] - want[i]), tol * std::fabs(want[i]))
          << dtype_name(t) << " " << pass << " element " << i;
  }
}

// A product large enough to be searched: cuBLASLt's algorithms are timed on it, the
// output is the winner's, and a second compile takes the winner from the cache.
TEST(Cuda, ProductsSearchTheLibrarysAlgorithmsAndRememberTheWinner) {
  SKIP_WITHOUT_GPU();
  expect_searched_product(512, 512, 512, DType::F32, "gemm f32->f32 m=512");
  expect_searched_product(512, 512, 512, DType::BF16, "gemm bf16->bf16 m=512");
}

// Convolutions in f16 and bf16 read their windows in place (WindowMatMul): the rows' and
// the sum's ends inside tiles, strides, dilation, groups, one and two spatial dims. Each
// case with the search on (every way timed, each checked against the cost model's pick,
// cuDNN's convolution where cuDNN is found, else a kernel of luminal's: none wrong; the
// search's line shows the product ran as one) and off (that pick alone), against the
// reference interpreter.
TEST(Cuda, ConvolutionsReadTheirWindowsInPlace) {
  SKIP_WITHOUT_GPU();
  struct Case {
    std::vector<int64_t> x, w;
    ConvOptions o;
    DType t;
    // Without cuDNN, the cost model's pick: runs of eight (channels last) or any strides; with a
    // ReLU after, which reads the output as NCHW, for the output stored so.
    const char* kernel;
    const char* transposed;
  };
  const std::vector<Case> cases = {
      {{2, 16, 9, 11}, {24, 16, 3, 3}, {.padding = 1}, DType::BF16, "runs 128x64", "runs 64x128"},
      {{2, 16, 9, 11}, {24, 16, 3, 3}, {.padding = 1}, DType::F16, "runs 128x64", "runs 64x128"},
      {{3, 3, 20, 17},
       {70, 3, 7, 7},
       {.stride = 2, .padding = 3},
       DType::BF16,
       "tiles 128x64",
       "tiles 128x64, transposed after"},
      {{2, 32, 8, 8},
       {64, 32, 1, 1},
       {.stride = 2},
       DType::BF16,
       "tiles 128x64",
       "tiles 128x64, transposed after"},
      {{2, 8, 12, 12},
       {16, 8, 3, 3},
       {.padding = 2, .dilation = 2},
       DType::F16,
       "runs 128x64",
       "runs 64x128"},
      {{2, 16, 10, 10},
       {32, 8, 3, 3},
       {.padding = 1, .groups = 2},
       DType::BF16,
       "runs 128x64",
       "runs 64x128"},
      {{2, 12, 10, 10},
       {24, 4, 3, 3},
       {.padding = 1, .groups = 3},
       DType::BF16,
       "tiles 128x64",
       "tiles 128x64, transposed after"},
      {{2, 8, 33}, {12, 8, 5}, {.padding = 2}, DType::BF16, "runs 128x64", "runs 64x128"},
      {{1, 64, 40, 40}, {192, 64, 3, 3}, {.padding = 1}, DType::BF16, "runs 128x64", "runs 128x64"},
  };
  std::mt19937 rng(3);
  for (const Case& c : cases) {
    const std::string what = to_string(std::vector<Expr>(c.x.begin(), c.x.end())) + " * " +
                             to_string(std::vector<Expr>(c.w.begin(), c.w.end())) + " " +
                             std::string(dtype_name(c.t));
    const auto numel = [](const std::vector<int64_t>& s) {
      return static_cast<size_t>(
          std::accumulate(s.begin(), s.end(), int64_t{1}, std::multiplies<>()));
    };
    // Multiples of 1/8 up to 1: products exact in the half types, sums in f32, so the
    // reference (which rounds each product to the half type) and the kernels, rounding
    // once, agree exactly.
    const auto eighths = [&](size_t n) {
      std::vector<double> v(n);
      for (double& e : v) e = std::uniform_int_distribution<int>(-8, 8)(rng) / 8.0;
      return v;
    };
    const std::vector<double> xv = eighths(numel(c.x)), wv = eighths(numel(c.w));
    for (const auto& [mode, relu] : {std::pair{"fast", false}, std::pair{"off", false},
                                     std::pair{"fast", true}, std::pair{"off", true}}) {
      const testing::ScopedCacheDir cache("window-products");
      const testing::ScopedEnv log("LUMINAL_LOG", "info");
      const testing::ScopedEnv search("LUMINAL_SEARCH", mode);
      const testing::ScopedEnv dump("LUMINAL_DUMP", "search");
      const testing::ScopedEnv dump_dir("LUMINAL_DUMP_DIR", cache.path().c_str());
      Graph cx;
      Tensor x = cx.named_tensor("x", std::vector<Expr>(c.x.begin(), c.x.end()), c.t);
      Tensor w = cx.named_tensor("w", std::vector<Expr>(c.w.begin(), c.w.end()), c.t);
      x.set_buffer(Buffer::from_doubles(xv, c.t));
      w.set_buffer(Buffer::from_doubles(wv, c.t));
      Tensor y = c.x.size() == 3 ? conv1d(x, w, {}, c.o) : conv2d(x, w, {}, c.o);
      if (relu) y = y.relu();
      y.retrieve();
      const std::vector<float> want = testing::run_outputs(cx, reference(), {y})[0];
      ::testing::internal::CaptureStderr();
      const std::vector<float> got = testing::run_outputs(cx, cuda(), {y})[0];
      const std::string err = ::testing::internal::GetCapturedStderr();
      EXPECT_EQ(cx.last_run_stats().host_fallbacks, 0u) << what;
      if (std::string(mode) == "fast") {
        EXPECT_NE(err.find("luminal: search window"), std::string::npos) << what << ":\n" << err;
        // (A grouped convolution's output is copied to merge its groups, which reads it
        // as NCHW too.)
        const bool nchw = relu || c.o.groups > 1;
        EXPECT_EQ(err.find(" transposed ") != std::string::npos, nchw) << what << ":\n" << err;
        // The cost model's pick, the first way judged: where cuDNN was found (the run
        // opens it), its convolution (a grouped convolution's weight varies by group: not
        // one convolution); elsewhere luminal's kernel for the layout.
        std::ifstream in(cache.path() / "search.json");
        ASSERT_TRUE(in) << what;
        std::string pick;
        for (const auto& entry : nlohmann::json::parse(in))
          if (entry["signature"].get<std::string>().rfind("window", 0) == 0)
            pick = entry["candidates"][0]["label"].get<std::string>();
        if (c.o.groups == 1 && dlopen("libcudnn.so.9", RTLD_NOW | RTLD_NOLOAD))
          EXPECT_EQ(pick.rfind("cudnn", 0), 0u) << what << ": " << pick;
        else
          EXPECT_EQ(pick, nchw ? c.transposed : c.kernel) << what;
      }
      EXPECT_EQ(err.find("is wrong"), std::string::npos) << what << ":\n" << err;
      ASSERT_EQ(got.size(), want.size()) << what;
      ASSERT_EQ(got, want) << what << " search " << mode << (relu ? " relu" : "");
    }
  }
}

// The error bound of a product whose activation row is quantised to int8 per 32
// elements (x ~ d q, d = max |x| / 127 over the 32): half a step d / 2 per element, times
// |w|, over the row; plus f32 rounding of sum |w x|.
double int8_activation_bound(const std::vector<float>& w, const std::vector<float>& x, int64_t row,
                             int64_t col, int64_t k) {
  double bound = 0;
  for (int64_t c0 = 0; c0 < k; c0 += 32) {
    double amax = 0;
    for (int64_t c = c0; c < c0 + 32; ++c)
      amax = std::max(amax, double{std::fabs(x[static_cast<size_t>(row * k + c)])});
    for (int64_t c = c0; c < c0 + 32; ++c) {
      const double wc = std::fabs(double{w[static_cast<size_t>(col * k + c)]});
      bound += wc * amax / 254 + 1e-5 * wc * std::fabs(x[static_cast<size_t>(row * k + c)]);
    }
  }
  return bound;
}

// x W^T with W in each of ggml's block formats, decoded on the device (no host fallback),
// against the reference interpreter (luminal::dequantize, then double). Rows of x: 1 (a
// decoding step's kernel), 2 (the several-row kernel), 22 (three passes of up to eight)
// and 140 (the prompt path), over a batch dim and rows. Each output within
// its path's rounding of sum |w x|: f32 activations, 1e-5; activations and weights
// rounded to f16 for the prompt path, 2^-10 (two roundings of 2^-11 a product); the
// one-row integer kernels (Q8_0, Q4_K, Q5_K, Q6_K): int8 activations'
// (int8_activation_bound).
TEST(Cuda, QuantisedProductsDecodeEveryFormatOnTheDevice) {
  SKIP_WITHOUT_GPU();
  const int64_t k = 512, n = 40;
  for (const GgmlType t : {GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1,
                           GgmlType::Q8_0, GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K}) {
    const auto type = static_cast<uint32_t>(t);
    for (const auto& [batch, m] :
         std::vector<std::pair<int64_t, int64_t>>{{1, 1}, {2, 1}, {2, 11}, {2, 70}}) {
      const int64_t rows = batch * m;
      const std::string what = ggml_type_name(type) + " rows " + std::to_string(rows);
      Graph cx;
      Tensor x = cx.named_tensor("x", {batch, m, k});
      Tensor w = cx.named_tensor("w", {n, k}), w2 = cx.named_tensor("w2", {n, k});
      Tensor y = x.matmul(w.transpose(0, 1)).retrieve();
      std::mt19937 rng(static_cast<uint32_t>(type * 1000 + rows));
      std::normal_distribution<float> normal(0, 1);
      std::vector<float> xv(static_cast<size_t>(rows * k));
      for (float& v : xv) v = normal(rng);
      x.set(xv);
      w.set_quantized(type, testing::random_blocks(type, n, k, 11));
      const std::vector<float> want = testing::run_outputs(cx, reference(), {y})[0];
      const std::vector<float> wd = w.to_f32();
      const std::vector<float> got = testing::run_outputs(cx, cuda(), {y})[0];
      EXPECT_EQ(cx.last_run_stats().host_fallbacks, 0u) << what;
      ASSERT_EQ(got.size(), want.size()) << what;
      const double rel = rows <= 64 ? 1e-5 : std::ldexp(1.0, -10);
      const bool int8 = (t == GgmlType::Q8_0 || t == GgmlType::Q4_K || t == GgmlType::Q5_K ||
                         t == GgmlType::Q6_K) &&
                        rows == 1;
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t j = 0; j < n; ++j) {
          double magnitude = 0;
          for (int64_t c = 0; c < k; ++c)
            magnitude += std::fabs(double{wd[static_cast<size_t>(j * k + c)]} *
                                   xv[static_cast<size_t>(r * k + c)]);
          const size_t at = static_cast<size_t>(r * n + j);
          const double bound =
              int8 ? int8_activation_bound(wd, xv, r, j, k) : rel * magnitude + 1e-6;
          ASSERT_NEAR(got[at], want[at], bound) << what << " row " << r << " col " << j;
        }
    }
  }
}

// A mixture's expert products on the device (ids read there, each (row, slot) streaming
// its expert's matrix): against brute force for every storage the kernels read, the
// unchosen experts NaN, and no host fallback.
TEST(Cuda, ExpertProductsReadOnlyTheChosenExperts) {
  SKIP_WITHOUT_GPU();
  for (const testing::ExpertCase& c : testing::expert_cases()) {
    EXPECT_EQ(testing::check_expert_products(c, cuda()), 0u)
        << "host fallbacks for type " << c.type;
    if (HasFailure()) return;
  }
}

// The one-row integer kernels (Q8_0, Q4_K, Q5_K, Q6_K) where their loops and blocks have
// edges: a row of 17 blocks of 256 (136 pieces for 128 threads; Q6_K's odd blocks and
// Q8_0's quants two-byte aligned), 42 weight rows (a group of four with two),
// activations whose 32-element groups span magnitudes from 0 (a zero scale) to 1e3.
// Against the reference interpreter within the int8 activations' bound; and closer to it
// than that bound by far on average (a wrong scale or nibble is not hidden by a loose
// bound). Every kernel shape is searched (a fresh cache), none may be wrong.
TEST(Cuda, QuantisedProductsOfOneRowRunInIntegers) {
  SKIP_WITHOUT_GPU();
  const testing::ScopedCacheDir cache("qdot-search");
  const testing::ScopedEnv log("LUMINAL_LOG", "info");
  const testing::ScopedEnv mode("LUMINAL_SEARCH", "fast");
  const int64_t k = 17 * 256, n = 42;
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0, 1);
  std::vector<float> xv(static_cast<size_t>(k));
  for (int64_t c = 0; c < k; ++c) {
    const int64_t group = c / 32;
    const float scale = group % 7 == 3 ? 0.0f : std::pow(10.0f, static_cast<float>(group % 5) - 2);
    xv[static_cast<size_t>(c)] = normal(rng) * scale;
  }
  for (const GgmlType t : {GgmlType::Q8_0, GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K}) {
    const auto type = static_cast<uint32_t>(t);
    const std::string what = ggml_type_name(type);
    Graph cx;
    Tensor x = cx.named_tensor("x", {1, 1, k});
    Tensor w = cx.named_tensor("w", {n, k});
    Tensor y = x.matmul(w.transpose(0, 1)).retrieve();
    x.set(xv);
    w.set_quantized(type, testing::random_blocks(type, n, k, 13));
    const std::vector<float> want = testing::run_outputs(cx, reference(), {y})[0];
    const std::vector<float> wd = w.to_f32();
    ::testing::internal::CaptureStderr();
    const std::vector<float> got = testing::run_outputs(cx, cuda(), {y})[0];
    const std::string err = ::testing::internal::GetCapturedStderr();
    const std::string line = "luminal: search qdot " + what + " n=42 k=4352";
    EXPECT_NE(err.find(line), std::string::npos) << "no '" << line << "':\n" << err;
    EXPECT_EQ(err.find("is wrong"), std::string::npos) << err;
    EXPECT_EQ(cx.last_run_stats().host_fallbacks, 0u) << what;
    ASSERT_EQ(got.size(), static_cast<size_t>(n)) << what;
    double error = 0, bounds = 0;
    for (int64_t j = 0; j < n; ++j) {
      const auto at = static_cast<size_t>(j);
      const double bound = int8_activation_bound(wd, xv, 0, j, k);
      ASSERT_NEAR(got[at], want[at], bound) << what << " col " << j;
      error += std::fabs(got[at] - want[at]);
      bounds += bound;
    }
    EXPECT_LT(error, 0.25 * bounds) << what;
  }
}

// Prompts whose keys and values vary along two dims (a batch of sequences and the key
// heads): on Hopper the warpgroup kernel reads them through tensor maps of two outer
// dims. bf16 throughout, and f32 queries over an f16 cache (split), with the caches
// position-major or head-major, against the reference interpreter.
TEST(Cuda, PromptAttentionOverABatchOfSequences) {
  SKIP_WITHOUT_GPU();
  const testing::ScopedEnv mode("LUMINAL_SEARCH", "off");  // the cost model's pick runs
  const int64_t batch = 2, kv = 2, group = 2, seq = 96, past = 40, d = 64, total = past + seq;
  std::mt19937 rng(9);
  for (const auto& [compute, cache, head_major] :
       std::vector<std::tuple<DType, DType, bool>>{{DType::BF16, DType::BF16, false},
                                                   {DType::F32, DType::F16, false},
                                                   {DType::BF16, DType::BF16, true}}) {
    auto values = [&](int64_t n, DType t) {
      return testing::uniform_buffer(rng, static_cast<size_t>(n), t, -2.0f, 2.0f);
    };
    Graph cx;
    Tensor q = cx.named_tensor("q", {batch, kv, group, seq, d}, compute);
    const std::vector<Expr> cache_shape = head_major ? std::vector<Expr>{batch, kv, total, d}
                                                     : std::vector<Expr>{batch, total, kv, d};
    Tensor k = cx.named_tensor("k", cache_shape, cache);
    Tensor v = cx.named_tensor("v", cache_shape, cache);
    q.set_buffer(values(batch * kv * group * seq * d, compute));
    k.set_buffer(values(batch * total * kv * d, cache));
    v.set_buffer(values(batch * total * kv * d, cache));
    auto heads = [&](const Tensor& t) {  // [batch, kv, total, d] in the compute type
      const Tensor c = t.cast(compute);
      return head_major ? c : c.permute({0, 2, 1, 3});
    };
    Tensor scores = q.matmul(heads(k).unsqueeze(2).transpose(-1, -2)) *
                    (1.0 / std::sqrt(static_cast<double>(d)));
    scores =
        where(nn::causal_mask(cx, seq, past), scores, -std::numeric_limits<double>::infinity());
    Tensor y = scores.softmax(-1).matmul(heads(v).unsqueeze(2)).retrieve();
    const compiler::Optimized opt = compiler::optimize(cx);
    ASSERT_TRUE(dynamic_cast<const compiler::AttentionOp*>(
        opt.graph->node(opt.outputs[0].second).custom.get()))
        << opt.graph->to_text();
    const std::vector<float> want = testing::run_outputs(cx, reference(), {y})[0];
    const std::vector<float> got = testing::run_outputs(cx, cuda(), {y})[0];
    EXPECT_EQ(cx.last_run_stats().host_fallbacks, 0u);
    const double tolerance = compute == DType::F32 ? 1e-4 : 2e-2;
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i)
      ASSERT_NEAR(got[i], want[i], tolerance * (1 + std::fabs(want[i])))
          << dtype_name(compute) << (head_major ? " head-major" : "") << " element " << i;
  }
}

// Persistent warpgroup kernels over more work items than they have blocks, so that each
// block takes several in turn (its query buffers and key and value stages reused): a
// transformer block's heads read from one projection of [batch, tokens, 3, heads, d]
// (rows along one dim, the last tile of 200 tokens part empty), and a batch of grouped
// heads (rows along two dims: the group and 128 tokens), each causal, bf16, against the
// reference interpreter.
TEST(Cuda, PersistentPromptAttentionTakesSeveralItemsABlock) {
  SKIP_WITHOUT_GPU();
  const int64_t d = 64;
  const auto listed =
      cudagen::wgmma_attention_kernels(DType::BF16, DType::BF16, DType::BF16, d, d, 256);
  ASSERT_TRUE(
      std::any_of(listed.begin(), listed.end(), [](const auto& w) { return w.persistent; }));
  std::mt19937 rng(21);
  auto values = [&](int64_t n) {
    return testing::uniform_buffer(rng, static_cast<size_t>(n), DType::BF16, -2.0f, 2.0f);
  };
  for (const bool grouped : {false, true}) {
    Graph cx;
    Tensor q, k, v;
    int64_t seq = 0;
    if (!grouped) {  // 16 x 8 heads of 200 tokens: 512 items
      const int64_t batch = 16, heads = 8;
      seq = 200;
      Tensor qkv = cx.named_tensor("qkv", {batch, seq, 3, heads, d}, DType::BF16);
      qkv.set_buffer(values(batch * seq * 3 * heads * d));
      auto part = [&](int64_t i) {
        return qkv.slice(2, i, i + 1).squeeze(2).permute({0, 2, 1, 3});
      };
      q = part(0), k = part(1), v = part(2);
    } else {  // 64 x 2 key heads, 2 query heads each, of 128 tokens: 512 items
      const int64_t batch = 64, kv = 2, group = 2;
      seq = 128;
      q = cx.named_tensor("q", {batch, kv, group, seq, d}, DType::BF16);
      k = cx.named_tensor("k", {batch, kv, seq, d}, DType::BF16);
      v = cx.named_tensor("v", {batch, kv, seq, d}, DType::BF16);
      q.set_buffer(values(batch * kv * group * seq * d));
      k.set_buffer(values(batch * kv * seq * d));
      v.set_buffer(values(batch * kv * seq * d));
      k = k.unsqueeze(2), v = v.unsqueeze(2);
    }
    Tensor scores = q.matmul(k.transpose(-1, -2)) * (1.0 / std::sqrt(static_cast<double>(d)));
    scores = where(nn::causal_mask(cx, seq, 0), scores, -std::numeric_limits<double>::infinity());
    Tensor y = scores.softmax(-1).matmul(v).retrieve();
    const std::vector<float> want = testing::run_outputs(cx, reference(), {y})[0];
    for (const char* kernel : {"2 blocks an SM, persistent", "3 blocks an SM, persistent"}) {
      const testing::ScopedEnv pick("LUMINAL_SEARCH_PICK", kernel);
      const std::vector<float> got = testing::run_outputs(cx, cuda(), {y})[0];
      ASSERT_EQ(got.size(), want.size());
      for (size_t i = 0; i < got.size(); ++i)
        ASSERT_NEAR(got[i], want[i], 2e-2 * (1 + std::fabs(want[i])))
            << kernel << (grouped ? ", grouped" : "") << ", element " << i;
    }
  }
}

// A transformer block's attention whose heads are put back side by side for the output
// projection ([batch, heads, tokens, d] rows copied to [batch, tokens, heads x d]): the
// kernels write the rows there themselves (AttentionOp::out_order, no copy), prompts
// (tensor cores) and one-token steps alike, f32 and bf16, against the reference.
TEST(Cuda, AttentionWritesItsRowsWhereTheProjectionReadsThem) {
  SKIP_WITHOUT_GPU();
  const int64_t b = 2, h = 4, d = 64;
  std::mt19937 rng(13);
  for (const auto& [t, dtype] : std::vector<std::pair<int64_t, DType>>{
           {96, DType::BF16}, {96, DType::F32}, {1, DType::BF16}}) {
    Graph cx;
    Tensor x = cx.named_tensor("x", {b, t, 3 * h * d}, dtype);
    Tensor w = cx.named_tensor("w", {h * d, 32}, dtype);
    auto values = [&](int64_t n) {
      return testing::uniform_buffer(rng, static_cast<size_t>(n), dtype, -1.0f, 1.0f);
    };
    x.set_buffer(values(b * t * 3 * h * d));
    w.set_buffer(values(h * d * 32));
    auto heads = [&](int64_t part) {
      return x.slice(2, part * h * d, (part + 1) * h * d).reshape({b, t, h, d}).transpose(1, 2);
    };
    const Tensor scores = heads(0).matmul(heads(1).transpose(-1, -2)) * 0.125;
    const Tensor a =
        where(nn::causal_mask(cx, t, 0), scores, -std::numeric_limits<double>::infinity())
            .softmax(-1)
            .matmul(heads(2));
    Tensor y = a.transpose(1, 2).reshape({b, t, h * d}).matmul(w).retrieve();
    const std::vector<float> want = testing::run_outputs(cx, reference(), {y})[0];
    const std::vector<float> got = testing::run_outputs(cx, cuda(), {y})[0];
    EXPECT_EQ(cx.last_run_stats().host_fallbacks, 0u);
    const double tolerance = dtype == DType::F32 ? 1e-3 : 5e-2;
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i)
      ASSERT_NEAR(got[i], want[i], tolerance * (1 + std::fabs(want[i])))
          << t << " tokens, " << dtype_name(dtype) << ", element " << i;
  }
}

// A bf16 prompt on Hopper has two tensor-core kernels: the search times both, none may
// be wrong, the output matches the reference interpreter's, and a second compile takes
// the winner from the cache.
TEST(Cuda, PromptAttentionSearchesItsKernels) {
  SKIP_WITHOUT_GPU();
  const testing::ScopedCacheDir cache("attention-search");
  const testing::ScopedEnv log("LUMINAL_LOG", "info");
  const testing::ScopedEnv mode("LUMINAL_SEARCH", "fast");
  const int64_t kv = 2, group = 4, seq = 256, d = 128;
  std::mt19937 rng(5);
  auto values = [&](int64_t n) {
    return testing::uniform_buffer(rng, static_cast<size_t>(n), DType::BF16, -2.0f, 2.0f);
  };
  const Buffer qv = values(kv * group * seq * d), kvals = values(seq * kv * d),
               vvals = values(seq * kv * d);
  std::vector<float> want;
  for (const std::string pass : {"reference", "searched", "cached"}) {
    Graph cx;
    Tensor q = cx.named_tensor("q", {kv, group, seq, d}, DType::BF16);
    Tensor k = cx.named_tensor("k", {seq, kv, d}, DType::BF16);
    Tensor v = cx.named_tensor("v", {seq, kv, d}, DType::BF16);
    q.set_buffer(qv);
    k.set_buffer(kvals);
    v.set_buffer(vvals);
    Tensor scores = q.matmul(k.permute({1, 0, 2}).unsqueeze(1).transpose(-1, -2)) *
                    (1.0 / std::sqrt(static_cast<double>(d)));
    scores = where(nn::causal_mask(cx, seq, 0), scores, -std::numeric_limits<double>::infinity());
    Tensor y = scores.softmax(-1).matmul(v.permute({1, 0, 2}).unsqueeze(1)).retrieve();
    if (pass == "reference") {
      want = testing::run_outputs(cx, reference(), {y})[0];
      continue;
    }
    ::testing::internal::CaptureStderr();
    const std::vector<float> got = testing::run_outputs(cx, cuda(), {y})[0];
    const std::string err = ::testing::internal::GetCapturedStderr();
    if (err.find("for sm_90,") != std::string::npos) {  // (the compile log's architecture)
      EXPECT_NE(err.find("luminal: search attention"), std::string::npos) << pass << ":\n" << err;
      EXPECT_NE(err.find(pass == "searched" ? "the cost model's pick" : "(cached)"),
                std::string::npos)
          << pass << ":\n"
          << err;
    }
    EXPECT_EQ(err.find("is wrong"), std::string::npos) << err;
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i)
      ASSERT_NEAR(got[i], want[i], 2e-2 * (1 + std::fabs(want[i]))) << pass << " element " << i;
  }
}

// One-row products: every kernel shape is tried (none may be wrong), on a row count that
// no shape's rows a block divide and a K with a tail past the unrolled loads.
TEST(Cuda, OneRowProductsSearchTheKernelsShapes) {
  SKIP_WITHOUT_GPU();
  expect_searched_product(1, 4104, 1001, DType::F32, "gemv f32 n=1001 k=4104", true);
  expect_searched_product(1, 4104, 1001, DType::BF16, "gemv bf16 n=1001 k=4104", true);
}

TEST(Cuda, ChangingABoundDimReusesTheCompiledKernels) {
  SKIP_WITHOUT_GPU();
  Graph cx;
  Tensor x = cx.named_tensor("x", {Expr::var("n"), 8});
  Tensor y = (x * 2.0 + 1.0).sum_reduce(1).retrieve();
  cx.compile(cuda());
  for (int64_t n : {3, 17, 1, 64}) {
    cx.set_dim("n", n);
    std::vector<float> data(static_cast<size_t>(n * 8));
    for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<float>(i % 13) * 0.25f;
    x.set(data);
    cx.execute();
    const auto got = y.to_f32();
    ASSERT_EQ(got.size(), static_cast<size_t>(n));
    for (int64_t r = 0; r < n; ++r) {
      double want = 0;
      for (int c = 0; c < 8; ++c) want += data[static_cast<size_t>(r * 8 + c)] * 2.0 + 1.0;
      EXPECT_NEAR(got[static_cast<size_t>(r)], want, 1e-4) << "n " << n << " row " << r;
    }
  }
}

// Whether runs may be recorded as CUDA graphs (LUMINAL_CUDA_GRAPHS=0 turns it off: the
// tests below then check the values alone).
bool graphs_on() {
  const char* v = std::getenv("LUMINAL_CUDA_GRAPHS");
  return !v || std::string(v) != "0";
}

// From the third run on, a run is one CUDA graph launch: the first is not recorded, the
// second is recorded but its work is new (launched kernel by kernel, the product's
// cuBLASLt call made as it comes), the third records the same work and instantiates the
// graph (the call captured into it); a run like the last launches it again as it is,
// and one with another dim gives the nodes whose parameters moved new ones. New input
// data is read every time.
TEST(Cuda, RepeatedRunsReplayARecordedGraph) {
  SKIP_WITHOUT_GPU();
  struct Model {
    Graph cx;
    Tensor x, w, y;
    Model() {
      x = cx.named_tensor("x", {Expr::var("batch"), 64});
      w = cx.named_tensor("w", {32, 64});
      y = (x.matmul(w.permute({1, 0})).softmax(1) * 2.0 + 1.0).retrieve();
    }
  };
  Model ref, gpu;
  ref.cx.compile(reference());
  gpu.cx.compile(cuda());
  std::mt19937 rng(3);
  const std::vector<float> w = testing::uniform_floats(rng, 32 * 64);
  ref.w.set(w);
  gpu.w.set(w);
  enum Updated { None, Some };
  struct Step {
    int64_t batch;
    bool replayed;
    Updated updated;
  };
  const std::vector<Step> steps = {{4, false, None}, {4, false, None}, {4, true, Some},
                                   {4, true, None},  {7, true, Some},  {7, true, None},
                                   {7, true, None},  {4, true, Some}};
  for (size_t i = 0; i < steps.size(); ++i) {
    const std::vector<float> x =
        testing::uniform_floats(rng, static_cast<size_t>(steps[i].batch * 64));
    for (Model* m : {&ref, &gpu}) {
      m->cx.set_dim("batch", steps[i].batch);
      m->x.set(x);
      m->cx.execute();
    }
    const RunStats stats = gpu.cx.last_run_stats();
    if (graphs_on()) {
      EXPECT_EQ(stats.replayed, steps[i].replayed) << "run " << i;
      EXPECT_EQ(stats.graph_nodes_updated > 0, steps[i].updated == Some) << "run " << i;
    }
    const std::vector<float> want = ref.y.to_f32(), got = gpu.y.to_f32();
    ASSERT_EQ(got.size(), want.size()) << "run " << i;
    for (size_t k = 0; k < got.size(); ++k)
      ASSERT_NEAR(got[k], want[k], 1e-4 * (1 + std::fabs(want[k])))
          << "run " << i << " element " << k;
  }
}

// A library's call recorded again with the arguments its graph node was captured with
// keeps that node, and the library is not called (a cuDNN convolution's host work
// outlasts its kernels); one whose arguments moved is captured anew. Three products in a
// row through cuBLASLt: the first reads the input, set on the device at a new place
// every run, and the last writes into the same memory of the caller's every run. Every
// run is recorded (the input moved); from the fifth on, the run is launched as graphs
// and one node takes new parameters, the one reading the input (all three would, were
// every library node given its new capture).
TEST(Cuda, LibraryCallsKeepTheirCapturesWhileTheirArgumentsStay) {
  SKIP_WITHOUT_GPU();
  const testing::ScopedCacheDir cache("library-calls");
  const testing::ScopedEnv log("LUMINAL_LOG", "info");
  constexpr int64_t n = 512;  // (searched: the log names the library)
  const auto product = [](const std::vector<float>& a, const std::vector<float>& b) {
    std::vector<float> c(static_cast<size_t>(n * n), 0.0f);
    for (int64_t i = 0; i < n; ++i)
      for (int64_t p = 0; p < n; ++p)
        for (int64_t j = 0; j < n; ++j)
          c[static_cast<size_t>(i * n + j)] +=
              a[static_cast<size_t>(i * n + p)] * b[static_cast<size_t>(p * n + j)];
    return c;
  };
  Graph gpu;
  Tensor x = gpu.named_tensor("x", {n, n});
  std::mt19937 rng(5);
  std::vector<std::vector<float>> weights;
  Tensor y = x;
  for (const char* name : {"a", "b", "c"}) {
    weights.push_back(exact_values(rng, static_cast<size_t>(n * n)));
    Tensor w = gpu.named_tensor(name, {n, n});
    w.set(weights.back());
    y = y.matmul(w);
  }
  y.keep_on_device();
  gpu.compile(cuda());
  const DeviceData out = to_cuda(Buffer(DType::F32, n * n));
  std::vector<DeviceData> inputs;  // every run's, so none's place is reused
  for (int run = 0; run < 8; ++run) {
    const std::vector<float> xs = exact_values(rng, static_cast<size_t>(n * n));
    inputs.push_back(to_cuda(Buffer::from(xs)));
    x.set_device(inputs.back());
    y.write_into(out);
    if (run == 0) ::testing::internal::CaptureStderr();
    gpu.execute();
    if (run == 0) {
      const std::string err = ::testing::internal::GetCapturedStderr();
      ASSERT_NE(err.find("gemm f32->f32"), std::string::npos) << "not cuBLASLt's:\n" << err;
    }
    const RunStats stats = gpu.last_run_stats();
    if (graphs_on() && run >= 4) {
      EXPECT_TRUE(stats.replayed) << "run " << run;
      EXPECT_EQ(stats.graph_nodes_updated, 1u) << "run " << run;
    }
    const std::vector<float> want =
        product(product(product(xs, weights[0]), weights[1]), weights[2]);
    const std::vector<float> got = out.to_host().to_f32();
    ASSERT_EQ(got.size(), want.size());
    // (Sums in another order: off by rounding, far less than a product of stale operands.)
    float scale = 0;
    for (float v : want) scale = std::max(scale, std::fabs(v));
    for (size_t i = 0; i < got.size(); ++i)
      ASSERT_NEAR(got[i], want[i], 1e-4 * scale) << "run " << run << " " << i;
  }
}

// An output written into memory of the caller's (write_into) is computed there. From the
// fifth run on, a run that writes where the last one did is the recorded graphs launched
// again untouched; one writing elsewhere gives their nodes the new address, as does an
// output not given memory, handed over in a new buffer. Outputs whose values lie elsewhere
// are copied into the memory given: an input passed through, and a value that another
// output is written into or handed over. Every run's values are right, read where they
// were written.
TEST(Cuda, OutputsAreWrittenIntoTheCallersMemory) {
  SKIP_WITHOUT_GPU();
  Graph ref, gpu;
  Tensor rx = ref.named_tensor("x", {4, 64}), rw = ref.named_tensor("w", {32, 64});
  Tensor gx = gpu.named_tensor("x", {4, 64}), gw = gpu.named_tensor("w", {32, 64});
  Tensor ry = (rx.matmul(rw.permute({1, 0})).softmax(1) * 2.0 + 1.0).retrieve();
  // Outputs (marked before compiling): a value, its reshape (the value itself, as it lies)
  // and a reshape of the input (the input itself).
  Tensor gv = (gx.matmul(gw.permute({1, 0})).softmax(1) * 2.0 + 1.0).keep_on_device();
  Tensor gy = gv.reshape({2, 2, 32}).contiguous().keep_on_device();
  Tensor passed = gx.reshape({64, 4}).contiguous().keep_on_device();
  ref.compile(reference());
  gpu.compile(cuda());
  std::mt19937 rng(7);
  const std::vector<float> w = testing::uniform_floats(rng, 32 * 64);
  rw.set(w);
  gw.set(w);
  const auto memory = [] { return to_cuda(Buffer(DType::F32, 128)); };
  // Two places for the value's two outputs (one computed there, the other a copy).
  const std::pair<DeviceData, DeviceData> places[2] = {{memory(), memory()}, {memory(), memory()}};
  const DeviceData input_memory = to_cuda(Buffer(DType::F32, 256));
  // Run by run, the place the value's outputs are written into (-1: y is given none, so
  // it is handed over, and v is copied out of its buffer).
  const int runs[] = {0, 0, 0, 0, 0, 0, 1, 0, -1, 0, 0, 0};
  for (size_t i = 0; i < std::size(runs); ++i) {
    const std::vector<float> x = testing::uniform_floats(rng, 4 * 64);
    rx.set(x);
    gx.set(x);
    const auto& [y_memory, v_memory] = places[std::max(runs[i], 0)];
    if (runs[i] >= 0) gy.write_into(y_memory);
    gv.write_into(v_memory);
    passed.write_into(input_memory);
    ref.execute();
    gpu.execute();
    const RunStats stats = gpu.last_run_stats();
    const std::vector<float> want = ry.to_f32();
    for (const auto& [what, got] :
         {std::pair{"y", runs[i] >= 0 ? y_memory.to_host().to_f32() : gy.to_f32()},
          std::pair{"the value y reshapes", v_memory.to_host().to_f32()}}) {
      ASSERT_EQ(got.size(), want.size()) << what;
      for (size_t k = 0; k < got.size(); ++k)
        ASSERT_NEAR(got[k], want[k], 1e-4 * (1 + std::fabs(want[k])))
            << what << ", run " << i << " element " << k;
    }
    EXPECT_EQ(input_memory.to_host().to_f32(), x) << "run " << i;
    EXPECT_EQ(gv.device_data(), nullptr) << "run " << i << ": the memory given is let go";
    const bool as_before = i >= 1 && runs[i] >= 0 && runs[i] == runs[i - 1];
    if (graphs_on() && i >= 4) {
      EXPECT_TRUE(stats.replayed) << "run " << i;
      EXPECT_EQ(stats.graph_nodes_updated == 0, as_before) << "run " << i;
    }
  }
}

// The attentions of a run over one mask read the tiles the one before worked out (a
// model's layers sharing a causal mask); one over another mask of the same shape works
// them out again, and so does the next run's first, the masks' values having changed.
// Every output equals the reference interpreter's.
TEST(Cuda, AttentionsOverOneMaskShareItsTiles) {
  SKIP_WITHOUT_GPU();
  const int64_t heads = 4, rows = 192, d = 64;
  struct Model {
    Graph cx;
    Tensor q, k, v, m1, m2;
    std::vector<Tensor> outs;
  };
  auto build = [&](Model& m) {
    m.q = m.cx.named_tensor("q", {2, heads, rows, d}, DType::BF16);
    m.k = m.cx.named_tensor("k", {2, heads, rows, d}, DType::BF16);
    m.v = m.cx.named_tensor("v", {2, heads, rows, d}, DType::BF16);
    m.m1 = m.cx.named_tensor("m1", {rows, rows}, DType::Bool);
    m.m2 = m.cx.named_tensor("m2", {rows, rows}, DType::Bool);
    auto attend = [&](const Tensor& x, const Tensor& mask) {
      const Tensor scores = x.matmul(m.k.transpose(-1, -2)) * 0.125;
      return where(mask, scores, -std::numeric_limits<double>::infinity()).softmax(-1).matmul(m.v);
    };
    // The second reads the first's tiles; the third and fourth work theirs out.
    const Tensor a = attend(m.q, m.m1), b = attend(a, m.m1), c = attend(b, m.m2),
                 e = attend(c, m.m1);
    for (Tensor t : {a, b, c, e}) m.outs.push_back(t.retrieve());
  };
  Model ref, gpu;
  build(ref);
  build(gpu);
  ref.cx.compile(reference());
  gpu.cx.compile(cuda());
  std::mt19937 rng(5);
  auto random = [&](int64_t n) {
    return testing::uniform_buffer(rng, static_cast<size_t>(n), DType::BF16, -2.0f, 2.0f);
  };
  for (int run = 0; run < 3; ++run) {
    // Masks keeping three keys in four, and each row its own key.
    std::bernoulli_distribution kept(0.75);
    std::vector<double> m1(rows * rows), m2(rows * rows);
    for (size_t i = 0; i < m1.size(); ++i) {
      const bool diagonal = i / rows == i % rows;
      m1[i] = diagonal || kept(rng);
      m2[i] = diagonal || kept(rng);
    }
    const Buffer q = random(2 * heads * rows * d), k = random(2 * heads * rows * d),
                 v = random(2 * heads * rows * d);
    for (Model* m : {&ref, &gpu}) {
      m->q.set_buffer(q);
      m->k.set_buffer(k);
      m->v.set_buffer(v);
      m->m1.set_buffer(Buffer::from_doubles(m1, DType::Bool));
      m->m2.set_buffer(Buffer::from_doubles(m2, DType::Bool));
      m->cx.execute();
    }
    for (size_t o = 0; o < ref.outs.size(); ++o) {
      const std::vector<float> want = ref.outs[o].to_f32(), got = gpu.outs[o].to_f32();
      ASSERT_EQ(got.size(), want.size());
      for (size_t i = 0; i < got.size(); ++i)
        ASSERT_NEAR(got[i], want[i], 0.05 * (1 + std::fabs(want[i])))
            << "run " << run << ", attention " << o << ", element " << i;
    }
  }
}

// Decode steps whose keys are split between blocks (6001 cached positions, 8 key heads of
// 4 query heads), three attentions in a chain (each one's output the next one's queries,
// so the next reads what the combine of the one before wrote), over four runs with new
// queries, keys and values each: every output equals the reference interpreter's. The
// attentions write their split pieces into the same memory, one after another.
TEST(Cuda, ChainedSplitDecodeAttentionsMatchTheReferenceRunAfterRun) {
  SKIP_WITHOUT_GPU();
  const int64_t kv = 8, group = 4, d = 128, past = 6000, total = past + 1, layers = 3;
  struct Model {
    Graph cx;
    Tensor q;
    std::vector<Tensor> k, v, outs;
  };
  auto build = [&](Model& m) {
    m.q = m.cx.named_tensor("q", {kv, group, 1, d});
    Tensor x = m.q;
    for (int64_t l = 0; l < layers; ++l) {
      const std::string n = std::to_string(l);
      m.k.push_back(m.cx.named_tensor("k" + n, {total, kv, d}, DType::BF16));
      m.v.push_back(m.cx.named_tensor("v" + n, {total, kv, d}, DType::BF16));
      const Tensor keys = m.k.back().cast(DType::F32).permute({1, 0, 2});
      const Tensor values = m.v.back().cast(DType::F32).permute({1, 0, 2});
      Tensor scores = x.matmul(keys.unsqueeze(1).transpose(-1, -2)) * (1.0 / std::sqrt(double(d)));
      scores =
          where(nn::causal_mask(m.cx, 1, past), scores, -std::numeric_limits<double>::infinity());
      x = scores.softmax(-1).matmul(values.unsqueeze(1));
      m.outs.push_back(x.retrieve());
    }
  };
  Model ref, gpu;
  build(ref);
  build(gpu);
  ref.cx.compile(reference());
  gpu.cx.compile(cuda());
  std::mt19937 rng(9);
  for (int run = 0; run < 4; ++run) {
    const std::vector<float> q =
        testing::uniform_floats(rng, static_cast<size_t>(kv * group * d), -2.0f, 2.0f);
    std::vector<Buffer> ks, vs;
    for (int64_t l = 0; l < layers; ++l) {
      ks.push_back(testing::uniform_buffer(rng, static_cast<size_t>(total * kv * d), DType::BF16,
                                           -2.0f, 2.0f));
      vs.push_back(testing::uniform_buffer(rng, static_cast<size_t>(total * kv * d), DType::BF16,
                                           -2.0f, 2.0f));
    }
    for (Model* m : {&ref, &gpu}) {
      m->q.set(q);
      for (int64_t l = 0; l < layers; ++l) {
        m->k[l].set_buffer(ks[l]);
        m->v[l].set_buffer(vs[l]);
      }
      m->cx.execute();
    }
    EXPECT_EQ(gpu.cx.last_run_stats().host_fallbacks, 0u);
    for (size_t o = 0; o < ref.outs.size(); ++o) {
      const std::vector<float> want = ref.outs[o].to_f32(), got = gpu.outs[o].to_f32();
      ASSERT_EQ(got.size(), want.size());
      for (size_t i = 0; i < got.size(); ++i)
        ASSERT_NEAR(got[i], want[i], 1e-4 * (1 + std::fabs(want[i])))
            << "run " << run << ", attention " << o << ", element " << i;
    }
  }
}

// A computed (causal) mask's tiles follow from its dims: a run over the dims of the run
// before reads the tiles that run's pass wrote, a run over other dims works them out
// again (past 0, 64, then 0 again), and every output equals the reference interpreter's.
TEST(Cuda, ComputedMasksKeepTheirTilesAcrossRunsOverTheSameDims) {
  SKIP_WITHOUT_GPU();
  const testing::ScopedEnv mode("LUMINAL_SEARCH", "off");  // no trials in the first run
  const int64_t heads = 4, seq = 128, d = 64;
  const Expr past = Expr::var("past");
  struct Model {
    Graph cx;
    Tensor q, k, v, y;
  };
  auto build = [&](Model& m) {
    m.q = m.cx.named_tensor("q", {heads, seq, d}, DType::BF16);
    m.k = m.cx.named_tensor("k", {heads, past + seq, d}, DType::BF16);
    m.v = m.cx.named_tensor("v", {heads, past + seq, d}, DType::BF16);
    const Tensor scores = m.q.matmul(m.k.transpose(-1, -2)) * 0.125;
    m.y = where(nn::causal_mask(m.cx, seq, past), scores, -std::numeric_limits<double>::infinity())
              .softmax(-1)
              .matmul(m.v)
              .retrieve();
  };
  Model ref, gpu;
  build(ref);
  build(gpu);
  ref.cx.compile(reference());
  gpu.cx.compile(cuda());
  std::mt19937 rng(12);
  auto random = [&](int64_t n) {
    return testing::uniform_buffer(rng, static_cast<size_t>(n), DType::BF16, -2.0f, 2.0f);
  };
  const std::vector<int64_t> pasts = {0, 0, 64, 64, 64, 0, 0};
  for (size_t run = 0; run < pasts.size(); ++run) {
    const int64_t total = pasts[run] + seq;
    const Buffer q = random(heads * seq * d), k = random(heads * total * d),
                 v = random(heads * total * d);
    for (Model* m : {&ref, &gpu}) {
      m->cx.set_dim("past", pasts[run]);
      m->q.set_buffer(q);
      m->k.set_buffer(k);
      m->v.set_buffer(v);
      m->cx.execute();
    }
    const std::vector<float> want = ref.y.to_f32(), got = gpu.y.to_f32();
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i)
      ASSERT_NEAR(got[i], want[i], 0.05 * (1 + std::fabs(want[i])))
          << "run " << run << " (past " << pasts[run] << "), element " << i;
  }
}

// Values whose sizes follow a dim keep the places planned for them while they grow by
// less than their headroom (a decoding step's), and are planned again when one outgrows
// its place or the dim falls back: every run's values are right either way.
TEST(Cuda, ValuesGrowingWithADimKeepOrLeaveTheirPlacesCorrectly) {
  SKIP_WITHOUT_GPU();
  struct Model {
    Graph cx;
    Tensor x, y, z;
    Model() {
      x = cx.named_tensor("x", {Expr::var("n"), 16});
      const Tensor e = (x * 0.5).exp() + x.sin();  // values of n rows, live together
      y = (e * x).sum({1}).retrieve();
      z = (e.max({1}) - x.cos().sum({1})).retrieve();
    }
  };
  Model ref, gpu;
  ref.cx.compile(reference());
  gpu.cx.compile(cuda());
  std::mt19937 rng(5);
  for (const int64_t n : {32, 33, 34, 35, 36, 40, 41, 64, 20, 21, 80}) {
    const std::vector<float> x = testing::uniform_floats(rng, static_cast<size_t>(n * 16));
    for (Model* m : {&ref, &gpu}) {
      m->cx.set_dim("n", n);
      m->x.set(x);
      m->cx.execute();
    }
    for (auto [want_t, got_t] : {std::pair{&ref.y, &gpu.y}, std::pair{&ref.z, &gpu.z}}) {
      const std::vector<float> want = want_t->to_f32(), got = got_t->to_f32();
      ASSERT_EQ(got.size(), static_cast<size_t>(n)) << "n " << n;
      for (size_t k = 0; k < got.size(); ++k)
        ASSERT_NEAR(got[k], want[k], 1e-4 * (1 + std::fabs(want[k]))) << "n " << n << " row " << k;
    }
  }
}

// all_reduce and all_gather nodes through NCCL, over a group of one rank (this GPU):
// queued, then captured into the recorded graphs and run again from them as the dims
// change.
TEST(Cuda, CollectivesRunThroughNcclInsideTheGraphs) {
  SKIP_WITHOUT_GPU();
  std::shared_ptr<Communicator> one;
  try {
    one = nccl_communicator(nccl_unique_id(), 0, 1, 0);
  } catch (const Error& e) {
    GTEST_SKIP() << "no NCCL here: " << e.what();
  }
  Graph cx;
  Tensor x = cx.named_tensor("x", {Expr::var("batch"), 16});
  Tensor y = (all_reduce(x * 2.0, one).exp2() + 1.0).retrieve();
  Tensor stacked = all_gather(x + 3.0, one).retrieve();  // [1, batch, 16]
  cx.compile(cuda());
  std::mt19937 rng(5);
  const std::vector<int64_t> batches = {4, 4, 4, 4, 7, 7, 7, 4};
  for (size_t i = 0; i < batches.size(); ++i) {
    const std::vector<float> v = testing::uniform_floats(rng, static_cast<size_t>(batches[i] * 16));
    cx.set_dim("batch", batches[i]);
    x.set(v);
    cx.execute();
    const RunStats stats = cx.last_run_stats();
    EXPECT_EQ(stats.host_fallbacks, 0u) << "run " << i;
    if (graphs_on() && i >= 5) {
      EXPECT_TRUE(stats.replayed) << "run " << i;
    }
    const std::vector<float> got = y.to_f32(), gathered = stacked.to_f32();
    ASSERT_EQ(got.size(), v.size());
    ASSERT_EQ(gathered.size(), v.size());
    for (size_t k = 0; k < v.size(); ++k) {
      ASSERT_NEAR(got[k], std::exp2(2 * v[k]) + 1, 1e-5 * (1 + std::exp2(2 * v[k])))
          << "run " << i << " element " << k;
      ASSERT_EQ(gathered[k], v[k] + 3.0f) << "run " << i << " element " << k;
    }
  }
}

// Inputs set on the device are read there and outputs kept there are handed over; the
// values against host arithmetic.
TEST(Cuda, InputsAndOutputsStayOnTheDevice) {
  SKIP_WITHOUT_GPU();
  Graph cx;
  Tensor x = cx.named_tensor("x", {Expr::var("n"), 4});
  Tensor y = (x * 2.0 + 1.0).keep_on_device();
  Tensor z = x.sum({1}).retrieve();
  cx.compile(cuda());
  for (int64_t n : {3, 5}) {
    std::vector<float> xs(static_cast<size_t>(n * 4));
    for (size_t i = 0; i < xs.size(); ++i) xs[i] = 0.25f * static_cast<float>(i) - 1.0f;
    cx.set_dim("n", n);
    x.set_device(to_cuda(Buffer::from(xs)));
    cx.execute();
    ASSERT_NE(y.device_data(), nullptr);
    EXPECT_EQ(cx.data(y.id()), nullptr);
    EXPECT_EQ(z.device_data(), nullptr);
    const std::vector<float> ys = y.to_f32(), zs = z.to_f32();
    for (size_t i = 0; i < xs.size(); ++i) EXPECT_EQ(ys[i], xs[i] * 2.0f + 1.0f) << i;
    for (size_t r = 0; r < static_cast<size_t>(n); ++r)
      EXPECT_EQ(zs[r], xs[4 * r] + xs[4 * r + 1] + xs[4 * r + 2] + xs[4 * r + 3]) << r;
  }
  // Data on the device must fit the input like host data does.
  x.set_device(to_cuda(Buffer::from(std::vector<float>(7))));
  testing::expect_error([&] { cx.execute(); }, {"'x'", "needs 20 elements, got 7 on the GPU"});
}

// An output of a fixed size handed over every run (a decoding step's logits) gets back
// its buffer once its holder lets go: runs alternate between two buffers instead of
// allocating one each. A holder that keeps an earlier run's value keeps its values.
TEST(Cuda, HandedOverOutputsOfAFixedSizeReuseTheirBuffers) {
  SKIP_WITHOUT_GPU();
  Graph cx;
  Tensor x = cx.named_tensor("x", {64});
  Tensor y = (x * 3.0 - 1.0).keep_on_device();
  cx.compile(cuda());
  std::vector<const void*> places;
  std::optional<DeviceData> kept;
  for (int run = 0; run < 5; ++run) {
    std::vector<float> xs(64);
    for (size_t i = 0; i < xs.size(); ++i) xs[i] = static_cast<float>(run * 64 + i) * 0.5f;
    x.set(xs);
    cx.execute();
    ASSERT_NE(y.device_data(), nullptr);
    places.push_back(y.device_data()->data());
    if (run == 1) kept = *y.device_data();  // held past the next runs
    const std::vector<float> ys = y.to_f32();
    for (size_t i = 0; i < xs.size(); ++i) ASSERT_EQ(ys[i], xs[i] * 3.0f - 1.0f) << run << " " << i;
  }
  // Run 1 replaced run 0's value, whose buffer run 2 took; run 1's is held, so run 3's
  // is new, and run 4 takes run 2's, let go by run 3.
  EXPECT_NE(places[1], places[0]);
  EXPECT_EQ(places[2], places[0]);
  EXPECT_NE(places[3], places[1]);
  EXPECT_NE(places[3], places[2]);
  EXPECT_EQ(places[4], places[2]);
  const std::vector<float> held = kept->to_host().to_f32();
  for (size_t i = 0; i < held.size(); ++i)
    ASSERT_EQ(held[i], static_cast<float>(64 + i) * 0.5f * 3.0f - 1.0f) << i;
}

// Runs timed on the device alone (the stream held until the host has queued the whole
// run) give the same results as runs started at once, replayed or not, and a device time.
TEST(Cuda, RunsTimedAloneMatchRunsStartedAtOnce) {
  SKIP_WITHOUT_GPU();
  Graph cx;
  Tensor x = cx.named_tensor("x", {4099});
  Tensor y = ((x * 2.0 + 1.0).relu() * x).retrieve();
  cx.compile(cuda());
  std::vector<float> xs(4099);
  for (int run = 0; run < 8; ++run) {
    if (run == 4) cx.time_device_alone(true);
    for (size_t i = 0; i < xs.size(); ++i)
      xs[i] = static_cast<float>((i * 37 + static_cast<size_t>(run) * 11) % 200) * 0.01f - 1.0f;
    x.set(xs);
    cx.execute();
    const std::vector<float> got = y.to_f32();
    for (size_t i = 0; i < xs.size(); ++i)
      ASSERT_EQ(got[i], std::max(xs[i] * 2.0f + 1.0f, 0.0f) * xs[i]) << "run " << run << ", " << i;
    EXPECT_GT(cx.last_run_stats().device_seconds, 0.0) << "run " << run;
  }
  cx.time_device_alone(false);
  cx.execute();
  EXPECT_EQ(y.to_f32()[5], std::max(xs[5] * 2.0f + 1.0f, 0.0f) * xs[5]);
}

// Runs queued one ahead (Graph::execute_queued), each on the last one's output where it
// lies on the device, as greedy decoding feeds a step's token to the next: every run's
// value matches the host's arithmetic when read after later runs were queued. A kernel
// error of a queued run is raised by the call that settles it, and the runs after go on.
TEST(Cuda, QueuedRunsFeedEachOtherOnTheDevice) {
  SKIP_WITHOUT_GPU();
  Graph cx;
  Tensor x = cx.named_tensor("x", {1 << 20});
  Tensor y = (x * 0.5 + 1.0).keep_on_device();
  cx.compile(cuda());
  std::vector<float> xs(1 << 20);
  for (size_t i = 0; i < xs.size(); ++i) xs[i] = static_cast<float>(i % 4096) * 0.25f - 100.0f;
  x.set(xs);
  std::vector<DeviceData> outs;
  for (int run = 0; run < 6; ++run) {
    if (run > 0) x.set_device(outs.back());
    cx.execute_queued();
    outs.push_back(*y.device_data());
  }
  for (const DeviceData& out : outs) {
    for (float& v : xs) v = v * 0.5f + 1.0f;
    const std::vector<float> got = out.to_host().to_f32();
    for (size_t i = 0; i < xs.size(); i += 997) ASSERT_EQ(got[i], xs[i]) << i;
  }
  cx.wait();

  // A queued run's output read by another program, on a stream of its own: that stream
  // waits for the run's end before reading it.
  Graph other;
  Tensor in = other.named_tensor("in", {1 << 20});
  Tensor plus = (in + 1.0).retrieve();
  other.compile(cuda());
  x.set_device(outs.back());
  cx.execute_queued();
  in.set_device(*y.device_data());
  other.execute();
  const std::vector<float> got = plus.to_f32();
  for (size_t i = 0; i < xs.size(); i += 997) ASSERT_EQ(got[i], (xs[i] * 0.5f + 1.0f) + 1.0f) << i;
  cx.wait();

  Graph cg;
  Tensor table = cg.named_tensor("table", {4, 3});
  Tensor ids = cg.named_tensor("ids", {2}, DType::I32);
  std::vector<float> rows(12);
  for (size_t i = 0; i < rows.size(); ++i) rows[i] = static_cast<float>(i);
  table.set(rows);
  Tensor picked = table.gather(ids).keep_on_device();
  cg.compile(cuda());
  ids.set(std::vector<int32_t>{1, 20});
  cg.execute_queued();
  testing::expect_error([&] { cg.wait(); }, {"Gather", "index 20 at position 1", "out of range"});
  ids.set(std::vector<int32_t>{3, 0});
  cg.execute_queued();
  cg.wait();
  EXPECT_EQ(picked.to_f32(), (std::vector<float>{rows[3], rows[0]}));  // (flat indices)
  // A good run queued behind a failing one: the failure is reported once (by the call
  // that settles it), and the run after it, which copied back the same error words, does
  // not report it again.
  ids.set(std::vector<int32_t>{20, 1});
  cg.execute_queued();
  ids.set(std::vector<int32_t>{2, 1});
  testing::expect_error([&] { cg.execute_queued(); },
                        {"Gather", "index 20 at position 0", "out of range"});
  cg.wait();
  EXPECT_EQ(picked.to_f32(), (std::vector<float>{rows[2], rows[1]}));
}

// top_k on the GPU against a full stable sort: vocabulary-sized rows and short ones (a
// router's 128 experts, rows that do not fill the warp kernel's block of four, a row of
// exactly its most), in each float type, with ties, NaN, infinities and signed zeros, k
// up to the kernel's most; past it, or over a view that is not dense, the op still runs
// (on the host, which its first run reports on stderr).
TEST(Cuda, TopKIsTheFirstKOfAStableSort) {
  SKIP_WITHOUT_GPU();
  for (DType t : {DType::F32, DType::F16, DType::BF16})
    for (const auto& [rows, n] : {std::pair<int64_t, int64_t>{1, 128256},
                                  {3, 1000},
                                  {2, 262144},
                                  {1, 16484},
                                  {7, 128},
                                  {5, 1024},
                                  {9, 33}})
      for (int64_t most : {int64_t{1}, int64_t{8}, int64_t{16}, int64_t{40},
                           int64_t{1024}}) {  // (16: the warp kernel's most; 1024: the block's)
        const int64_t k = std::min(most, n);
        Graph cx;
        Tensor x = cx.named_tensor("x", {rows, n}, t);
        Tensor ids = top_k(x, k).retrieve();
        cx.compile(cuda());
        const std::vector<float> data = testing::top_k_rows(
            static_cast<size_t>(rows), static_cast<size_t>(n), static_cast<uint64_t>(k + n));
        x.set_buffer(Buffer::from_doubles(std::vector<double>(data.begin(), data.end()), t));
        cx.execute();
        EXPECT_EQ(cx.last_run_stats().host_fallbacks, 0u);
        const std::span<const int32_t> got = cx.data(ids.id())->span<int32_t>();
        ASSERT_EQ(std::vector<int32_t>(got.begin(), got.end()),
                  testing::top_k_by_sort(data, static_cast<size_t>(n), static_cast<size_t>(k)))
            << dtype_name(t) << " rows " << rows << " n " << n << " k " << k;
      }
  Graph cx;
  Tensor x = cx.named_tensor("x", {2000});
  Tensor ids = top_k(x, 1500).retrieve();
  Tensor strided = top_k(x.reshape({1000, 2}).transpose(0, 1), 3).retrieve();
  cx.compile(cuda());
  const std::vector<float> data = testing::top_k_rows(1, 2000, 9);
  // Each of the two kernels the GPU does not take says so on its first run, once.
  ::testing::internal::CaptureStderr();
  x.set(data);
  cx.execute();
  x.set(data);
  cx.execute();
  const std::string said = ::testing::internal::GetCapturedStderr();
  size_t reports = 0;
  for (size_t at = said.find("runs on the host"); at != std::string::npos;
       at = said.find("runs on the host", at + 1))
    ++reports;
  EXPECT_EQ(reports, 2u) << said;
  EXPECT_NE(said.find("TopK(1500) [1500] runs on the host"), std::string::npos) << said;
  const std::span<const int32_t> got = cx.data(ids.id())->span<int32_t>();
  EXPECT_EQ(std::vector<int32_t>(got.begin(), got.end()), testing::top_k_by_sort(data, 2000, 1500));
  std::vector<float> columns(2000);
  for (size_t i = 0; i < 1000; ++i) columns[i] = data[2 * i], columns[1000 + i] = data[2 * i + 1];
  const std::span<const int32_t> got2 = cx.data(strided.id())->span<int32_t>();
  EXPECT_EQ(std::vector<int32_t>(got2.begin(), got2.end()),
            testing::top_k_by_sort(columns, 1000, 3));
}

// Inputs whose upload does not fit the memory luminal may count on stop the run before
// any of it is allocated, naming what they need and what is free; within the limit the
// same program runs. A malformed limit is an error naming the variable.
TEST(Cuda, InputsThatDoNotFitStopBeforeUploading) {
  SKIP_WITHOUT_GPU();
  Graph cx;
  Tensor w = cx.named_tensor("w", {2048, 4096});  // 32 MiB
  w.set(std::vector<float>(2048 * 4096, 0.5f));
  Tensor y = w.sum({1});
  y.retrieve();
  cx.compile(cuda());
  {
    const testing::ScopedEnv limit("LUMINAL_CUDA_MEMORY_LIMIT", "16M");
    testing::expect_error([&] { cx.execute(); }, {"need 32 MiB on GPU 0", "and 16 MiB of its"});
  }
  {
    const testing::ScopedEnv limit("LUMINAL_CUDA_MEMORY_LIMIT", "lots");
    testing::expect_error([&] { cx.execute(); }, {"LUMINAL_CUDA_MEMORY_LIMIT", "'lots'"});
  }
  const testing::ScopedEnv limit("LUMINAL_CUDA_MEMORY_LIMIT", "1G");
  cx.execute();
  EXPECT_EQ(y.to_f32()[0], 2048.0f);
}

// QMatMuls of the same row `xs` of activations by weights of `rows` x k (a layer's q/k/v,
// gate/up), each weight given by `set_weight(w, i)`, each followed by an elementwise op;
// with `shared`, all over the one row, else each over its own copy of it. Every output
// within `bound(i, e, w_i, want)` of the reference's `want`; returns the run's launches.
size_t launches_of_products(bool shared, const std::vector<int64_t>& rows, int64_t k,
                            const std::vector<float>& xs,
                            const std::function<void(Tensor&, size_t)>& set_weight,
                            const std::function<double(size_t, size_t, Tensor&, float)>& bound) {
  Graph cx;
  Tensor x = cx.named_tensor("x", {1, k});
  x.set(xs);
  std::vector<Tensor> outs, weights;
  for (size_t i = 0; i < rows.size(); ++i) {
    Tensor xi = x;
    if (!shared) {
      xi = cx.named_tensor("x" + std::to_string(i), {1, k});
      xi.set(xs);
    }
    weights.push_back(cx.named_tensor("w" + std::to_string(i), {rows[i], k}));
    set_weight(weights.back(), i);
    // Something computed from each product before the next is built.
    outs.push_back((xi.matmul(weights.back().permute({1, 0})) * 2.0 + 1.0).retrieve());
  }
  const std::vector<std::vector<float>> want = testing::run_outputs(cx, reference(), outs);
  const std::vector<std::vector<float>> got = testing::run_outputs(cx, cuda(), outs);
  for (size_t i = 0; i < outs.size(); ++i) {
    EXPECT_EQ(got[i].size(), want[i].size());
    for (size_t e = 0; e < std::min(got[i].size(), want[i].size()); ++e)
      if (std::fabs(got[i][e] - want[i][e]) > bound(i, e, weights[i], want[i][e])) {
        ADD_FAILURE() << (shared ? "shared" : "separate") << " product " << i << ", element " << e
                      << ": " << got[i][e] << " against " << want[i][e];
        return 0;
      }
  }
  return cx.last_run_stats().launches;
}

// QMatMuls of the same row of activations by bf16 weights run as one launch of at most
// four, whatever ops the graph put between them; their results match the reference. The
// same graph with each product over its own copy of the row makes one launch per
// product.
TEST(Cuda, ProductsOfTheSameActivationsRunAsOne) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(5);
  const int64_t k = 256;
  // The first of a run is the smallest: each product's own row count must be used.
  const std::vector<int64_t> rows = {8, 256, 72, 64, 40};
  const std::vector<float> xs = testing::uniform_floats(rng, k);
  std::vector<std::vector<float>> ws;
  for (int64_t n : rows) ws.push_back(testing::uniform_floats(rng, static_cast<size_t>(n * k)));
  auto set_weight = [&](Tensor& w, size_t i) {
    Buffer half(DType::BF16, ws[i].size());
    for (size_t e = 0; e < ws[i].size(); ++e) half.set_f64(e, ws[i][e]);
    Buffer raw(DType::U8, half.bytes());
    std::memcpy(raw.data(), half.data(), half.bytes());
    w.set_quantized(static_cast<uint32_t>(GgmlType::BF16), std::move(raw));
  };
  auto bound = [](size_t, size_t, Tensor&, float want) { return 1e-4 * (1 + std::fabs(want)); };
  // Apart: each product and the op after it. Shared: five products as a launch of four
  // and one alone, the ops after the four as one launch (a map group) and the last alone.
  EXPECT_EQ(launches_of_products(false, rows, k, xs, set_weight, bound), 10u);
  EXPECT_EQ(launches_of_products(true, rows, k, xs, set_weight, bound), 4u);
}

// The same over Q4_K, Q6_K and Q8_0 weights mixed (llama.cpp's Q4_K_M gives a layer's
// values Q6_K): a run of up to four integer products is one step of the run (its row
// quantised once for all, and matrices of one format after each other multiplied in one
// launch, here two of Q4_K and two of Q6_K, of row counts that end inside a block),
// within the int8 activations' bound. Every kernel shape is searched (a fresh cache) and
// none may be wrong.
TEST(Cuda, QuantisedProductsOfTheSameActivationsQuantiseThemOnce) {
  SKIP_WITHOUT_GPU();
  const testing::ScopedCacheDir cache("qdot-shared-search");
  const testing::ScopedEnv log("LUMINAL_LOG", "info");
  const testing::ScopedEnv mode("LUMINAL_SEARCH", "fast");
  ::testing::internal::CaptureStderr();
  std::mt19937 rng(7);
  const int64_t k = 512;
  const std::vector<int64_t> rows = {8, 256, 72, 60, 40};
  const std::vector<GgmlType> types = {GgmlType::Q4_K, GgmlType::Q4_K, GgmlType::Q6_K,
                                       GgmlType::Q6_K, GgmlType::Q8_0};
  std::normal_distribution<float> normal(0, 1);
  std::vector<float> xs(static_cast<size_t>(k));
  for (float& v : xs) v = normal(rng);
  auto set_weight = [&](Tensor& w, size_t i) {
    const auto type = static_cast<uint32_t>(types[i]);
    w.set_quantized(type, testing::random_blocks(type, rows[i], k, static_cast<uint32_t>(i)));
  };
  std::map<size_t, std::vector<float>> decoded;             // each weight's values, once
  auto bound = [&](size_t i, size_t e, Tensor& w, float) {  // doubled by the op after
    if (!decoded.count(i)) decoded[i] = w.to_f32();
    return 2 * int8_activation_bound(decoded[i], xs, 0, static_cast<int64_t>(e), k) + 1e-5;
  };
  // As for half-precision weights: a run of four and one alone, the ops after them too.
  EXPECT_EQ(launches_of_products(false, rows, k, xs, set_weight, bound), 10u);
  EXPECT_EQ(launches_of_products(true, rows, k, xs, set_weight, bound), 4u);
  const std::string err = ::testing::internal::GetCapturedStderr();
  for (const char* line : {"search qdot Q4_K n=8+256 k=512", "search qdot Q6_K n=72+60 k=512"})
    EXPECT_NE(err.find(line), std::string::npos) << "no '" << line << "':\n" << err;
  EXPECT_EQ(err.find("is wrong"), std::string::npos) << err;
}

// RMSNorm read by products over Q4_K, Q6_K and Q8_0 weights (a layer's q/k/v, and one
// more) runs as NormQMatMuls, the norm inside the products (CudaCodegen checks the
// plan): one row in the activations' quantisation, more rows normalised first (5 rows,
// the several-row kernel; 70, the prompt path), each against the reference interpreter's
// unfused graph within its path's bound over the normalised activations (int8 for one
// row, f16 roundings for the prompt path). Rows of 512 and of 4608 (the one-row kernel
// keeps 4096 values in a pass of its threads: the second pass partly full).
TEST(Cuda, RMSNormFoldedIntoTheProductsMatchesTheReference) {
  SKIP_WITHOUT_GPU();
  const std::vector<std::pair<GgmlType, int64_t>> weights = {
      {GgmlType::Q4_K, 64}, {GgmlType::Q4_K, 40}, {GgmlType::Q6_K, 24}, {GgmlType::Q8_0, 36}};
  for (const auto& [k, m] : std::vector<std::pair<int64_t, int64_t>>{
           {512, 1}, {512, 5}, {512, 70}, {4608, 1}, {4608, 5}}) {
    Graph cx;
    Tensor x = cx.named_tensor("x", {1, m, k});
    Tensor g = cx.named_tensor("g", {k});
    std::mt19937 rng(static_cast<uint32_t>(m + k));
    std::normal_distribution<float> normal(0, 1);
    std::vector<float> xs(static_cast<size_t>(m * k)), gs(static_cast<size_t>(k));
    for (float& v : xs) v = normal(rng) * 3.0f;
    for (float& v : gs) v = 1.0f + 0.25f * normal(rng);
    x.set(xs);
    g.set(gs);
    const Tensor h = x.rms_norm({-1}, 1e-5) * g;
    std::vector<Tensor> ws, outs;
    for (size_t i = 0; i < weights.size(); ++i) {
      const auto type = static_cast<uint32_t>(weights[i].first);
      ws.push_back(cx.named_tensor("w" + std::to_string(i), {weights[i].second, k}));
      ws.back().set_quantized(type,
                              testing::random_blocks(type, static_cast<size_t>(weights[i].second),
                                                     static_cast<size_t>(k), 20 + i));
      outs.push_back(h.matmul(ws.back().transpose(0, 1)).retrieve());
    }
    const std::vector<std::vector<float>> want = testing::run_outputs(cx, reference(), outs);
    const std::vector<std::vector<float>> got = testing::run_outputs(cx, cuda(), outs);
    EXPECT_EQ(cx.last_run_stats().host_fallbacks, 0u) << "k " << k << " rows " << m;
    // The normalised activations, in double.
    std::vector<float> hs(xs.size());
    for (int64_t r = 0; r < m; ++r) {
      double squares = 0;
      for (int64_t c = 0; c < k; ++c)
        squares += double{xs[static_cast<size_t>(r * k + c)]} * xs[static_cast<size_t>(r * k + c)];
      const double scale = 1 / std::sqrt(squares / static_cast<double>(k) + 1e-5);
      for (int64_t c = 0; c < k; ++c)
        hs[static_cast<size_t>(r * k + c)] = static_cast<float>(xs[static_cast<size_t>(r * k + c)] *
                                                                scale * gs[static_cast<size_t>(c)]);
    }
    for (size_t i = 0; i < weights.size(); ++i) {
      const std::vector<float> wd = ws[i].to_f32();
      ASSERT_EQ(got[i].size(), want[i].size());
      for (int64_t r = 0; r < m; ++r)
        for (int64_t j = 0; j < weights[i].second; ++j) {
          const auto at = static_cast<size_t>(r * weights[i].second + j);
          double sum_abs = 0;
          for (int64_t c = 0; c < k; ++c)
            sum_abs += std::fabs(double{wd[static_cast<size_t>(j * k + c)]} *
                                 hs[static_cast<size_t>(r * k + c)]);
          const double bound = m == 1 ? int8_activation_bound(wd, hs, r, j, k) + 1e-5 * sum_abs
                                      : std::ldexp(sum_abs, -10) + 1e-5;
          ASSERT_NEAR(got[i][at], want[i][at], bound)
              << ggml_type_name(static_cast<uint32_t>(weights[i].first)) << " rows " << m << " row "
              << r << " col " << j;
        }
    }
  }
}

// A residual added to a product over block-format weights (r + x W^T and x W^T + r)
// runs as QMatMulAdd, the add inside the product where it stores y (the integer kernels'
// and the one-row half-precision kernel's), or after it (the other paths): Q4_K, BF16
// and Q4_0 weights, one row, 5 and 70, against the reference interpreter's unfused graph
// within the product's bound (int8 activations for one row over Q4_K, f16 roundings
// otherwise) plus the sum's rounding.
TEST(Cuda, ResidualAddsFoldedIntoTheProductsMatchTheReference) {
  SKIP_WITHOUT_GPU();
  const int64_t k = 512, n = 48;
  for (const GgmlType t : {GgmlType::Q4_K, GgmlType::BF16, GgmlType::Q4_0})
    for (const int64_t m : {1, 5, 70}) {
      const auto type = static_cast<uint32_t>(t);
      Graph cx;
      Tensor x = cx.named_tensor("x", {m, k});
      Tensor r = cx.named_tensor("r", {m, n});
      Tensor w = cx.named_tensor("w", {n, k}), w2 = cx.named_tensor("w2", {n, k});
      std::mt19937 rng(static_cast<uint32_t>(type * 100 + m));
      std::normal_distribution<float> normal(0, 1);
      std::vector<float> xs(static_cast<size_t>(m * k)), rs(static_cast<size_t>(m * n));
      for (float& v : xs) v = normal(rng);
      for (float& v : rs) v = 4.0f * normal(rng);
      x.set(xs);
      r.set(rs);
      w.set_quantized(type, testing::random_blocks(type, n, k, 31));
      w2.set_quantized(type, testing::random_blocks(type, n, k, 32));
      const std::vector<Tensor> outs = {(r + x.matmul(w.transpose(0, 1))).retrieve(),
                                        (x.matmul(w2.transpose(0, 1)) + r * 0.5).retrieve()};
      const std::vector<std::vector<float>> want = testing::run_outputs(cx, reference(), outs);
      const std::vector<std::vector<float>> got = testing::run_outputs(cx, cuda(), outs);
      EXPECT_EQ(cx.last_run_stats().host_fallbacks, 0u);
      for (size_t o = 0; o < outs.size(); ++o) {
        const std::vector<float> wd = (o == 0 ? w : w2).to_f32();
        ASSERT_EQ(got[o].size(), want[o].size());
        for (int64_t i = 0; i < m; ++i)
          for (int64_t j = 0; j < n; ++j) {
            const auto at = static_cast<size_t>(i * n + j);
            double sum_abs = 0;
            for (int64_t c = 0; c < k; ++c)
              sum_abs += std::fabs(double{wd[static_cast<size_t>(j * k + c)]} *
                                   xs[static_cast<size_t>(i * k + c)]);
            const double bound =
                (m == 1 && t == GgmlType::Q4_K ? int8_activation_bound(wd, xs, i, j, k)
                                               : std::ldexp(sum_abs, -10)) +
                1e-5 * (sum_abs + 2 * std::fabs(double{rs[at]}));
            ASSERT_NEAR(got[o][at], want[o][at], bound)
                << ggml_type_name(type) << " rows " << m << " output " << o << " at " << i << ", "
                << j;
          }
      }
    }
}

// The programs that fold the bias into the product or not, and fuse the attention or
// not, timed from the second run on: every candidate correct, every run right.
TEST(Cuda, OtherExtractionsAreTimedWholeAndTheFastestRuns) {
  SKIP_WITHOUT_GPU();
  testing::expect_judged(testing::search_extractions_on(cuda()),
                         {"as extracted", "without Attention", "without MatMulAdd"});
}

// Values added to a product of two operands of one type are added by the product as it
// stores its output (cuBLASLt's bias epilogue and beta = 1, or the one-row kernel's
// residual): a bias row with a residual stream, a transposed addend (copied into the
// output first), a second product, a bias alone, a residual stream added to a product
// over [2 * M, K] rows viewed as [2, M, N]. In f32, f16 and bf16, batched and of one
// row, against the reference interpreter; in f32 the run is one launch a product.
TEST(Cuda, AddsAfterAProductAreAddedAsItStores) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(11);
  const int64_t k = 96, n = 40;
  for (const DType t : {DType::F32, DType::F16, DType::BF16})
    for (const int64_t m : {1, 37}) {
      Graph cx;
      Tensor h = cx.named_tensor("h", {2, m, k}), x = cx.named_tensor("x", {2, m, n});
      Tensor b = cx.named_tensor("b", {n}), rt = cx.named_tensor("rt", {2, n, m});
      std::vector<Tensor> ws = {cx.named_tensor("w0", {n, k})};  // read transposed
      for (const char* name : {"w1", "w2", "w3", "w4", "w5"})
        ws.push_back(cx.named_tensor(name, {k, n}));
      std::vector<Tensor> ins = {h, x, b, rt};
      ins.insert(ins.end(), ws.begin(), ws.end());
      for (Tensor& in : ins) {
        size_t count = 1;
        for (const Expr& d : in.shape()) count *= static_cast<size_t>(d.eval());
        in.set(testing::uniform_floats(rng, count));
      }
      const Tensor hc = h.cast(t), xc = x.cast(t), bc = b.cast(t), rtc = rt.cast(t);
      std::vector<Tensor> wc;
      for (const Tensor& w : ws) wc.push_back(w.cast(t));
      const std::vector<Tensor> outs = {
          (xc + (hc.matmul(wc[0].transpose(0, 1)) + bc)).cast(DType::F32).retrieve(),
          (hc.matmul(wc[1]) + rtc.transpose(1, 2)).cast(DType::F32).retrieve(),
          (hc.matmul(wc[2]) + hc.matmul(wc[3])).cast(DType::F32).retrieve(),
          (bc + hc.matmul(wc[4])).cast(DType::F32).retrieve(),
          (xc + (hc.reshape({2 * m, k}).matmul(wc[5]) + bc).reshape({2, m, n}))
              .cast(DType::F32)
              .retrieve(),
      };
      const std::string what = std::string(dtype_name(t)) + " rows " + std::to_string(m);
      const auto want = testing::run_outputs(cx, reference(), outs);
      const auto got = testing::run_outputs(cx, cuda(), outs);
      EXPECT_EQ(cx.last_run_stats().host_fallbacks, 0u) << what;
      if (t == DType::F32) {
        EXPECT_EQ(cx.last_run_stats().launches, 6u) << what;
      }
      // The reference rounds the product before adding; the kernels add in f32 and round
      // once.
      const double tol = t == DType::F32 ? 1e-4 : t == DType::F16 ? 2e-2 : 6e-2;
      for (size_t o = 0; o < outs.size(); ++o) {
        ASSERT_EQ(got[o].size(), want[o].size()) << what;
        for (size_t i = 0; i < got[o].size(); ++i)
          ASSERT_NEAR(got[o][i], want[o][i], tol * (1 + std::fabs(want[o][i])))
              << what << " output " << o << " element " << i;
      }
    }
}

// prepare() uploads the weights (inputs set, of fixed shape) before the first run, so
// that run's time is its kernels'; one too large for the GPU stops there.
TEST(Cuda, PrepareUploadsTheWeights) {
  SKIP_WITHOUT_GPU();
  Graph cx;
  Tensor w = cx.named_tensor("w", {2048, 4096});  // 32 MiB
  w.set(std::vector<float>(2048 * 4096, 0.25f));
  Tensor x = cx.named_tensor("x", {Expr::var("n")});
  Tensor y = (w.sum({1}) * x.sum({0})).retrieve();
  cx.compile(cuda());
  {
    const testing::ScopedEnv limit("LUMINAL_CUDA_MEMORY_LIMIT", "16M");
    testing::expect_error([&] { cx.prepare(Bindings{}); }, {"need 32 MiB on GPU 0"});
  }
  cx.prepare(Bindings{});
  // Uploaded: a run under that limit has nothing large left to upload.
  const testing::ScopedEnv limit("LUMINAL_CUDA_MEMORY_LIMIT", "16M");
  cx.set_dim("n", 3);
  x.set(std::vector<float>{1, 2, 3});
  cx.execute();
  EXPECT_EQ(y.to_f32()[0], 4096 * 0.25f * 6);  // each row of w sums to 1024
}

// A cache kept on the device and donated back every step grows in its own memory: the
// rows are appended where the last step left room, and it moves only when it doubles.
// The new rows are computed, then read position-major through a permutation (copied in),
// or computed position-major (their kernel writes them straight into the cache).
class CudaDonatedCache : public ::testing::TestWithParam<bool> {};
TEST_P(CudaDonatedCache, GrowsInPlace) {
  SKIP_WITHOUT_GPU();
  const bool written_in_place = GetParam();
  Graph cx;
  Tensor cache = cx.named_tensor("cache", {Expr::var("past"), 2, 8});
  Tensor rows = cx.named_tensor("rows", {2, Expr::var("seq"), 8});
  Tensor grown = append_rows(cache, written_in_place ? rows.permute({1, 0, 2}) * 2.0
                                                     : (rows * 2.0).permute({1, 0, 2}))
                     .keep_on_device();
  cx.donate(cache.id());
  cx.compile(cuda());
  cache.set_device(to_cuda(Buffer(DType::F32, 0)));
  std::vector<float> expected;  // [past, 2, 8]
  const void* last = nullptr;
  int moves = 0, past = 0, replayed = 0;
  bool moved_before = true;
  for (int step = 0; step < 20; ++step) {
    // (More than one row: one row's permuted view is dense, copied by a memcpy instead of
    // a kernel, which would be other work for the step's CUDA graph.)
    const int seq = step % 2 + 2;
    cx.set_dim("past", past);
    cx.set_dim("seq", seq);
    std::vector<float> r(static_cast<size_t>(2 * seq * 8));
    for (size_t i = 0; i < r.size(); ++i) r[i] = static_cast<float>(step * 100 + i);
    rows.set(r);
    cx.execute();
    EXPECT_EQ(cache.device_data(), nullptr) << "the donated cache was not taken";
    for (int t = 0; t < seq; ++t)
      for (int h = 0; h < 2; ++h)
        for (int e = 0; e < 8; ++e)
          expected.push_back(2.0f * r[static_cast<size_t>((h * seq + t) * 8 + e)]);
    past += seq;
    std::optional<DeviceData> d = cx.take_device_data(grown.id());
    ASSERT_TRUE(d) << step;
    EXPECT_EQ(d->to_host().to_f32(), expected) << step;
    // A step that moves the cache waits for the copy, and its kernels are launched one by
    // one. Two steps in a row that do not are recorded whole: the first's work is new and
    // launched kernel by kernel, the second is one CUDA graph launch, as is every such
    // step after.
    const bool moved = d->data() != last;
    if (!moved && !moved_before && step > 1 && graphs_on()) {
      EXPECT_TRUE(cx.last_run_stats().replayed) << step;
      ++replayed;
    }
    moves += moved;
    moved_before = moved;
    last = d->data();
    cache.set_device(std::move(*d));
  }
  EXPECT_LE(moves, 7) << "the cache moved at most every time it doubled";
  if (graphs_on()) {
    EXPECT_GE(replayed, 8);
  }
  EXPECT_EQ(cx.last_run_stats().host_fallbacks, 0u);
  // The rows' kernel, then the append's copy unless the rows were written in place.
  EXPECT_EQ(cx.last_run_stats().launches, written_in_place ? 1u : 2u);
}
INSTANTIATE_TEST_SUITE_P(Rows, CudaDonatedCache, ::testing::Bool(), [](const auto& info) {
  return std::string(info.param ? "WrittenInPlace" : "CopiedIn");
});

// A map group (testing/map_groups.hpp) against the reference interpreter as its row
// count changes (one row: the big member takes more blocks than it is dealt, and its loop
// goes round), and the launches it saves (LUMINAL_CUDA_MAP_GROUPS=0 makes none).
TEST(Cuda, IndependentElementwiseKernelsRunAsOneLaunch) {
  SKIP_WITHOUT_GPU();
  std::map<std::string, std::vector<size_t>> launches;
  for (const char* groups : {"1", "0"}) {
    testing::ScopedEnv env("LUMINAL_CUDA_MAP_GROUPS", groups);
    Graph cx;
    std::mt19937 rng(9);
    const testing::IndependentMaps m = testing::independent_maps(cx, 270000, rng);
    for (const int64_t rows : {3, 1, 2}) {
      cx.set_dim("rows", rows);
      Tensor x = m.x;
      x.set(testing::sixty_fourths(rng, static_cast<size_t>(rows * 64)));
      const auto want = testing::run_outputs(cx, reference(), m.outputs);
      const auto got = testing::run_outputs(cx, cuda(), m.outputs);
      for (size_t i = 0; i < got.size(); ++i) {
        ASSERT_EQ(got[i].size(), want[i].size());
        for (size_t e = 0; e < got[i].size(); ++e)
          ASSERT_NEAR(got[i][e], want[i][e], 2e-3 * (1 + std::fabs(want[i][e])))
              << "groups " << groups << ", rows " << rows << ", output " << i << ", element " << e;
      }
      launches[groups].push_back(cx.last_run_stats().launches);
    }
  }
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(launches["1"][i] + 2, launches["0"][i]) << i;
}

TEST(Cuda, AnOutOfRangeGatherIndexIsAnError) {
  SKIP_WITHOUT_GPU();
  Graph cx;
  Tensor table = cx.named_tensor("table", {4, 3});
  Tensor ids = cx.named_tensor("ids", {2}, DType::I32);
  table.set(std::vector<float>(12, 1.0f));
  ids.set(std::vector<int32_t>{1, 20});
  table.gather(ids).retrieve();
  cx.compile(cuda());
  testing::expect_error([&] { cx.execute(); },
                        {"Gather", "index 20 at position 1", "out of range"});
  // The next runs start clean, and fail again where their own indices are out of range.
  ids.set(std::vector<int32_t>{3, 0});
  cx.execute();
  ids.set(std::vector<int32_t>{-1, 2});
  testing::expect_error([&] { cx.execute(); },
                        {"Gather", "index -1 at position 0", "out of range"});
  // ... also as the second kernel of a map group, which reports it in its own slot.
  Graph cg;
  Tensor table2 = cg.named_tensor("table", {4, 3});
  Tensor ids2 = cg.named_tensor("ids", {2}, DType::I32);
  table2.set(std::vector<float>(12, 1.0f));
  ids2.set(std::vector<int32_t>{1, 20});
  (table2 * 2.0).retrieve();
  table2.gather(ids2).retrieve();
  cg.compile(cuda());
  testing::expect_error([&] { cg.execute(); },
                        {"Gather", "index 20 at position 1", "out of range"});
}

}  // namespace
}  // namespace luminal

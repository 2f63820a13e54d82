// Block-stored weights (ggml formats) on the CPU backend, against the reference
// interpreter, which decodes them with luminal::dequantize and computes in double:
//  - x W^T is selected as QMatMul and agrees within the error bound of 8-bit activations
//    (derived per output from the data, not fitted);
//  - any other read of a block-stored input (a gather, an elementwise op) decodes the
//    element in the generated kernel and agrees to float rounding;
//  - misuse is reported naming the input.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "luminal/compiler/matmul_op.hpp"
#include "luminal/compiler/optimize.hpp"
#include "luminal/luminal.hpp"
#include "testing/expert_cases.hpp"
#include "testing/quant_blocks.hpp"

namespace luminal {
namespace {

struct FormatCase {
  uint32_t type;
  const char* name;
};

const FormatCase kFormats[] = {{0, "F32"},   {1, "F16"},   {30, "BF16"}, {2, "Q4_0"},
                               {3, "Q4_1"},  {6, "Q5_0"},  {7, "Q5_1"},  {8, "Q8_0"},
                               {12, "Q4_K"}, {13, "Q5_K"}, {14, "Q6_K"}};

std::vector<float> random_floats(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> d(0, 1);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

size_t count_qmatmul(const Graph& g) {
  const compiler::Optimized opt = compiler::optimize(g);
  size_t n = 0;
  for (uint32_t i = 0; i < opt.graph->num_nodes(); ++i) {
    const Node& node = opt.graph->node(NodeId{i});
    n += node.op == Op::Custom && dynamic_cast<const compiler::QMatMulOp*>(node.custom.get());
  }
  return n;
}

// Each of got = x W^T ([rows, n]) against want: within the error that quantising x
// (rows of k values) to 8 bits per 32-block can cause, given the decoded weights wd.
void expect_within_activation_bound(const char* name, const std::vector<float>& xv, int64_t rows,
                                    int64_t k, const std::vector<float>& wd, int64_t n,
                                    bool quantised_activations, const std::vector<float>& got,
                                    const std::vector<double>& want) {
  ASSERT_EQ(got.size(), want.size()) << name;
  ASSERT_EQ(got.size(), static_cast<size_t>(rows * n)) << name;
  for (int64_t row = 0; row < rows; ++row) {
    // Rounding each 32-block of x to int8 moves an element by at most half a step,
    // amax / 127 / 2; float accumulation adds a relative 1e-5 of sum |w x|.
    std::vector<double> step(static_cast<size_t>(k / 32), 0);
    for (int64_t c = 0; c < k; ++c) {
      const double a = std::fabs(xv[static_cast<size_t>(row * k + c)]);
      double& s = step[static_cast<size_t>(c / 32)];
      s = std::max(s, a / 127.0);
    }
    for (int64_t j = 0; j < n; ++j) {
      double bound = 0, magnitude = 0;
      for (int64_t c = 0; c < k; ++c) {
        const double wj = std::fabs(wd[static_cast<size_t>(j * k + c)]);
        if (quantised_activations) bound += wj * step[static_cast<size_t>(c / 32)] / 2;
        magnitude += wj * std::fabs(xv[static_cast<size_t>(row * k + c)]);
      }
      bound += 1e-5 * magnitude + 1e-6;
      const size_t at = static_cast<size_t>(row * n + j);
      ASSERT_NEAR(got[at], want[at], bound) << name << " row " << row << " col " << j;
    }
  }
}

// y = x W^T for x [batch, m, k]: QMatMul is selected, and each output is within the
// error that quantising x to 8 bits can cause. A multiple of 8 for n lets the CPU
// interleave the weight rows (qinterleaved.hpp); 37 keeps the row-at-a-time kernels.
void check_matmul(const FormatCase& f, int64_t m, int64_t n = 37, int64_t batch = 2) {
  const int64_t k = 512;
  Graph cx;
  Tensor x = cx.named_tensor("x", {batch, m, k});
  Tensor w = cx.named_tensor("w", {n, k});
  Tensor y = x.matmul(w.transpose(0, 1)).retrieve();
  const std::vector<float> xv = random_floats(static_cast<size_t>(batch * m * k), 7 + m);
  x.set(xv);
  w.set_quantized(f.type, testing::random_blocks(f.type, n, k, 11));
  EXPECT_EQ(count_qmatmul(cx), 1u) << f.name;

  cx.compile(reference());
  cx.execute();
  const std::vector<double> want = y.data().to_f64();
  const std::vector<float> wd = w.to_f32();  // the decoded weights
  cx.compile(cpu());
  cx.execute();
  size_t block_elems = 0, block_bytes = 0;
  ggml_block_layout(f.type, block_elems, block_bytes);
  const std::string name = std::string(f.name) + " m=" + std::to_string(m);
  expect_within_activation_bound(name.c_str(), xv, batch * m, k, wd, n, block_elems > 1, y.to_f32(),
                                 want);
}

class QuantizedFormat : public ::testing::TestWithParam<FormatCase> {};

TEST_P(QuantizedFormat, MatmulIsSelectedAndWithinTheActivationQuantisationBound) {
  // 6: a tile of four + two (12 rows); 20: 40 rows, decoded panels through sgemm.
  for (const int64_t m : {1, 3, 6, 20}) check_matmul(GetParam(), m);
}

TEST_P(QuantizedFormat, InterleavedWeightRowsAgreeForEveryActivationTile) {
  // Where the CPU has AVX-512 the kernels run twice: as they are (two groups of eight
  // weight rows per pass) and held to AVX2 (one group). Elsewhere both are AVX2.
  for (const char* simd : {"", "avx2"}) {
    setenv("LUMINAL_CPU_SIMD", simd, 1);
    // 1 to 6 activation rows: passes of 1, 2, 3 and 4 rows over each group of weights;
    // 40 weight rows are five groups (an odd one out under AVX-512), 48 six.
    for (const int64_t m : {1, 2, 3, 5, 6}) check_matmul(GetParam(), m, 40, 1);
    check_matmul(GetParam(), 3, 48, 1);
    check_matmul(GetParam(), 2, 256, 1);  // over 64 KiB of weights: split across threads
    check_matmul(GetParam(), 20, 40);     // 40 rows: prompt-sized
  }
  unsetenv("LUMINAL_CPU_SIMD");
}

TEST_P(QuantizedFormat, PortableKernelsAgreeToo) {
  setenv("LUMINAL_CPU_SIMD", "off", 1);
  check_matmul(GetParam(), 1);
  check_matmul(GetParam(), 6);
  unsetenv("LUMINAL_CPU_SIMD");
}

TEST_P(QuantizedFormat, GatherAndElementwiseReadsDecodeInTheKernel) {
  const FormatCase f = GetParam();
  const int64_t rows = 9, cols = 256;
  Graph cx;
  Tensor table = cx.named_tensor("table", {rows, cols});
  Tensor ids = cx.named_tensor("ids", {4}, DType::I32);
  Tensor picked = table.index_select(0, ids).retrieve();
  Tensor scaled = (table.slice(1, 32, 96) * 2.0 + 1.0).retrieve();
  table.set_quantized(f.type, testing::random_blocks(f.type, rows, cols, 3));
  ids.set(std::vector<int32_t>{8, 0, 3, 3});
  EXPECT_EQ(count_qmatmul(cx), 0u);
  cx.compile(reference());
  cx.execute();
  const std::vector<float> want_picked = picked.to_f32(), want_scaled = scaled.to_f32();
  // The reference sees exactly luminal::dequantize's values.
  const std::vector<float> decoded = table.to_f32();
  for (size_t i = 0; i < static_cast<size_t>(cols); ++i)
    ASSERT_EQ(want_picked[i], decoded[8 * static_cast<size_t>(cols) + i]);
  cx.compile(cpu());
  cx.execute();
  const std::vector<float> got_picked = picked.to_f32(), got_scaled = scaled.to_f32();
  for (size_t i = 0; i < got_picked.size(); ++i)
    ASSERT_NEAR(got_picked[i], want_picked[i], 1e-6 * std::fabs(want_picked[i]))
        << f.name << " " << i;
  for (size_t i = 0; i < got_scaled.size(); ++i)
    ASSERT_NEAR(got_scaled[i], want_scaled[i], 1e-6 * std::fabs(want_scaled[i]) + 1e-7)
        << f.name << " " << i;
}

INSTANTIATE_TEST_SUITE_P(Formats, QuantizedFormat, ::testing::ValuesIn(kFormats),
                         [](const auto& info) { return std::string(info.param.name); });

// A mixture's expert products (expert_matmul) read only the chosen experts: against brute
// force on the reference interpreter and the CPU backend, the unchosen experts NaN.
TEST(Quantized, ExpertProductsReadOnlyTheChosenExperts) {
  for (const testing::ExpertCase& c : testing::expert_cases()) {
    testing::check_expert_products(c, reference());
    testing::check_expert_products(c, cpu());
    if (HasFailure()) return;
  }
}

TEST(Quantized, ExpertProductsRefuseOperandsThatDoNotFit) {
  Graph cx;
  Tensor x = cx.named_tensor("x", {3, 1, 64});
  Tensor w = cx.named_tensor("w", {4, 8, 64});
  Tensor ids = cx.named_tensor("ids", {3, 2}, DType::I32);
  EXPECT_THROW(expert_matmul(x, cx.named_tensor("w2", {4, 8, 32}), ids), Error);
  EXPECT_THROW(expert_matmul(x, w, cx.named_tensor("i2", {2, 2}, DType::I32)), Error);
  EXPECT_THROW(expert_matmul(x, w, cx.named_tensor("f", {3, 2})), Error);
  EXPECT_THROW(expert_matmul(cx.named_tensor("x3", {3, 3, 64}), w, ids), Error);
  // An id past the experts is an error naming it, not a read out of bounds.
  Tensor y = expert_matmul(x, w, ids).retrieve();
  x.set(std::vector<float>(3 * 64, 1.0f));
  w.set(std::vector<float>(4 * 8 * 64, 1.0f));
  ids.set(std::vector<int32_t>{0, 1, 2, 3, 4, 0});
  for (const bool on_cpu : {false, true}) {
    if (on_cpu) {
      cx.compile(cpu());
    } else {
      cx.compile(reference());
    }
    try {
      cx.execute();
      ADD_FAILURE() << "an expert id of 4 of 4 experts ran";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("expert id 4 of 4"), std::string::npos) << e.what();
    }
  }
}

// The CPU keeps its interleaved copy of a weight across runs; new data for the input
// must replace it.
TEST(Quantized, NewWeightDataIsUsedByTheNextRun) {
  const int64_t n = 16, k = 256;
  Graph cx;
  Tensor x = cx.named_tensor("x", {1, k});
  Tensor w = cx.named_tensor("w", {n, k});
  Tensor y = x.matmul(w.transpose(0, 1)).retrieve();
  x.set(random_floats(static_cast<size_t>(k), 5));
  std::vector<std::vector<float>> want, got;
  for (const uint64_t seed : {1, 2}) {
    w.set_quantized(12, testing::random_blocks(12, n, k, seed));  // Q4_K
    cx.compile(reference());
    cx.execute();
    want.push_back(y.to_f32());
  }
  cx.compile(cpu());
  for (const uint64_t seed : {1, 2}) {
    w.set_quantized(12, testing::random_blocks(12, n, k, seed));
    cx.execute();
    got.push_back(y.to_f32());
  }
  for (size_t run = 0; run < 2; ++run) {
    double scale = 0;
    for (float v : want[run]) scale = std::max(scale, static_cast<double>(std::fabs(v)));
    for (size_t j = 0; j < static_cast<size_t>(n); ++j)
      ASSERT_NEAR(got[run][j], want[run][j], 0.02 * scale) << "run " << run << " col " << j;
  }
}

// Products of the same activations (a layer's query, key and value projections) run on
// the CPU as one, over all their weights with one thread team; each output must still be
// its own product, whatever the mix of formats and sizes. A product of other rows of the
// same input stays apart.
TEST(Quantized, ProductsOfTheSameActivationsRunAsOneAndEachAgrees) {
  const int64_t k = 512;
  struct Part {
    uint32_t type;
    int64_t n;
  };
  // Q5_0, Q8_0 (over 64 KiB alone: the team splits it), Q4_K, Q6_K.
  const Part parts[] = {{6, 64}, {8, 256}, {12, 40}, {14, 48}};
  for (const int64_t m : {1, 3, 6}) {
    Graph cx;
    Tensor x = cx.named_tensor("x", {m, k});
    std::vector<Tensor> ws, ys;
    for (size_t i = 0; i < std::size(parts); ++i) {
      ws.push_back(cx.named_tensor("w" + std::to_string(i), {parts[i].n, k}));
      ys.push_back(x.matmul(ws.back().transpose(0, 1)).retrieve());
    }
    const int64_t skip = m > 1 ? 1 : 0;  // m = 1: the same product (merged with the first)
    Tensor other = x.slice(0, skip, m).matmul(ws[0].transpose(0, 1)).retrieve();
    const std::vector<float> xv = random_floats(static_cast<size_t>(m * k), 40 + m);
    x.set(xv);
    for (size_t i = 0; i < std::size(parts); ++i)
      ws[i].set_quantized(parts[i].type,
                          testing::random_blocks(parts[i].type, parts[i].n, k, 50 + i));
    EXPECT_EQ(count_qmatmul(cx), std::size(parts) + static_cast<size_t>(skip));

    cx.compile(reference());
    cx.execute();
    std::vector<std::vector<double>> want;
    for (const Tensor& y : ys) want.push_back(y.data().to_f64());
    const std::vector<double> want_other = other.data().to_f64();
    cx.compile(cpu());
    cx.execute();
    for (size_t i = 0; i < std::size(parts); ++i) {
      const std::string name = "product " + std::to_string(i) + " m=" + std::to_string(m);
      expect_within_activation_bound(name.c_str(), xv, m, k, ws[i].to_f32(), parts[i].n, true,
                                     ys[i].to_f32(), want[i]);
    }
    const std::vector<float> rest(xv.begin() + skip * k, xv.end());
    expect_within_activation_bound("other rows", rest, m - skip, k, ws[0].to_f32(), parts[0].n,
                                   true, other.to_f32(), want_other);
  }
}

// With residual activations the int8 rounding error is multiplied too: products of one
// activation (a single product) and of shared activations (a joined pair) land far closer
// to the exact product than plain int8 activations do, on every layout the decode uses.
TEST(Quantized, ResidualActivationsCarryTheRoundingError) {
  const int64_t k = 512;
  for (const uint32_t type : {8u, 12u, 14u}) {  // Q8_0, Q4_K, Q6_K
    for (const int64_t m : {1, 5}) {
      Graph cx;
      Tensor x = cx.named_tensor("x", {m, k});
      Tensor w1 = cx.named_tensor("w1", {64, k}), w2 = cx.named_tensor("w2", {48, k});
      Tensor y1 = x.matmul(w1.transpose(0, 1)).retrieve(),
             y2 = x.matmul(w2.transpose(0, 1)).retrieve();
      x.set(random_floats(static_cast<size_t>(m * k), 70 + m));
      w1.set_quantized(type, testing::random_blocks(type, 64, k, 71));
      w2.set_quantized(type, testing::random_blocks(type, 48, k, 72));
      cx.compile(reference());
      cx.execute();
      const std::vector<double> want1 = y1.data().to_f64(), want2 = y2.data().to_f64();
      const auto worst = [&](const Tensor& y, const std::vector<double>& want) {
        const std::vector<float> got = y.to_f32();
        double err = 0, scale = 0;
        for (size_t i = 0; i < got.size(); ++i) {
          err = std::max(err, std::fabs(got[i] - want[i]));
          scale = std::max(scale, std::fabs(want[i]));
        }
        return err / scale;
      };
      cx.compile(cpu({.residual = CpuOptions::Residual::none}));
      cx.execute();
      const double plain = std::max(worst(y1, want1), worst(y2, want2));
      cx.compile(cpu({.residual = CpuOptions::Residual::all}));
      cx.execute();
      const double residual = std::max(worst(y1, want1), worst(y2, want2));
      const std::string what = "type " + std::to_string(type) + " m=" + std::to_string(m);
      EXPECT_LT(residual, plain / 20) << what << ": " << residual << " vs " << plain;
      EXPECT_LT(residual, 1e-4) << what;
    }
  }
}

TEST(Quantized, MisuseIsReportedNamingTheInput) {
  Graph cx;
  Tensor w = cx.named_tensor("w", {4, 48});
  Tensor x = cx.named_tensor("x", {1, 48});
  // 48 is not a whole number of 32-element blocks.
  EXPECT_THROW(
      {
        try {
          w.set_quantized(8, Buffer(DType::U8, 4 * 2 * 34));
        } catch (const Error& e) {
          EXPECT_NE(std::string(e.what()).find("'w'"), std::string::npos) << e.what();
          throw;
        }
      },
      Error);
  EXPECT_EQ(cx.node(w.id()).quant, kPlainStorage) << "a refused format leaves the input as it was";
  Graph g2;
  Tensor w2 = g2.named_tensor("w2", {4, 64});
  Tensor x2 = g2.named_tensor("x", {1, 64});
  Tensor y = x2.matmul(w2.transpose(0, 1)).retrieve();
  EXPECT_THROW(w2.set_quantized(8, Buffer(DType::F32, 8)), Error);  // not raw bytes
  w2.set_quantized(8, Buffer(DType::U8, 3 * 34));                   // too few blocks
  x2.set(std::vector<float>(64, 1.0f));
  g2.compile(cpu());
  try {
    g2.execute();
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'w2'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("272 bytes"), std::string::npos) << e.what();
  }
  EXPECT_THROW(w2.set(std::vector<float>(256, 0.0f)), Error);  // stored as Q8_0 now
  EXPECT_THROW(g2.tensor_of(y.id()).set_quantized(8, Buffer(DType::U8, 34)),
               Error);  // not an input
  (void)x;
}

}  // namespace
}  // namespace luminal

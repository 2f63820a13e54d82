// The CUDA backend on a GPU (ctest label gpu; every test skips where none exists):
// random graphs of primitives against the reference interpreter, products through
// cuBLASLt, dims changing without a recompile, kernel-recorded errors, and the clear
// error where no GPU can be used.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "luminal/luminal.hpp"
#include "testing/expect_error.hpp"
#include "testing/random_graph.hpp"

namespace luminal {
namespace {

#define SKIP_WITHOUT_GPU()                                          \
  do {                                                              \
    std::string why;                                                \
    if (!cuda_available(&why)) GTEST_SKIP() << "no GPU here: " << why; \
  } while (0)

std::vector<float> random_floats(std::mt19937& rng, size_t n) {
  std::vector<float> v(n);
  for (float& x : v) x = std::uniform_real_distribution<float>(-1.0f, 1.0f)(rng);
  return v;
}

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

// Products of every operand layout the MatMul kernel sees (transposed, batched,
// broadcast over the batch), in f32, f16 and bf16, against the reference.
TEST(Cuda, MatMulsMatchTheReference) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(7);
  for (DType t : {DType::F32, DType::F16, DType::BF16}) {
    Graph cx;
    Tensor a = cx.named_tensor("a", {3, 33, 70});
    Tensor b = cx.named_tensor("b", {3, 70, 45});
    Tensor w = cx.named_tensor("w", {45, 70});
    a.set(random_floats(rng, 3 * 33 * 70));
    b.set(random_floats(rng, 3 * 70 * 45));
    w.set(random_floats(rng, 45 * 70));
    const Tensor ac = a.cast(t), bc = b.cast(t), wc = w.cast(t);
    std::vector<Tensor> outs = {
        ac.matmul(bc).cast(DType::F32).retrieve(),                  // batched
        ac.matmul(wc.permute({1, 0})).cast(DType::F32).retrieve(),  // x W^T, W shared
        bc.permute({0, 2, 1}).matmul(ac.permute({0, 2, 1})).cast(DType::F32).retrieve(),
    };
    cx.compile(reference());
    cx.execute();
    std::vector<std::vector<float>> want;
    for (const Tensor& o : outs) want.push_back(o.to_f32());
    cx.compile(cuda());
    cx.execute();
    const double tol = t == DType::F32 ? 1e-4 : t == DType::F16 ? 2e-2 : 6e-2;
    for (size_t i = 0; i < outs.size(); ++i) {
      const auto got = outs[i].to_f32();
      ASSERT_EQ(got.size(), want[i].size());
      for (size_t k = 0; k < got.size(); ++k)
        ASSERT_NEAR(got[k], want[i][k], tol * (1 + std::fabs(want[i][k])))
            << dtype_name(t) << " product " << i << " element " << k;
    }
  }
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

TEST(Cuda, AnOutOfRangeGatherIndexIsAnError) {
  SKIP_WITHOUT_GPU();
  Graph cx;
  Tensor table = cx.named_tensor("table", {4, 3});
  Tensor ids = cx.named_tensor("ids", {2}, DType::I32);
  table.set(std::vector<float>(12, 1.0f));
  ids.set(std::vector<int32_t>{1, 20});
  table.gather(ids).retrieve();
  cx.compile(cuda());
  testing::expect_error([&] { cx.execute(); }, {"Gather", "index 20 at position 1", "out of range"});
}

}  // namespace
}  // namespace luminal

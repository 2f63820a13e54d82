// Ranks on several GPUs: each test runs itself again as one process a GPU (launch_ranks),
// the way `luminal generate --tp` does, and checks every rank's results against host
// arithmetic. Skipped where fewer GPUs exist.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "luminal/luminal.hpp"
#include "luminal/ranks.hpp"
#include "testing/scoped_env.hpp"

namespace luminal {
namespace {

// In the test's process: runs the current test as `n` ranks, once with the exchanges'
// way `way` (LUMINAL_CUDA_ALL_REDUCE); 0 once every rank passed it.
int run_as_ranks(int n, const char* way) {
  testing::ScopedEnv all_reduce("LUMINAL_CUDA_ALL_REDUCE", way);
  // A rank runs this one test, whatever shard of the suite its launcher ran.
  testing::ScopedEnv shards("GTEST_TOTAL_SHARDS", nullptr), index("GTEST_SHARD_INDEX", nullptr);
  const ::testing::TestInfo* test = ::testing::UnitTest::GetInstance()->current_test_info();
  std::string self = "cuda_tests", filter = std::string("--gtest_filter=") +
                                            test->test_suite_name() + "." + test->name();
  char* argv[] = {self.data(), filter.data(), nullptr};
  return launch_ranks(n, argv);
}

// Rank r's value at i: multiples of 1/4 in [-4, 4], so a sum over up to eight ranks, and
// every partial sum on the way, is exact in bf16, f16 and f32.
float exact_value(int rank, int64_t i) {
  return static_cast<float>((i * 7 + rank * 13) % 33 - 16) * 0.25f;
}

std::vector<float> random_values(int rank, int64_t n, int run) {
  std::mt19937 rng(static_cast<unsigned>(1000 * run + rank));
  std::uniform_real_distribution<float> d(-3.0f, 3.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = d(rng);
  return v;
}

// GPUs 0, 1, ... that cuda() can run on, up to the 8 ranks peer memory connects.
int usable_gpus() {
  int n = 0;
  while (n < 8 && cuda_available(nullptr, n)) ++n;
  return n;
}

// As many ranks as GPUs: a two-rank sum is the same in any order, more ranks test that
// every rank adds in rank order over peer memory.
TEST(CudaRanks, AllReducesOverEveryGpuGiveHostSums) {
  std::string why;
  if (!cuda_available(&why, 1)) GTEST_SKIP() << "needs two GPUs: " << why;
  const std::optional<RankOf> me = this_rank();
  if (!me) {
    const int n = usable_gpus();
    EXPECT_EQ(run_as_ranks(n, "peers"), 0) << "over peer memory where it fits, " << n << " ranks";
    EXPECT_EQ(run_as_ranks(n, "nccl"), 0) << "every exchange through NCCL, " << n << " ranks";
    return;
  }
  const std::shared_ptr<Communicator> comm = join_ranks(*me);
  const int ranks = me->size;
  const char* way = std::getenv("LUMINAL_CUDA_ALL_REDUCE");
  const bool nccl_only = way && std::strcmp(way, "nccl") == 0;
  EXPECT_EQ(comm->transport().find("over peer memory") != std::string::npos, !nccl_only)
      << comm->transport();

  Graph cx;
  Tensor exact = cx.named_tensor("exact", {Expr::var("n")});
  Tensor noisy = cx.named_tensor("noisy", {Expr::var("n")});
  Tensor bf16 = all_reduce(exact.cast(DType::BF16), comm).retrieve();
  Tensor f16 = all_reduce(exact.cast(DType::F16), comm).retrieve();
  Tensor f32 = all_reduce(noisy * 1.0, comm).retrieve();
  // From the second element: not at a 16-byte boundary.
  Tensor offset = all_reduce(exact.slice(0, 1, Expr::var("n")), comm).retrieve();
  Tensor gathered = all_gather(noisy + 0.0, comm).retrieve();
  cx.compile(cuda(CudaOptions{.device = me->rank}));
  // 131072 f32 values are the most the peer path takes (512 KB), 131073 the fewest NCCL
  // does; the rest repeat sizes so runs replay their recorded graphs.
  const std::vector<int64_t> sizes = {4096, 4096, 37, 4096, 8, 131072, 131073, 4096, 4096, 5};
  for (size_t run = 0; run < sizes.size(); ++run) {
    const int64_t n = sizes[run];
    std::vector<float> mine(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) mine[static_cast<size_t>(i)] = exact_value(me->rank, i);
    cx.set_dim("n", n);
    exact.set(mine);
    noisy.set(random_values(me->rank, n, static_cast<int>(run)));
    cx.execute();
    EXPECT_EQ(cx.last_run_stats().host_fallbacks, 0u) << "run " << run;
    const std::vector<float> got_bf16 = bf16.to_f32(), got_f16 = f16.to_f32(),
                             got_f32 = f32.to_f32(), got_offset = offset.to_f32(),
                             got_gathered = gathered.to_f32();
    std::vector<std::vector<float>> noise;
    for (int r = 0; r < ranks; ++r) noise.push_back(random_values(r, n, static_cast<int>(run)));
    ASSERT_EQ(got_f32.size(), static_cast<size_t>(n));
    ASSERT_EQ(got_gathered.size(), static_cast<size_t>(ranks * n));
    // The peer path, and NCCL at sizes it takes, sum f32 in rank order; NCCL's own order
    // over more than two ranks is its ring's.
    const bool rank_order = !nccl_only && n <= 131072;
    for (int64_t i = 0; i < n; ++i) {
      const size_t k = static_cast<size_t>(i);
      float sum = 0, next = 0, noisy_sum = 0;
      for (int r = 0; r < ranks; ++r) {
        sum += exact_value(r, i);
        next += exact_value(r, i + 1);
        noisy_sum += noise[static_cast<size_t>(r)][k];
        ASSERT_EQ(got_gathered[k + static_cast<size_t>(r * n)], noise[static_cast<size_t>(r)][k])
            << "gathered from rank " << r << ", run " << run << ", element " << i;
      }
      ASSERT_EQ(got_bf16[k], sum) << "bf16, run " << run << " of " << n << ", element " << i;
      ASSERT_EQ(got_f16[k], sum) << "f16, run " << run << ", element " << i;
      if (rank_order || ranks == 2) {
        ASSERT_EQ(got_f32[k], noisy_sum) << "f32, run " << run << ", element " << i;
      } else {
        ASSERT_NEAR(got_f32[k], noisy_sum, 1e-5f) << "f32, run " << run << ", element " << i;
      }
      if (i + 1 < n) {
        ASSERT_EQ(got_offset[k], next) << "offset, run " << run << ", element " << i;
      }
    }
  }
}

}  // namespace
}  // namespace luminal

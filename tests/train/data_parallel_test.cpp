// train::average_over_ranks: how values are packed into buckets (one exchange each), the
// averages against the ranks' values, and bad input. Training with it against PyTorch's
// losses is in gpt_training_test.cpp.
#include <gtest/gtest.h>

#include <thread>

#include "luminal/luminal.hpp"
#include "luminal/train/data_parallel.hpp"
#include "testing/expect_error.hpp"

namespace luminal {
namespace {

size_t buckets_in(const Graph& g) {
  size_t n = 0;
  for (uint32_t i = 0; i < g.num_nodes(); ++i) {
    const Node& node = g.node(NodeId{i});
    n += node.op == Op::Custom && node.custom->name() == "BucketAllReduce";
  }
  return n;
}

// Three f32 values of 400, 400 and 1200 bytes and a bf16 one, in buckets of 1000 bytes:
// the first two share one, the large one goes alone, the bf16 one has its own; each
// rank's averages are the mean of the ranks' values.
TEST(DataParallel, ValuesShareBucketsBySizeAndDtypeAndComeBackAveraged) {
  constexpr int kRanks = 3;
  std::vector<std::shared_ptr<Communicator>> group = local_group(kRanks);
  const auto value = [](int rank, size_t i) { return static_cast<float>(rank * 10 + i % 7); };
  std::vector<std::vector<std::vector<float>>> got(kRanks);
  std::vector<size_t> buckets(kRanks);
  std::vector<std::thread> threads;
  for (int r = 0; r < kRanks; ++r)
    threads.emplace_back([&, r] {
      Graph g;
      std::vector<Tensor> values = {g.named_tensor("a", {10, 10}), g.named_tensor("b", {100}),
                                    g.named_tensor("c", {3, 100}),
                                    g.named_tensor("d", {8}, DType::BF16)};
      for (Tensor& v : values) {
        std::vector<float> xs(static_cast<size_t>(v.numel().eval()));
        for (size_t i = 0; i < xs.size(); ++i) xs[i] = value(r, i);
        v.set(xs);
      }
      std::vector<Tensor> averaged =
          train::average_over_ranks(values, group[static_cast<size_t>(r)], 1000);
      buckets[static_cast<size_t>(r)] = buckets_in(g);
      for (Tensor& a : averaged) a.retrieve();
      g.compile(cpu());
      g.execute();
      for (size_t i = 0; i < values.size(); ++i) {
        EXPECT_EQ(averaged[i].shape(), values[i].shape());
        EXPECT_EQ(averaged[i].dtype(), values[i].dtype());
        got[static_cast<size_t>(r)].push_back(averaged[i].to_f32());
      }
    });
  for (std::thread& t : threads) t.join();
  for (int r = 0; r < kRanks; ++r) {
    EXPECT_EQ(buckets[static_cast<size_t>(r)], 3u);
    for (const std::vector<float>& v : got[static_cast<size_t>(r)])
      for (size_t i = 0; i < v.size(); ++i)
        EXPECT_FLOAT_EQ(v[i], (value(0, i) + value(1, i) + value(2, i)) / kRanks) << i;
  }
}

TEST(DataParallel, BadInputIsRefusedByName) {
  std::vector<std::shared_ptr<Communicator>> one = local_group(1);
  Graph g, other;
  Tensor a = g.named_tensor("a", {4});
  testing::expect_error([&] { train::average_over_ranks({a}, nullptr); }, {"no communicator"});
  testing::expect_error(
      [&] {
        train::average_over_ranks({g.named_tensor("s", {"n"}), a}, one[0]);
      },
      {"symbolic size", "[n]"});
  testing::expect_error(
      [&] {
        train::average_over_ranks({a, other.named_tensor("b", {4})}, one[0]);
      },
      {"different graphs"});
  testing::expect_error(
      [&] {
        all_reduce_flat({a, g.named_tensor("h", {4}, DType::F16)}, one[0]);
      },
      {"share a graph and a dtype", "f16 after f32"});
}

}  // namespace
}  // namespace luminal

// Token sampling against a brute-force statement of its definition: sort every token by
// logit, keep the top k, softmax at the temperature, cut to the top-p nucleus. Draws
// must land only inside that set, with frequencies within sampling error of it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>
#include <random>

#include "luminal/models/sampling.hpp"
#include "models/sampling_cases.hpp"

namespace luminal::models {
namespace {

void check_distribution(const std::vector<float>& logits, const SamplingOptions& o) {
  const std::map<int32_t, double> want = brute_force(logits, o);
  constexpr int kDraws = 40000;
  std::map<int32_t, int> seen;
  uint64_t rng = 12345;
  for (int i = 0; i < kDraws; ++i) {
    const int32_t t = sample(logits, o, rng);
    ASSERT_TRUE(want.count(t)) << "token " << t << " is outside the top-k / top-p set";
    ++seen[t];
  }
  for (const auto& [t, p] : want) {
    const double sigma = std::sqrt(p * (1 - p) / kDraws);
    EXPECT_NEAR(seen[t] / static_cast<double>(kDraws), p, 5 * sigma + 1e-4)
        << "token " << t << " T=" << o.temperature << " k=" << o.top_k << " p=" << o.top_p;
  }
}

TEST(Sampling, GreedyIsTheArgmax) {
  const std::vector<float> logits = random_logits(1000, 1, 3);
  uint64_t rng = 0;
  EXPECT_EQ(sample(logits, {}, rng),
            std::max_element(logits.begin(), logits.end()) - logits.begin());
  EXPECT_EQ(sample(logits, {.temperature = 1.0, .top_k = 1}, rng),
            std::max_element(logits.begin(), logits.end()) - logits.begin());
}

TEST(Sampling, GreedyTakesTheFirstOfTiedMaximaAnywhere) {
  // Lengths around the argmax's blocks (256 values), the maximum placed in a block's middle,
  // at its edges and in the tail, with a tie after it and values quantised so that ties
  // between other values are common too.
  uint64_t rng = 0;
  for (size_t n : {1, 7, 63, 64, 65, 128, 200, 255, 256, 257, 1000}) {
    std::vector<float> logits = random_logits(n, n, 2);
    for (float& v : logits) v = std::round(v * 4) / 4;
    for (size_t at : {size_t{0}, n / 2, n - 1, std::min<size_t>(n - 1, 255)}) {
      std::vector<float> x = logits;
      x[at] = 100;
      if (at + 1 < n) x[n - 1] = 100;
      EXPECT_EQ(sample(x, {}, rng), std::max_element(x.begin(), x.end()) - x.begin())
          << "n=" << n << " max at " << at;
    }
    EXPECT_EQ(sample(logits, {}, rng),
              std::max_element(logits.begin(), logits.end()) - logits.begin())
        << "n=" << n;
  }
}

TEST(Sampling, GreedySkipsNaNs) {
  // NaNs before, beside and after the maximum, in its block and in others: the answer is
  // the largest of the other values.
  uint64_t rng = 0;
  for (size_t at : {size_t{0}, size_t{5}, size_t{300}, size_t{999}}) {
    std::vector<float> x = random_logits(1000, at + 1, 2);
    for (size_t i : {size_t{0}, size_t{1}, size_t{256}, size_t{301}, size_t{998}})
      if (i != at) x[i] = std::numeric_limits<float>::quiet_NaN();
    x[at] = 50;
    EXPECT_EQ(sample(x, {}, rng), static_cast<int32_t>(at)) << "max at " << at;
  }
}

TEST(Sampling, GreedyOverALargeVocabularySplitAcrossThreads) {
  // A vocabulary large enough that each thread scans a part: the maximum in either part,
  // tied across the split, NaNs in both, against a scan that skips NaNs.
  const size_t n = 300001;
  uint64_t rng = 0;
  std::vector<float> x = random_logits(n, 7, 3);
  for (size_t i = 3; i < n; i += 9973) x[i] = std::numeric_limits<float>::quiet_NaN();
  auto first_max = [&] {
    size_t best = 0;
    for (size_t i = 0; i < n; ++i)
      if (!std::isnan(x[i]) && (std::isnan(x[best]) || x[i] > x[best])) best = i;
    return static_cast<int32_t>(best);
  };
  for (size_t at : {size_t{250000}, size_t{150001}, size_t{20}}) {
    x[at] = 60;  // each a tie with the ones placed before, further on
    EXPECT_EQ(sample(x, {}, rng), first_max()) << "max at " << at;
  }
}

TEST(Sampling, DrawsFollowTheTruncatedSoftmax) {
  const std::vector<float> logits = random_logits(60, 2, 1.5f);
  check_distribution(logits, {.temperature = 1.0});
  check_distribution(logits, {.temperature = 0.7, .top_k = 10});
  check_distribution(logits, {.temperature = 0.7, .top_p = 0.9});
  check_distribution(logits, {.temperature = 1.3, .top_k = 40, .top_p = 0.95});
}

TEST(Sampling, ANucleusLargerThanTheFirstSortedPrefix) {
  // Nearly flat logits over 3000 tokens: the 0.9 nucleus needs most of them, so the
  // sorted prefix must grow several times.
  const std::vector<float> logits = random_logits(3000, 3, 0.05f);
  const std::map<int32_t, double> want = brute_force(logits, {.temperature = 1.0, .top_p = 0.9});
  ASSERT_GT(want.size(), 1000u);
  uint64_t rng = 7;
  for (int i = 0; i < 2000; ++i)
    ASSERT_TRUE(want.count(sample(logits, {.temperature = 1.0, .top_p = 0.9}, rng)));
}

// The draw as graph ops (DeviceSampler) on the reference interpreter; cuda_tests runs it
// on the GPU.
TEST(Sampling, TheDrawAsGraphOpsFollowsTheTruncatedSoftmax) {
  check_device_draw(reference(), 20000);
}

}  // namespace
}  // namespace luminal::models

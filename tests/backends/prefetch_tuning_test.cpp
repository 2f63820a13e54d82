// The prefetch-distance tuner (src/backends/cpu/prefetch_tuning.hpp): which products it
// times, which distance it keeps, and what it remembers between processes.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "backends/cpu/prefetch_tuning.hpp"
#include "luminal/error.hpp"
#include "runtime/search.hpp"
#include "testing/scoped_env.hpp"

namespace {

using luminal::cpugen::parse_prefetch_distance;
using luminal::cpugen::PrefetchTuner;

constexpr int64_t kBig = luminal::cpugen::kLongStreamBytes;
constexpr auto& kCandidates = PrefetchTuner::kCandidates;

// Runs one product per step as the kernels do: asks for a distance and reports `bytes`
// read at rate(distance) bytes per second.
template <class Rate>
void run_products(PrefetchTuner& t, int count, Rate&& rate) {
  for (int i = 0; i < count; ++i) {
    const PrefetchTuner::Choice c = t.choose(true);
    if (c.timed) t.report(c.distance, kBig, static_cast<double>(kBig) / rate(c.distance, i));
  }
}

TEST(PrefetchTuning, KeepsTheDistanceWithTheBestMedianRate) {
  PrefetchTuner t(3);
  const int trials = 3 * static_cast<int>(kCandidates.size());
  // 1024 is fastest in the median; 4096 has one outlier faster than anything else.
  auto rate = [](int64_t d, int i) {
    if (d == 1024) return 25e9;
    if (d == 4096 && i < static_cast<int>(kCandidates.size())) return 40e9;
    return 20e9;
  };
  run_products(t, trials - 1, rate);
  EXPECT_EQ(t.kept(), 0) << "kept before every candidate had its rounds";
  run_products(t, 1, rate);
  EXPECT_EQ(t.kept(), 1024);
  // Kept from now on, and no longer timed.
  const PrefetchTuner::Choice c = t.choose(true);
  EXPECT_EQ(c.distance, 1024);
  EXPECT_FALSE(c.timed);
  EXPECT_EQ(t.choose(false).distance, 1024);
}

TEST(PrefetchTuning, ProductsThatMayNotBeTimedWaitAtTheUntunedDistance) {
  PrefetchTuner t(1);
  const PrefetchTuner::Choice untimed = t.choose(false);
  EXPECT_FALSE(untimed.timed);
  EXPECT_EQ(untimed.distance, PrefetchTuner::kUntuned);
  const PrefetchTuner::Choice c = t.choose(true);
  EXPECT_TRUE(c.timed);
  EXPECT_EQ(c.distance, kCandidates[0]);
}

TEST(PrefetchTuning, ATrialGathersProductsUpToItsBytes) {
  // Trials of 10 bytes: the products of one trial count as one rate, their bytes over
  // their seconds, and the trial moves on once it has 10 bytes.
  PrefetchTuner t(1, 10);
  EXPECT_FALSE(t.report(kCandidates[0], 4, 1.0));
  EXPECT_EQ(t.choose(true).distance, kCandidates[0]);
  EXPECT_EQ(t.medians()[0], 0.0);
  EXPECT_FALSE(t.report(kCandidates[0], 8, 2.0));
  EXPECT_DOUBLE_EQ(t.medians()[0], 12.0 / 3.0);
  EXPECT_EQ(t.choose(true).distance, kCandidates[1]);
  // The largest gathered rate wins, however the products were sized.
  const double rates[] = {4.0, 1.0, 9.0, 2.0};
  for (size_t c = 1; c < kCandidates.size(); ++c) t.report(kCandidates[c], 10, 10.0 / rates[c - 1]);
  EXPECT_EQ(t.kept(), kCandidates[3]);
}

TEST(PrefetchTuning, IgnoresReportsAtADistanceNotOnTrial) {
  PrefetchTuner t(1);
  const PrefetchTuner::Choice first = t.choose(true);
  EXPECT_FALSE(t.report(kCandidates[1], kBig, 1.0));  // not on trial: ignored
  EXPECT_FALSE(t.report(first.distance, kBig, 0.0));  // no time measured: ignored
  EXPECT_EQ(t.medians()[0], 0.0);
  EXPECT_FALSE(t.report(first.distance, kBig, 1.0));
  EXPECT_EQ(t.medians()[0], static_cast<double>(kBig));
  EXPECT_EQ(t.choose(true).distance, kCandidates[1]);  // the trial moved on
}

// The kept distance is remembered in the search cache (one entry, under the key it was
// given), read back by the next tuner of that key and by no other, and an entry that does
// not read back whole is ignored.
TEST(PrefetchTuning, RemembersTheKeptDistanceInTheSearchCache) {
  const luminal::testing::ScopedCacheDir dir("prefetch-test");
  const std::string key =
      luminal::runtime::search_cache_key("a CPU", "cpu prefetch distance", PrefetchTuner::labels());
  {
    PrefetchTuner t(1, 0, 0, key);
    EXPECT_EQ(t.kept(), 0);
    run_products(t, static_cast<int>(kCandidates.size()),
                 [](int64_t d, int) { return d == 2048 ? 30e9 : 20e9; });
    EXPECT_EQ(t.kept(), 2048);
  }
  std::vector<std::filesystem::path> entries;
  for (const auto& e : std::filesystem::directory_iterator(dir.path())) entries.push_back(e);
  ASSERT_EQ(entries.size(), 1u);
  EXPECT_EQ(PrefetchTuner(1, 0, 0, key).kept(), 2048);
  const std::string other = luminal::runtime::search_cache_key(
      "another CPU", "cpu prefetch distance", PrefetchTuner::labels());
  EXPECT_EQ(PrefetchTuner(1, 0, 0, other).kept(), 0);
  // A fixed distance wins over the cache.
  EXPECT_EQ(PrefetchTuner(1, 0, 640, key).kept(), 640);
  // Cut short or garbage: not taken.
  for (const char* text : {"", "luminal-search 1\n", "2048\n"}) {
    std::ofstream(entries[0]) << text;
    EXPECT_EQ(PrefetchTuner(1, 0, 0, key).kept(), 0) << "an entry holding '" << text << "'";
  }
}

TEST(PrefetchTuning, FixedDistanceIsNeverTimed) {
  PrefetchTuner t(3, 0, 640);
  const PrefetchTuner::Choice c = t.choose(true);
  EXPECT_EQ(c.distance, 640);
  EXPECT_FALSE(c.timed);
}

TEST(PrefetchTuning, ParsesTheEnvironmentValue) {
  EXPECT_EQ(parse_prefetch_distance(nullptr), 0);
  EXPECT_EQ(parse_prefetch_distance(""), 0);
  EXPECT_EQ(parse_prefetch_distance("1024"), 1024);
  for (const char* bad : {"1000", "0", "-64", "1k", "131072"})
    EXPECT_THROW(parse_prefetch_distance(bad), luminal::Error) << bad;
}

}  // namespace

// The search engine: planted slow and wrong candidates, the budget, the on-disk cache
// (round trip, corrupt and stale entries) and the settings' parsing. Times are planted
// through the problem's timer, so the winner is known in advance.
#include "runtime/search.hpp"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <optional>
#include <thread>

#include "luminal/error.hpp"
#include "runtime/build_id.hpp"
#include "testing/scoped_env.hpp"

namespace luminal::runtime {
namespace {

namespace fs = std::filesystem;

// A kernel whose candidates each write their own value into one output; "wrong" writes
// another value than the reference, every other candidate the same.
struct Planted {
  std::map<std::string, double> seconds;  // each candidate's planted time a run
  std::map<std::string, int> runs;        // runs made of each
  int out = 0, kept = 0;

  SearchProblem problem(const std::string& signature) {
    SearchProblem p;
    p.signature = signature;
    for (const std::string label : {"pick", "slow", "wrong", "fast", "also-fast"}) {
      if (!seconds.count(label)) continue;
      p.candidates.push_back({label, [this, label] {
                                ++runs[label];
                                out = label == "wrong" ? 7 : 42;
                              }});
    }
    p.keep_reference = [this] { kept = out; };
    p.mismatch = [this] {
      return out == kept ? std::string()
                         : std::to_string(out) + " where the pick wrote " + std::to_string(kept);
    };
    p.time = [this](const SearchCandidate& c) {
      c.run();
      return seconds.at(c.label);
    };
    return p;
  }
};

// A fresh cache directory for the test, and LUMINAL_CACHE_DIR pointing at it.
class SearchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    cache_.emplace(std::string("search-test-") +
                   ::testing::UnitTest::GetInstance()->current_test_info()->name());
    dir_ = cache_->path();
  }
  void TearDown() override { cache_.reset(); }
  std::vector<fs::path> entries() const {
    std::vector<fs::path> out;
    for (const auto& e : fs::directory_iterator(dir_))
      if (e.path().filename().string().rfind("search-", 0) == 0) out.push_back(e.path());
    return out;
  }
  fs::path dir_;
  std::optional<luminal::testing::ScopedCacheDir> cache_;
};

SearchSettings fast(double budget = 10) {
  return {SearchMode::Fast, budget, true, ""};
}

TEST_F(SearchTest, PicksTheFastestCorrectCandidate) {
  Planted k;
  k.seconds = {{"pick", 2.0}, {"slow", 9.0}, {"wrong", 0.5}, {"fast", 1.0}};
  Searcher s("test device", fast());
  const SearchProblem p = k.problem("matmul 64x64x64 f32");
  const SearchResult r = s.choose(p);
  ASSERT_TRUE(r.searched);
  EXPECT_EQ(p.candidates[r.winner].label, "fast");
  std::map<std::string, std::string> verdict;
  for (const SearchTrial& t : r.trials) verdict[t.label] = t.verdict;
  EXPECT_EQ(verdict["pick"], "correct");
  EXPECT_EQ(verdict["fast"], "winner");
  EXPECT_EQ(verdict["slow"], "slow");
  EXPECT_EQ(verdict["wrong"].rfind("wrong: 7 where the pick wrote 42", 0), 0u) << verdict["wrong"];
  // The wrong one is checked once and never timed; the slow one stops after three runs
  // (its one checked run before them).
  EXPECT_EQ(k.runs["wrong"], 1);
  EXPECT_EQ(k.runs["slow"], 1 + 3);
  EXPECT_EQ(k.runs["fast"], 1 + 5);
  EXPECT_DOUBLE_EQ(r.trials[r.winner].median, 1.0);
}

// LUMINAL_SEARCH_PICK names a way to run: the first candidate whose label holds it wins
// without a run or a cache entry; a kernel without one searches as before.
TEST_F(SearchTest, APickedCandidateWinsUntimedAndUnremembered) {
  const luminal::testing::ScopedEnv pick("LUMINAL_SEARCH_PICK", "slo");
  Planted k;
  k.seconds = {{"pick", 2.0}, {"slow", 9.0}, {"fast", 1.0}};
  Searcher s("test device", search_settings_from_env());
  const SearchProblem p = k.problem("matmul 64x64x64 f32");
  const SearchResult r = s.choose(p);
  EXPECT_EQ(p.candidates[r.winner].label, "slow");
  EXPECT_FALSE(r.searched);
  EXPECT_TRUE(k.runs.empty());
  EXPECT_TRUE(entries().empty());
  Planted other;
  other.seconds = {{"pick", 2.0}, {"fast", 1.0}};
  const SearchProblem q = other.problem("matmul 32x32x32 f32");
  EXPECT_EQ(q.candidates[s.choose(q).winner].label, "fast");
}

// A pick that names a candidate whole takes it, before an earlier one whose label holds
// the pick ("3 blocks an SM" is not "3 blocks an SM, persistent").
TEST_F(SearchTest, APickNamingACandidateWholeTakesIt) {
  const luminal::testing::ScopedEnv pick("LUMINAL_SEARCH_PICK", "3 blocks an SM");
  SearchProblem p;
  p.signature = "attention";
  for (const char* label : {"3 blocks an SM, persistent", "3 blocks an SM", "2 blocks an SM"})
    p.candidates.push_back({label, [] {}});
  Searcher s("test device", search_settings_from_env());
  EXPECT_EQ(p.candidates[s.choose(p).winner].label, "3 blocks an SM");
}

// LUMINAL_DUMP=search writes every searched kernel to search.json, valid JSON read here
// by another parser: each candidate with its verdict, timed runs and median.
TEST_F(SearchTest, TheDumpListsEveryCandidateWithItsVerdictAndTimes) {
  const fs::path dump = dir_ / "dump";
  const luminal::testing::ScopedEnv what("LUMINAL_DUMP", "search");
  const luminal::testing::ScopedEnv where("LUMINAL_DUMP_DIR", dump.c_str());
  Planted k;
  k.seconds = {{"pick", 2.0}, {"slow", 9.0}, {"wrong", 0.5}, {"fast", 1.0}};
  Searcher s("test device", fast());
  s.choose(k.problem("matmul \"64\"\tx64"));  // a quote and a tab to escape
  s.choose(k.problem("matmul 32x32x32 f32"));
  std::ifstream in(dump / "search.json");
  const nlohmann::json j = nlohmann::json::parse(in);
  ASSERT_EQ(j.size(), 2u);
  EXPECT_EQ(j[0]["signature"], "matmul \"64\"\tx64");
  EXPECT_EQ(j[1]["signature"], "matmul 32x32x32 f32");
  const nlohmann::json& c = j[0]["candidates"];
  ASSERT_EQ(c.size(), 4u);
  EXPECT_EQ(c[0]["label"], "pick");
  EXPECT_EQ(c[0]["verdict"], "correct");
  EXPECT_EQ(c[1]["label"], "slow");
  EXPECT_EQ(c[1]["verdict"], "slow");
  EXPECT_EQ(c[1]["runs_s"].size(), 3u);
  EXPECT_EQ(c[2]["verdict"].get<std::string>().rfind("wrong: ", 0), 0u);
  EXPECT_TRUE(c[2]["runs_s"].empty());
  EXPECT_EQ(c[3]["label"], "fast");
  EXPECT_EQ(c[3]["verdict"], "winner");
  EXPECT_EQ(c[3]["runs_s"], nlohmann::json({1.0, 1.0, 1.0, 1.0, 1.0}));
  EXPECT_DOUBLE_EQ(c[3]["median_s"].get<double>(), 1.0);
}

// Several Searchers of one process (a program's extractions, its kernels' library calls)
// add to the one file, and a dump left by an earlier process is replaced.
TEST_F(SearchTest, EverySearcherOfAProcessAddsToTheDump) {
  const fs::path dump = dir_ / "dump-several";
  fs::create_directories(dump);
  std::ofstream(dump / "search.json") << "[{\"signature\": \"from an earlier run\"}]\n";
  const luminal::testing::ScopedEnv what("LUMINAL_DUMP", "search");
  const luminal::testing::ScopedEnv where("LUMINAL_DUMP_DIR", dump.c_str());
  Planted k;
  k.seconds = {{"pick", 2.0}, {"fast", 1.0}};
  Searcher programs("test device", fast()), kernels("test device", fast());
  programs.choose(k.problem("program 1"));
  kernels.choose(k.problem("window 1"));
  programs.choose(k.problem("program 2"));
  std::ifstream in(dump / "search.json");
  const nlohmann::json j = nlohmann::json::parse(in);
  ASSERT_EQ(j.size(), 3u);
  EXPECT_EQ(j[0]["signature"], "program 1");
  EXPECT_EQ(j[1]["signature"], "window 1");
  EXPECT_EQ(j[2]["signature"], "program 2");
  EXPECT_EQ(j[1]["candidates"][1]["verdict"], "winner");
}

TEST_F(SearchTest, TiesAndAWrongFastestKeepTheEarlierCorrectCandidate) {
  Planted k;
  k.seconds = {{"pick", 1.0}, {"wrong", 0.1}, {"also-fast", 1.0}};
  Searcher s("test device", fast());
  const SearchProblem p = k.problem("tie");
  for (int i = 0; i < 2; ++i) {  // the same verdicts every time (the second from the cache)
    const SearchResult r = s.choose(p);
    EXPECT_EQ(p.candidates[r.winner].label, "pick");
  }
}

// A reference measured faster before (the program search's last round) is timed by the
// smaller of that time and its median here: a candidate between the two loses; one
// faster than both wins.
TEST_F(SearchTest, AReferenceMeasuredFasterBeforeIsBeatenOnlyByAFasterCandidate) {
  Planted k;
  k.seconds = {{"pick", 3.0}, {"fast", 2.0}};
  Searcher s("test device", fast());
  SearchProblem p = k.problem("earlier rounds");
  p.reference_seconds = 1.5;
  EXPECT_EQ(p.candidates[s.choose(p).winner].label, "pick");
  k.seconds["fast"] = 1.0;
  p.signature = "earlier rounds, again";
  const SearchResult r = s.choose(p);
  EXPECT_EQ(p.candidates[r.winner].label, "fast");
  EXPECT_DOUBLE_EQ(r.trials[0].median, 3.0);  // (as measured, in the log and the dump)
}

TEST_F(SearchTest, OffRunsNothingAndAOneCandidateKernelIsNotTimed) {
  Planted k;
  k.seconds = {{"pick", 2.0}, {"fast", 1.0}};
  Searcher off("test device", {SearchMode::Off, 10, true, ""});
  EXPECT_EQ(off.choose(k.problem("off")).winner, 0u);
  EXPECT_TRUE(k.runs.empty());
  Planted one;
  one.seconds = {{"pick", 2.0}};
  Searcher s("test device", fast());
  const SearchResult r = s.choose(one.problem("single"));
  EXPECT_FALSE(r.searched);
  EXPECT_TRUE(one.runs.empty());
  EXPECT_TRUE(entries().empty());
}

TEST_F(SearchTest, TheCacheRemembersTheWinnerByContextAndSignature) {
  Planted k;
  k.seconds = {{"pick", 2.0}, {"fast", 1.0}};
  {
    Searcher s("test device", fast());
    EXPECT_TRUE(s.choose(k.problem("sig")).searched);
  }
  ASSERT_EQ(entries().size(), 1u);
  k.runs.clear();
  k.seconds = {{"pick", 1.0}, {"fast", 5.0}};  // what a new search would now find
  Searcher again("test device", fast());
  const SearchProblem p = k.problem("sig");
  const SearchResult r = again.choose(p);
  EXPECT_TRUE(r.cached);
  EXPECT_FALSE(r.searched);
  EXPECT_EQ(p.candidates[r.winner].label, "fast");
  EXPECT_TRUE(k.runs.empty()) << "a cached winner runs nothing";
  // Another device, another signature or another set of candidates is searched anew.
  Searcher other("another device", fast());
  EXPECT_TRUE(other.choose(p).searched);
  EXPECT_TRUE(again.choose(k.problem("sig2")).searched);
  k.seconds["slow"] = 9.0;
  EXPECT_TRUE(again.choose(k.problem("sig")).searched);
  // So is a winner another build measured: the key holds this build's identity, a hash
  // of the library's sources.
  const std::string id(build_id());
  EXPECT_EQ(id.size(), 16u);
  EXPECT_EQ(id.find_first_not_of("0123456789abcdef"), std::string::npos) << id;
  EXPECT_NE(search_cache_key("test device", "sig", {"pick"}).find(id), std::string::npos);
}

TEST_F(SearchTest, ACorruptOrStaleCacheEntryIsIgnoredAndReplaced) {
  Planted k;
  k.seconds = {{"pick", 2.0}, {"fast", 1.0}};
  { Searcher("test device", fast()).choose(k.problem("sig")); }
  ASSERT_EQ(entries().size(), 1u);
  const fs::path entry = entries()[0];
  std::string text;
  {
    std::ifstream in(entry);
    text.assign(std::istreambuf_iterator<char>(in), {});
  }
  const std::string cut = text.substr(0, text.size() / 2);
  std::string renamed = text;
  renamed.replace(renamed.rfind("fast"), 4, "gone");
  for (const std::string& bad : {std::string(), cut, std::string("\x01\xff garbage"), renamed}) {
    std::ofstream(entry, std::ios::trunc) << bad;
    ::testing::internal::CaptureStderr();
    Searcher s("test device", fast());
    const SearchProblem p = k.problem("sig");
    const SearchResult r = s.choose(p);
    const std::string err = ::testing::internal::GetCapturedStderr();
    EXPECT_TRUE(r.searched) << "trusted a bad entry: " << bad;
    EXPECT_EQ(p.candidates[r.winner].label, "fast");
    EXPECT_NE(err.find("ignoring the search cache entry"), std::string::npos) << err;
    std::ifstream in(entry);
    EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}), text) << "not rebuilt";
  }
}

TEST_F(SearchTest, TheBudgetBoundsTheTimeSpentAndAnUnfinishedSearchIsNotCached) {
  // Real time: every run sleeps 20 ms; twelve candidates would take about 1.4 s.
  SearchProblem p;
  p.signature = "sleepy";
  for (int i = 0; i < 12; ++i)
    p.candidates.push_back({"c" + std::to_string(i),
                            [] { std::this_thread::sleep_for(std::chrono::milliseconds(20)); }});
  p.keep_reference = [] {};
  p.mismatch = [] { return std::string(); };
  Searcher s("test device", fast(0.15));
  const auto start = std::chrono::steady_clock::now();
  const SearchResult r = s.choose(p);
  const double took =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  // Past the budget only the candidate being judged finishes (six runs, 0.12 s).
  EXPECT_LT(took, 0.15 + 0.2);
  EXPECT_LT(s.seconds_spent(), 0.15 + 0.2);
  size_t skipped = 0;
  for (const SearchTrial& t : r.trials) skipped += t.verdict == "skipped: budget";
  EXPECT_GE(skipped, 8u);
  EXPECT_TRUE(entries().empty());
  // With the budget spent, later kernels take the pick untimed.
  const SearchResult later = s.choose(p);
  EXPECT_FALSE(later.searched);
  EXPECT_EQ(later.winner, 0u);
}

TEST(SearchSettings, ComeFromTheEnvironmentAndRejectWhatTheyDoNotKnow) {
  EXPECT_EQ(parse_search_mode("full", "x"), SearchMode::Full);
  EXPECT_EQ(parse_search_mode("off", "x"), SearchMode::Off);
  try {
    parse_search_mode("fastest", "--search");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--search=fastest: expected off, fast or full"),
              std::string::npos);
  }
  std::optional<luminal::testing::ScopedEnv> mode, budget;
  mode.emplace("LUMINAL_SEARCH", "full");
  budget.emplace("LUMINAL_SEARCH_BUDGET", "2.5");
  SearchSettings s = search_settings_from_env();
  EXPECT_EQ(s.mode, SearchMode::Full);
  EXPECT_DOUBLE_EQ(s.budget_seconds, 2.5);
  budget.emplace("LUMINAL_SEARCH_BUDGET", "ten");
  EXPECT_THROW(search_settings_from_env(), Error);
  budget.emplace("LUMINAL_SEARCH_BUDGET", nullptr);
  mode.emplace("LUMINAL_SEARCH", "sometimes");
  EXPECT_THROW(search_settings_from_env(), Error);
  mode.emplace("LUMINAL_SEARCH", nullptr);
  s = search_settings_from_env();
  EXPECT_EQ(s.mode, SearchMode::Fast);
  EXPECT_DOUBLE_EQ(s.budget_seconds, 10);
}

}  // namespace
}  // namespace luminal::runtime

namespace luminal::runtime {
namespace {

// A candidate's output against the reference's: the first element further than the
// tolerance times the reference's largest magnitude is named, NaN matches only NaN, as a
// plain loop finds them, for outputs small and large (the large compared across threads).
TEST(OutputMismatch, NamesTheFirstElementOutsideTheReferencesScale) {
  for (const size_t n : {size_t{1000}, size_t{3} << 20}) {
    std::vector<float> reference(n);
    for (size_t i = 0; i < n; ++i) reference[i] = static_cast<float>((i * 7919) % 2001) - 1000.0f;
    const float inf = std::numeric_limits<float>::infinity();
    reference[n / 3] = std::numeric_limits<float>::quiet_NaN();
    reference[n / 5] = -inf, reference[n / 7] = inf;  // (a masked score: not the scale)
    const auto first_wrong = [&](const std::vector<float>& got) -> std::string {
      double scale = 0;
      for (float x : reference)
        if (std::isfinite(x)) scale = std::max(scale, static_cast<double>(std::fabs(x)));
      for (size_t i = 0; i < n; ++i) {
        const bool both_nan = std::isnan(got[i]) && std::isnan(reference[i]);
        const bool same_infinity = std::isinf(got[i]) && got[i] == reference[i];
        if (!both_nan && !same_infinity &&
            !(std::fabs(double{got[i]} - reference[i]) <= 1e-2 * scale))
          return mismatch_at(i, got[i], reference[i]);
      }
      return "";
    };
    std::vector<std::vector<float>> candidates(6, reference);
    for (size_t i = 0; i < n; ++i) candidates[1][i] += i % 2 ? 9.0f : -9.0f;  // within 1%
    candidates[2][n - 5] += 20.0f, candidates[2][n / 2 + 1] -= 20.0f;
    candidates[3][n / 4] = std::numeric_limits<float>::quiet_NaN();
    candidates[4][n / 5] = inf;   // the other infinity
    candidates[5][n / 6] = -inf;  // an infinity for a number
    for (size_t c = 0; c < candidates.size(); ++c) {
      const std::string verdict = output_mismatch(candidates[c].data(), reference, 1e-2);
      EXPECT_EQ(verdict, first_wrong(candidates[c])) << n << " elements, candidate " << c;
      EXPECT_EQ(verdict.empty(), c < 2) << n << " elements, candidate " << c;
    }
  }
}

}  // namespace
}  // namespace luminal::runtime

// A graph whose e-graph offers other extractions (a product adding its bias, which a
// backend with product epilogues may fold; causal attention, fused or not), run three
// times through a backend with the search on and its candidates dumped: every run's
// outputs against the reference interpreter's, and the programs the search judged.
#pragma once

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cmath>
#include <fstream>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "luminal/luminal.hpp"
#include "luminal/nn/attention.hpp"
#include "testing/run_outputs.hpp"
#include "testing/scoped_env.hpp"

namespace luminal::testing {

struct JudgedProgram {
  std::string label, verdict;  // the verdict's first word: winner, correct, slow, wrong
};

/// Runs the graph above on `backend` and returns the candidates of its first extraction
/// round (the cost model's program first).
inline std::vector<JudgedProgram> search_extractions_on(const Backend& backend) {
  ScopedCacheDir cache("extraction-search");
  ScopedEnv fast("LUMINAL_SEARCH", "fast");
  ScopedEnv dump("LUMINAL_DUMP", "search");
  ScopedEnv dir("LUMINAL_DUMP_DIR", cache.path().c_str());
  Graph cx;
  Tensor x = cx.named_tensor("x", {64, 32}), w = cx.named_tensor("w", {48, 32}),
         b = cx.named_tensor("b", {48});
  Tensor q = cx.named_tensor("q", {2, 40, 16}), k = cx.named_tensor("k", {2, 40, 16}),
         v = cx.named_tensor("v", {2, 40, 16});
  const Tensor linear = (x.matmul(w.transpose(0, 1)) + b).retrieve();
  const Tensor scores = where(nn::causal_mask(cx, 40, 0), q.matmul(k.transpose(-1, -2)) * 0.25,
                              -std::numeric_limits<double>::infinity());
  const Tensor attention = scores.softmax(-1).matmul(v).retrieve();
  std::mt19937 rng(5);
  for (Tensor* t : {&x, &w, &b, &q, &k, &v}) {
    size_t count = 1;
    for (const Expr& d : t->shape()) count *= static_cast<size_t>(d.eval());
    t->set(uniform_floats(rng, count));
  }
  const std::vector<std::vector<float>> want = run_outputs(cx, reference(), {linear, attention});
  cx.compile(backend);
  for (int run = 0; run < 3; ++run) {
    cx.execute();
    for (size_t o = 0; o < want.size(); ++o) {
      const std::vector<float> got = (o == 0 ? linear : attention).to_f32();
      EXPECT_EQ(got.size(), want[o].size());
      for (size_t i = 0; i < got.size() && i < want[o].size(); ++i)
        EXPECT_NEAR(got[i], want[o][i], 1e-4 * (1 + std::fabs(want[o][i])))
            << "run " << run << " output " << o << " element " << i;
    }
  }
  std::ifstream in(cache.path() / "search.json");
  if (!in) return {};
  std::vector<JudgedProgram> judged;
  for (const auto& entry : nlohmann::json::parse(in)) {
    const std::string signature = entry["signature"];
    // The first round's: "program <hash> (<n> nodes)", later rounds' name what they avoid.
    if (signature.rfind("program ", 0) != 0 || signature.find(", ") != std::string::npos) continue;
    for (const auto& c : entry["candidates"]) {
      const std::string verdict = c["verdict"];
      judged.push_back({c["label"], verdict.substr(0, verdict.find(':'))});
    }
  }
  return judged;
}

/// The candidates are the programs `labels` (in that order), each correct.
inline void expect_judged(const std::vector<JudgedProgram>& judged,
                          const std::vector<std::string>& labels) {
  ASSERT_EQ(judged.size(), labels.size());
  for (size_t i = 0; i < labels.size(); ++i) {
    EXPECT_EQ(judged[i].label, labels[i]);
    EXPECT_TRUE(judged[i].verdict == "winner" || judged[i].verdict == "correct" ||
                judged[i].verdict == "slow")
        << judged[i].label << ": " << judged[i].verdict;
  }
}

}  // namespace luminal::testing

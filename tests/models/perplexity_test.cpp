// Perplexity and KL divergence against brute force: the divergence over a base's top
// tokens against the full sum, and the runner's perplexity against teacher-forced logits
// of the reference interpreter on the same windows (so the exact CPU mode is checked
// against the reference too).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <random>

#include "luminal/cpu.hpp"
#include "luminal/models/generate.hpp"
#include "luminal/models/perplexity.hpp"
#include "luminal/reference.hpp"
#include "testing/expect_error.hpp"

namespace luminal::models {
namespace {

std::vector<float> random_logprobs(std::mt19937& rng, size_t vocab, float spread) {
  std::normal_distribution<float> d(0, spread);
  std::vector<float> logits(vocab), out;
  for (float& x : logits) x = d(rng);
  log_softmax(logits, out);
  return out;
}

double brute_force_kl(const std::vector<float>& p, const std::vector<float>& q) {
  double kl = 0;
  for (size_t i = 0; i < p.size(); ++i) kl += std::exp(double{p[i]}) * (double{p[i]} - double{q[i]});
  return kl;
}

TEST(Perplexity, LogSoftmaxSumsToOne) {
  std::mt19937 rng(1);
  const auto lp = random_logprobs(rng, 1000, 30.0f);
  double sum = 0;
  for (float x : lp) sum += std::exp(double{x});
  EXPECT_NEAR(sum, 1.0, 1e-5);
}

TEST(Perplexity, KlDivergenceMatchesTheFullSum) {
  std::mt19937 rng(2);
  for (int trial = 0; trial < 50; ++trial) {
    // Within the kept top tokens the divergence is the full one.
    const auto p = random_logprobs(rng, BasePosition::kTop, 2.0f);
    const auto q = random_logprobs(rng, BasePosition::kTop, 2.0f);
    EXPECT_NEAR(kl_divergence(base_position(p, 0), q), brute_force_kl(p, q), 1e-5);
    // Beyond them it is a lower bound, and close when the rest's mass is small.
    const auto big_p = random_logprobs(rng, 5000, 6.0f);
    std::vector<float> big_q = big_p;
    std::normal_distribution<float> noise(0, 0.3f);
    for (float& x : big_q) x += noise(rng);
    std::vector<float> q_norm;
    log_softmax(big_q, q_norm);
    const double full = brute_force_kl(big_p, q_norm), bound = kl_divergence(base_position(big_p, 0), q_norm);
    EXPECT_LE(bound, full + 1e-6);
    EXPECT_GE(bound, 0.0);
  }
  const auto p = random_logprobs(rng, 100, 3.0f);
  EXPECT_NEAR(kl_divergence(base_position(p, 3), p), 0.0, 1e-6);
  EXPECT_FLOAT_EQ(base_position(p, 3).actual_logprob, p[3]);
}

const std::string kModel = std::string(LUMINAL_FIXTURE_DIR) + "/generate/llama_folder";

std::string text() {
  std::string t;
  for (int i = 0; i < 30; ++i) t += "Line " + std::to_string(i) + " of a text about the quick brown fox. ";
  return t;
}

TEST(Perplexity, RunnerMatchesTeacherForcedReferenceLogits) {
  const int64_t ctx = 16;
  PerplexityOptions options;
  options.ctx = ctx;
  options.kv_cache = DType::F32;
  PerplexityRunner runner(kModel, cpu({.int8_activations = false}), options);
  PerplexityBase keep;
  const PerplexityReport r = runner.run(text(), {}, nullptr, &keep);
  const std::vector<int32_t> ids = runner.tokenize(text());
  ASSERT_GE(r.windows, 3);
  EXPECT_EQ(r.scored, r.windows * (ctx / 2 - 1));
  EXPECT_EQ(static_cast<int64_t>(keep.positions.size()), r.scored);

  TextGenerator reference_model(kModel, reference());
  const std::vector<int32_t> bos = reference_model.encode("");
  double nll = 0;
  int64_t n = 0;
  for (int64_t w = 0; w < r.windows; ++w) {
    std::vector<int32_t> window(ids.begin() + w * ctx, ids.begin() + (w + 1) * ctx);
    if (bos.size() == 1) window[0] = bos[0];
    const std::vector<int32_t> prompt(window.begin(), window.begin() + ctx / 2 + 1);
    const std::vector<int32_t> rest(window.begin() + ctx / 2 + 1, window.end());
    const auto rows = reference_model.forced_logits(prompt, rest);
    for (size_t i = 0; i < rest.size(); ++i) {
      std::vector<float> lp;
      log_softmax(rows[i], lp);
      nll -= lp[static_cast<size_t>(rest[i])];
      EXPECT_NEAR(keep.positions[static_cast<size_t>(n)].actual_logprob, lp[static_cast<size_t>(rest[i])], 1e-3);
      ++n;
    }
  }
  ASSERT_EQ(n, r.scored);
  EXPECT_NEAR(r.perplexity, std::exp(nll / static_cast<double>(n)), 1e-4 * r.perplexity);

  // Through the decode steps (one token at a time through the KV cache) the same numbers.
  options.decode = true;
  PerplexityRunner decoding(kModel, cpu({.int8_activations = false}), options);
  const PerplexityReport d = decoding.run(text(), {}, &keep);
  EXPECT_NEAR(d.perplexity, r.perplexity, 1e-4 * r.perplexity);
  EXPECT_NEAR(d.mean_kl, 0.0, 1e-6);

  // Compared with its own distributions, a run agrees with itself.
  const PerplexityReport again = runner.run(text(), {}, &keep);
  EXPECT_NEAR(again.mean_kl, 0.0, 1e-9);
  EXPECT_DOUBLE_EQ(again.top1_agreement, 1.0);
  EXPECT_NEAR(again.base_perplexity, r.perplexity, 1e-4 * r.perplexity);
}

TEST(Perplexity, BaseFilesRoundTripAndBadOnesAreErrors) {
  PerplexityBase b{64, 0x1234, {}};
  std::mt19937 rng(3);
  for (int i = 0; i < 5; ++i) b.positions.push_back(base_position(random_logprobs(rng, 50, 1.0f), i));
  const auto path = (std::filesystem::temp_directory_path() / "luminal_ppl_base.bin").string();
  b.save(path);
  const PerplexityBase back = PerplexityBase::load(path);
  EXPECT_EQ(back.ctx, 64);
  EXPECT_EQ(back.tokens_hash, 0x1234u);
  ASSERT_EQ(back.positions.size(), 5u);
  EXPECT_EQ(back.positions[4].top_ids[0], b.positions[4].top_ids[0]);
  std::filesystem::resize_file(path, std::filesystem::file_size(path) - 1);
  testing::expect_error([&] { PerplexityBase::load(path); }, {path.c_str(), "truncated"});
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace luminal::models

// Sampling's definition by brute force (sort every token by logit, keep the top k,
// softmax at the temperature, cut to the top-p nucleus), and the check of the draw as
// graph ops (DeviceSampler) against it on a backend, shared by models_tests (the reference
// interpreter) and cuda_tests (the GPU).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <random>
#include <vector>

#include "luminal/luminal.hpp"
#include "luminal/models/sampling.hpp"
#include "models/device_sampling.hpp"

namespace luminal::models {

inline std::map<int32_t, double> brute_force(const std::vector<float>& logits,
                                             const SamplingOptions& o) {
  std::vector<int32_t> order(logits.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
  if (o.top_k > 0 && static_cast<size_t>(o.top_k) < order.size()) order.resize(o.top_k);
  std::vector<double> w;
  for (int32_t i : order) w.push_back(std::exp((logits[i] - logits[order[0]]) / o.temperature));
  const double sum = std::accumulate(w.begin(), w.end(), 0.0);
  size_t keep = order.size();
  double acc = 0;
  for (size_t i = 0; i < order.size() && o.top_p < 1.0; ++i)
    if ((acc += w[i] / sum) >= o.top_p) {
      keep = i + 1;
      break;
    }
  const double kept =
      std::accumulate(w.begin(), w.begin() + static_cast<std::ptrdiff_t>(keep), 0.0);
  std::map<int32_t, double> p;
  for (size_t i = 0; i < keep; ++i) p[order[i]] = w[i] / kept;
  return p;
}

inline std::vector<float> random_logits(size_t n, uint64_t seed, float spread) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> d(0, spread);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

// The draw as graph ops on `backend`: every token inside the top-k / top-p set, with its
// frequency within sampling error, and the same token as sample() for the same rng stream
// (both take the candidates most likely first) save where the uniform number's rounding to
// f32 moves it across a boundary.
inline void check_device_draw(const Backend& backend, int draws) {
  const std::vector<float> logits = random_logits(60, 4, 1.5f);
  for (const SamplingOptions& o : {SamplingOptions{.temperature = 0.7, .top_k = 10},
                                   SamplingOptions{.temperature = 1.3, .top_k = 30, .top_p = 0.8},
                                   SamplingOptions{.temperature = 1.0, .top_k = 1}}) {
    Graph g;
    Tensor x = g.named_tensor("logits", {1, 60});
    DeviceSampler sampler(x, 60, 32);
    ASSERT_TRUE(sampler.follows(o));
    sampler.token.retrieve();
    g.compile(backend);
    x.set(logits);
    uint64_t device_rng = 99, host_rng = 99;
    sampler.set_draws(o, draws, device_rng);
    const std::map<int32_t, double> want = brute_force(logits, o);
    std::map<int32_t, int> seen;
    int same = 0;
    for (int i = 0; i < draws; ++i) {
      g.set_dim("draw", i);
      g.execute();
      const int32_t t = static_cast<int32_t>(sampler.token.data().get_i64(0));
      ASSERT_TRUE(want.count(t)) << "token " << t << " is outside the top-k / top-p set";
      ++seen[t];
      same += t == sample(logits, o, host_rng);
    }
    EXPECT_EQ(device_rng, host_rng);
    EXPECT_GE(same, draws * 999 / 1000) << "k=" << o.top_k << " p=" << o.top_p;
    for (const auto& [t, p] : want) {
      const double sigma = std::sqrt(p * (1 - p) / draws);
      EXPECT_NEAR(seen[t] / static_cast<double>(draws), p, 5 * sigma + 1e-4)
          << "token " << t << " k=" << o.top_k << " p=" << o.top_p;
    }
  }
  Graph g;
  DeviceSampler sampler(g.named_tensor("logits", {1, 60}), 60, 32);
  EXPECT_FALSE(sampler.follows({.temperature = 0.0, .top_k = 10}));  // greedy
  EXPECT_FALSE(sampler.follows({.temperature = 1.0}));               // no top k
  EXPECT_FALSE(sampler.follows({.temperature = 1.0, .top_k = 33}));  // past its candidates
}

}  // namespace luminal::models

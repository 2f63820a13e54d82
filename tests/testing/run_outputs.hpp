// Small helpers the backend-comparison tests share: compile and run a graph on a backend
// and read its outputs; uniform random inputs.
#pragma once

#include <random>
#include <vector>

#include "luminal/luminal.hpp"

namespace luminal::testing {

/// Compiles `cx` for `backend`, runs it once and returns each of `outs` as f32.
inline std::vector<std::vector<float>> run_outputs(Graph& cx, const Backend& backend,
                                                   const std::vector<Tensor>& outs) {
  cx.compile(backend);
  cx.execute();
  std::vector<std::vector<float>> values;
  for (const Tensor& o : outs) values.push_back(o.to_f32());
  return values;
}

/// n values drawn uniformly from [lo, hi).
inline std::vector<float> uniform_floats(std::mt19937& rng, size_t n, float lo = -1.0f,
                                         float hi = 1.0f) {
  std::vector<float> v(n);
  for (float& x : v) x = std::uniform_real_distribution<float>(lo, hi)(rng);
  return v;
}

}  // namespace luminal::testing

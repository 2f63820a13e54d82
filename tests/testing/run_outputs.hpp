// Small helpers the backend-comparison tests share: compile and run a graph on a backend
// and read its outputs; uniform random inputs.
#pragma once

#include <random>
#include <vector>

#include "luminal/compiler/optimize.hpp"
#include "luminal/luminal.hpp"
#include "luminal/reference.hpp"

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

/// An optimized graph's outputs for `outs` (tensors of `cx`, which it was optimized from),
/// run on the reference interpreter with cx's inputs and `dims` bound: what the kernels
/// the rules chose compute by their reference semantics. Each as f32.
inline std::vector<std::vector<float>> run_optimized(
    const Graph& cx, const compiler::Optimized& opt, const std::vector<Tensor>& outs,
    const std::vector<std::pair<std::string, int64_t>>& dims = {}) {
  Graph& g = *opt.graph;
  for (const auto& [name, value] : dims) g.set_dim(name, value);
  for (uint32_t i = 0; i < g.num_nodes(); ++i)
    if (g.node(NodeId{i}).op == Op::Input) g.set_data(NodeId{i}, *cx.data(opt.source_of[i]));
  reference().compile(g)->run(g);
  std::vector<std::vector<float>> values;
  for (const Tensor& o : outs)
    for (const auto& [user, node] : opt.outputs)
      if (user == o.id()) {
        // (Read as the tensor reads its node: through its view.)
        values.push_back(read_view(*g.data(node), o.view().resolve(g.dims())).to_f32());
      }
  return values;
}

/// n values drawn uniformly from [lo, hi).
inline std::vector<float> uniform_floats(std::mt19937& rng, size_t n, float lo = -1.0f,
                                         float hi = 1.0f) {
  std::vector<float> v(n);
  for (float& x : v) x = std::uniform_real_distribution<float>(lo, hi)(rng);
  return v;
}

/// n values drawn uniformly from [lo, hi), as a Buffer of `dtype` (rounded to it).
inline Buffer uniform_buffer(std::mt19937& rng, size_t n, DType dtype, float lo = -1.0f,
                             float hi = 1.0f) {
  const std::vector<float> v = uniform_floats(rng, n, lo, hi);
  return Buffer::from_doubles(std::vector<double>(v.begin(), v.end()), dtype);
}

}  // namespace luminal::testing

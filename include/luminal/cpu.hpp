// The CPU backend: fuses the graph into kernels, renders them as C++, compiles them
// with the system compiler (-O3 -march=native -fopenmp), caches the shared object on
// disk by content hash ($LUMINAL_CACHE_DIR, default ~/.cache/luminal) and runs them.
// Changing a bound symbolic dimension does not recompile.
#pragma once

#include "luminal/backend.hpp"

namespace luminal {

struct CpuOptions {
  /// Fuse elementwise chains into their consumers (off: one kernel per op).
  bool fuse = true;
  /// Products with block-quantised weights (QMatMul) quantise each 32-element block of
  /// the activations to int8 and use integer dot products, as llama.cpp does: several
  /// times faster, within 8-bit rounding of the activations. Off: f32 activations times
  /// the decoded weights, which agrees with a dequantised f32 model to float rounding.
  bool int8_activations = true;
  /// With int8_activations: each value's int8 rounding error is quantised too and
  /// multiplied as a second term, in the same pass over the weights, so products carry
  /// about 15 bits of the activations. On Gemma 3 270M the output distribution then
  /// matches the f32-activation run's (mean KL divergence ~1e-7 against 0.0017) for
  /// decode steps 3-7% slower and quantised products in prompts ~2x slower.
  bool residual_activations = false;
  /// With int8_activations: the residual term (above) for the products next to each
  /// attention only (queries, keys, values and the output projection), whose errors the
  /// softmax's exponent amplifies. On Gemma 3 270M it takes the fast path's top-1
  /// agreement with the exact run from 97.35% to 98.19% (English prose) and from 97.40%
  /// to 97.89% (Python code), mean KL divergence from 0.0017 to 0.0011-0.0012, for a
  /// small share of the weights (bench/results/fidelity.md). Off by default until its
  /// cost to prompt processing is measured on a quiet machine.
  bool residual_attention_projections = false;
  /// Compile a second set of kernels, on first use, for runs where symbolic dims are
  /// bound to 1 (one-token decoding): their index arithmetic simplifies.
  bool specialize_unit_dims = true;
};

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(CpuOptions options = {}) : options_(options) {}
  std::string name() const override { return "cpu"; }
  std::unique_ptr<Executable> compile(const Graph& graph) const override;

 private:
  CpuOptions options_;
};

/// `cx.compile(luminal::cpu())`
inline CpuBackend cpu(CpuOptions options = {}) {
  return CpuBackend(options);
}

}  // namespace luminal

// The CPU backend: fuses the graph into kernels, renders them as C++, compiles them
// with the system compiler (-O3 -march=native -fopenmp), caches the shared object on
// disk by content hash ($LUMINAL_CACHE_DIR, default ~/.cache/luminal) and runs them.
// Changing a bound symbolic dimension does not recompile.
#pragma once

#include <cstdint>

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
  /// With int8_activations: which products also quantise each value's int8 rounding error
  /// and multiply it as a second term, in the same pass over the weights, so that they
  /// carry about 15 bits of the activations (bench/results/fidelity.md, Gemma 3 270M):
  /// - none: one int8 term, as llama.cpp: top-1 agreement with the exact run 97.4%;
  /// - sensitive (default): the products next to each attention (queries, keys, values,
  ///   output; the softmax's exponent amplifies their errors) and the feed-forward's down
  ///   projection (activations that are a product of two products, with the widest
  ///   range): 5 of a layer's 7 products, top-1 agreement above 98%, prompts ~27% slower;
  /// - all: every product: the f32-activation run's distribution (mean KL ~1e-7),
  ///   decode steps 3-7% slower, quantised products in prompts ~2x slower.
  enum class Residual : uint8_t { none, sensitive, all };
  Residual residual = Residual::sensitive;
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

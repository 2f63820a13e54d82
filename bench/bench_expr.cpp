// Symbolic expression cost: build and simplify the flat index and validity
// expressions of a 6-D view that is permuted, sliced and padded.
//
//   warm: the same symbols every iteration, as when a compiler revisits a shape it
//         has seen (interning and the simplification memo answer most of it);
//   cold: fresh symbol names every iteration, so every node is new and simplified.
#include <benchmark/benchmark.h>

#include <string>

#include "luminal/view.hpp"

namespace {

using luminal::Expr;
using luminal::View;

std::pair<Expr, Expr> view_index(const std::string& suffix) {
  std::vector<Expr> shape;
  for (int d = 0; d < 6; ++d) shape.emplace_back("d" + std::to_string(d) + suffix);
  View v = View::contiguous(shape)
               .permute({5, 3, 1, 0, 2, 4})
               .slice(1, 1, shape[3] - 1)
               .pad(2, 2, 3)
               .slice(4, 0, shape[2] - 2)
               .pad(0, 1, 0);
  const Expr flat = Expr::var("idx" + suffix);
  return {v.index(flat), v.valid(flat)};
}

void BM_ViewIndexWarm(benchmark::State& state) {
  for (auto _ : state) benchmark::DoNotOptimize(view_index(""));
}
BENCHMARK(BM_ViewIndexWarm)->Iterations(100000)->Unit(benchmark::kMicrosecond);

void BM_ViewIndexCold(benchmark::State& state) {
  int64_t i = 0;
  for (auto _ : state) benchmark::DoNotOptimize(view_index("_" + std::to_string(i++)));
}
BENCHMARK(BM_ViewIndexCold)->Iterations(100000)->Unit(benchmark::kMicrosecond);

// Raw constructor throughput: sums of products over a few symbols.
void BM_BuildAffineSum(benchmark::State& state) {
  const Expr a = "a", b = "b", c = "c";
  int64_t k = 0;
  for (auto _ : state) {
    benchmark::DoNotOptimize(a * (k % 97) + b * 3 + c * (k % 13) + k);
    ++k;
  }
}
BENCHMARK(BM_BuildAffineSum);

}  // namespace

BENCHMARK_MAIN();

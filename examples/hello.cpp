// A first luminal program: build a small lazy graph on 2-D tensors, run it on the
// reference interpreter, and print the results.
#include <cmath>
#include <cstdio>

#include "luminal/luminal.hpp"

namespace {

void print_matrix(const char* title, const std::vector<float>& v, int rows, int cols) {
  std::printf("%s\n", title);
  for (int r = 0; r < rows; ++r) {
    std::printf("  [");
    for (int c = 0; c < cols; ++c) std::printf("%s%8.4f", c ? ", " : "", v[r * cols + c]);
    std::printf("]\n");
  }
}

}  // namespace

int main() {
  try {
    luminal::Graph cx;
    auto a = cx.named_tensor("a", {2, 3});
    auto b = cx.named_tensor("b", {3});
    a.set(std::vector<float>{1, 2, 3, 4, 5, 6});
    b.set(std::vector<float>{0.5f, -1.0f, 2.0f});

    auto scaled = a * b + 1.0;                 // broadcasts b over the rows
    auto row_sum = scaled.sum_reduce(1);       // [2]
    auto transposed = scaled.permute({1, 0});  // a view: no copy
    auto root = a.sqrt();
    scaled.retrieve();
    row_sum.retrieve();
    transposed.retrieve();
    root.retrieve();

    std::printf("graph:\n%s\n", cx.to_text().c_str());
    // The exact interpreter first, then the compiled CPU backend on the same graph.
    cx.compile(luminal::reference());
    cx.execute();
    const std::vector<float> exact = scaled.to_f32();
    cx.compile(luminal::cpu());
    cx.execute();
    const std::vector<float> compiled = scaled.to_f32();
    for (size_t i = 0; i < exact.size(); ++i)
      if (std::abs(exact[i] - compiled[i]) > 1e-5f) {
        std::fprintf(stderr, "error: cpu backend disagrees with the reference at %zu\n", i);
        return 1;
      }
    std::printf("reference and cpu backends agree\n\n");

    print_matrix("a * b + 1:", scaled.to_f32(), 2, 3);
    print_matrix("row sums:", row_sum.to_f32(), 1, 2);
    print_matrix("transposed:", transposed.to_f32(), 3, 2);
    print_matrix("sqrt(a):", root.to_f32(), 2, 3);
    return 0;
  } catch (const luminal::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }
}

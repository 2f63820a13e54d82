// Activation rows as the integer QMatMul kernels read them (private to src/backends/cpu):
// each 32-element block quantised to int8 with its own scale, as llama.cpp's Q8_0.
#pragma once

#include <cstdint>
#include <vector>

#include "luminal/view.hpp"

namespace luminal::cpugen {

/// Rows quantised in 32-element blocks: x ~ d * q, plus d * sum(q) per 16 elements.
struct QuantizedRows {
  std::vector<int8_t> q;
  std::vector<float> d, sum16;
};

/// Quantises `rows` (each k floats, k a multiple of 32) into `out`.
void quantize_rows(const std::vector<const float*>& rows, int64_t k, QuantizedRows& out);

/// Pointers to the K-contiguous rows of a [batch..., M, K, N] view (broadcast along N),
/// in output row order.
std::vector<const float*> activation_rows(const ConcreteView& a, const float* data);

}  // namespace luminal::cpugen

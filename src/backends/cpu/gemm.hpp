// The MatMul kernel on the CPU: one OpenBLAS sgemm per batch entry, straight from the
// input views' strides (private to src/backends/cpu).
#pragma once

#include "luminal/view.hpp"

namespace luminal::cpugen {

/// a and b are [batch..., M, K, N] views (a broadcast along N, b along M) over the raw
/// f32 buffers; writes the row-major [batch..., M, N] result to `out`.
void matmul_f32(const ConcreteView& a, const float* a_data, const ConcreteView& b,
                const float* b_data, float* out);

}  // namespace luminal::cpugen

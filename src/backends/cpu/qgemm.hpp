// The QMatMul kernel on the CPU: x W^T with W kept in a ggml block format (private to
// src/backends/cpu).
#pragma once

#include <cstdint>
#include <span>

#include "backends/cpu/qinterleaved.hpp"
#include "luminal/view.hpp"

namespace luminal::cpugen {

/// `a` is a [batch..., M, K, N] view (broadcast along N, unit stride along K) over f32
/// data; `w` holds N rows of K elements in `format` (a ggml type). Writes the row-major
/// [batch..., M, N] result to `out`.
///
/// With `int8_activations`, block formats run as integer dot products: each 32-element
/// block of an activation row is quantised to int8 with its own scale (as llama.cpp's Q8
/// activations), and each weight block decodes to int8 values with per-16 scales and
/// offsets, so the error is that of 8-bit activations (at most half of 1/127 of each
/// block's largest magnitude per element). Otherwise, and always for F32, F16 and BF16
/// storage, activations stay f32 and only the summation order differs from a dense
/// product with the decoded weights.
///
/// `interleaved`, when given, is the same weights re-laid out (qinterleaved.hpp); the
/// integer products read it instead (with int8_activations). With `residual` too, each
/// value's int8 rounding error is quantised and multiplied as a second term in the same
/// pass over the weights (CpuOptions::residual).
void qmatmul(const ConcreteView& a, const float* a_data, uint32_t format, const uint8_t* w,
             int64_t n, int64_t k, float* out, bool int8_activations = true,
             const InterleavedWeights* interleaved = nullptr, bool residual = false);

/// Several QMatMuls of the same activations `a` (as above), each with interleaved
/// weights and its own output, run as one product (qmatmul_interleaved).
void qmatmul_group(const ConcreteView& a, const float* a_data,
                   std::span<const InterleavedProduct> products, bool residual = false);

}  // namespace luminal::cpugen

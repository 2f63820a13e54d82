// ExpertMatMul on the CPU (luminal/expert_matmul_op.hpp; private to src/backends/cpu):
// the rows routed to each expert gathered, then multiplied by that expert's matrix as one
// QMatMul, so each chosen expert's weights are read once per run however many rows chose
// it, and the others' not at all.
#pragma once

#include <cstdint>
#include <span>

#include "luminal/buffer.hpp"

namespace luminal::cpugen {

/// The experts' operand: `count` matrices of n rows of k elements in ggml type `format`
/// (F32, F16, BF16 or a block format), `row_bytes` a row, one after another from `data`.
struct ExpertWeights {
  uint32_t format;
  const uint8_t* data;
  int64_t count, n, k, row_bytes;
};

/// out[t, s] = W[ids[t, s]] x[t, s or 0] for t < rows, s < slots and each stack W of
/// `stacks` (all `count` experts of rows of k): x is [rows, x_slots, k] row-major f32
/// (x_slots 1 or `slots`), ids rows * slots integers, out [rows, slots, sum of the stacks'
/// n], the stacks' outputs side by side. An id outside [0, count) raises luminal::Error.
void expert_matmul(const float* x, int64_t rows, int64_t x_slots, int64_t slots, const Buffer& ids,
                   std::span<const ExpertWeights> stacks, float* out, bool int8_activations);

}  // namespace luminal::cpugen

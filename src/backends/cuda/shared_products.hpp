// Products of the same activations run as one (private to src/backends/cuda): a
// decoding layer's query, key and value projections read one row of activations against
// three weights, its gate and up projections against two. Ordered next to each other in
// the plan, one launch of the one-row kernel takes each such run of kernels over
// half-precision weights: the row is read once, and the small key and value matrices no
// longer leave SMs idle at their ends. Over Q8_0, Q4_K, Q5_K and Q6_K weights, the row is
// quantised once for the run's integer kernels.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "luminal/compiler/matmul_op.hpp"
#include "luminal/compiler/plan.hpp"
#include "luminal/graph.hpp"

namespace luminal::cudagen {

/// A product over block-format weights, QMatMul, NormQMatMul or QMatMulAdd: its weights'
/// format, the input that holds them, (NormQMatMul) the op, for its norm (input 1, eps),
/// and whether it adds a residual (QMatMulAdd's input 2).
struct QuantProduct {
  uint32_t format;
  size_t weight;
  const compiler::NormQMatMulOp* norm;
  bool residual;
};
std::optional<QuantProduct> quant_product(const Node& n);

/// Moves each QMatMul (or NormQMatMul) over half-precision, Q8_0, Q4_K, Q5_K or Q6_K weights held
/// in a user input to just after the earlier such products of the same activations (half-precision
/// ones of the same format; up to kGemvMatrices in a run). Nothing else moves, and a
/// moved product still follows everything it reads (its activations, read by the first of
/// the run; its weights, an input).
void adjoin_shared_products(const Graph& g, compiler::KernelPlan& plan);

/// Per kernel: how many kernels from it on are such products of the same activations (and
/// norm) and weight format (at least 1; the runs adjoin_shared_products made).
std::vector<uint32_t> shared_product_runs(const Graph& g, const compiler::KernelPlan& plan);

}  // namespace luminal::cudagen

// The e-graph stage: lower the HLIR into an e-graph (views as View nodes), saturate
// with the rule sets in src/compiler/rules/hlir.rules (algebraic simplification and
// kernel patterns such as MatMul), extract the cheapest program, and rebuild it as an
// HLIR graph in which selected kernels are Custom nodes.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "luminal/dtype.hpp"

#include "luminal/egraph/scheduler.hpp"
#include "luminal/graph.hpp"

namespace luminal::compiler {

struct Optimized {
  std::unique_ptr<Graph> graph;                    // the rewritten program
  std::vector<NodeId> source_of;                   // its Input nodes -> the user's input nodes
  std::vector<std::pair<NodeId, NodeId>> outputs;  // (user output, rewritten node)
  size_t enodes = 0, eclasses = 0;
  eg::RunReport report;
  /// The fused kernels the extraction chose where their e-class also offered the unfused
  /// form (kinds such as "Attention" and "MatMulAdd", sorted): the places where another
  /// extraction (OptimizeOptions::avoid) gives a different program worth timing.
  std::vector<std::string> choices;
  std::string summary() const;
};

/// What a backend asks of the e-graph stage beyond the rules every backend gets.
struct OptimizeOptions {
  /// RMSNorm folded into the block-format products that read it (NormQMatMulOp) and
  /// residual adds into those whose outputs they add (QMatMulAddOp), the
  /// hlir-product-fusions rules: for a backend whose one-row products quantise their
  /// activations (and can normalise them in the same pass) and can add as they store.
  bool product_fusions = false;
  /// Values added to a MatMul's output folded into the product (MatMulAddOp), the
  /// hlir-gemm-epilogues rules: for a backend whose library products add a bias row and a
  /// matrix as they store (cuBLASLt's bias epilogue and beta = 1).
  bool gemm_epilogues = false;
  /// A product whose left operand is a row-major copy of a strided view (a convolution's
  /// im2col columns) reading the view itself (WindowMatMulOp), the hlir-window-products
  /// rules: for a backend with a kernel that gathers such an operand's tiles.
  bool window_products = false;
  /// Each elementwise op, copy and reduction that would read its operand across its
  /// memory (the operand's innermost run not along the value's last dim: a convolution's
  /// [images, pixels, channels] product read as NCHW) computed in the operand's order and
  /// stored so, its readers' views re-expressed over that order (compiler::storage_ordered,
  /// before the rules run): a convolutional network kept channels last from one product
  /// to the next. For a backend whose kernels read views of any strides.
  bool storage_orders = false;
  /// An Attention whose one reader is a copy of it in another order (its rows [batch,
  /// heads, tokens] copied to [batch, tokens, heads] for the output projection) writing
  /// its rows in that order itself (AttentionOp::out_order), the copy gone: for a backend
  /// whose attention kernels write rows at any strides.
  bool attention_output_orders = false;
  /// Attention's backward pass as three kernels over tiles of recomputed scores
  /// (AttentionGradOp), the hlir-attention-gradients rules, where the backend's kernels
  /// take queries, keys, values and the output's gradient of type t and head dims d
  /// (queries, keys) and dv (values): attention_gradients(t, d, dv). Unset: the rules
  /// are off.
  std::function<bool(DType t, int64_t d, int64_t dv)> attention_gradients = {};
  /// Kernel kinds (e-node names, as in Optimized::choices) the extraction takes only
  /// where nothing else computes the value: one of the alternative programs a search
  /// times (runtime/program_search.hpp).
  std::vector<std::string> avoid = {};
};

/// The fused kernel kinds whose unfused form an extraction can take instead: what
/// Optimized::choices may name.
const std::vector<std::string>& fusion_kinds();

Optimized optimize(const Graph& g, const OptimizeOptions& options = {});

}  // namespace luminal::compiler

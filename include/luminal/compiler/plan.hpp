// Kernel planning over the HLIR: dead-code elimination, common-subexpression
// elimination and fusion. Each kernel stores one materialised node; everything it
// computes on the way (elementwise chains, reduce prologues) is fused into it.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "luminal/graph.hpp"

namespace luminal::compiler {

struct Kernel {
  NodeId root;                // the node whose value the kernel stores
  std::vector<NodeId> reads;  // materialised nodes and inputs it loads, in order
  size_t fused = 0;           // nodes computed inside this kernel besides the root
  // An Attention whose mask the backend computes (plan_kernels' `computed_masks`): the
  // mask as compiler::computed_mask gives it.
  std::optional<Expr> computed_mask;
};

struct KernelPlan {
  std::vector<NodeId> canonical;   // CSE: every node -> its representative
  std::vector<bool> needed;        // DCE: reaches an output
  std::vector<bool> materialized;  // has a buffer (inputs, kernel roots)
  std::vector<Kernel> kernels;     // in dependency order
  size_t fused_ops = 0;

  NodeId canon(NodeId n) const { return canonical[n.value]; }
  bool is_materialized(NodeId n) const { return materialized[canon(n).value]; }
  /// One line per kernel, for LUMINAL_DUMP=kernels.
  std::string to_text(const Graph& g) const;
};

/// How much of the graph each kernel computes inline.
enum class Fusion {
  Off,              // every node its own kernel (one kernel per op), for comparisons
  StoreShared,      // elementwise chains fused; a value read by several kernels stored once
  RecomputeShared,  // ... except a few cheap ops, computed again by each reader: what a
                    // GPU wants, where writing a tensor and reading it back costs more
};

/// `computed_masks`: the backend evaluates an Attention's mask inside its kernels where
/// compiler::computed_mask gives it as an index expression, so that iota is stored only
/// if something else reads it.
KernelPlan plan_kernels(const Graph& g, Fusion fusion = Fusion::StoreShared,
                        bool computed_masks = false);

}  // namespace luminal::compiler

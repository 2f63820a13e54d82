// Values stored in the order their operands lie in memory (OptimizeOptions::storage_orders).
#pragma once

#include <vector>

#include "luminal/graph.hpp"

namespace luminal::compiler {

/// The graph's nodes, each elementwise op, copy or reduction that would read its operand
/// across its memory (the operand's innermost run of memory not along the value's last
/// dim: a convolution's [images, pixels, channels] product read as NCHW) computed and
/// stored with its dims in the operand's order instead, and every reader's view of it
/// re-expressed over that order. Values keep their order where a reader's view cannot be
/// re-expressed, where an indexing or custom op reads them, where they are a product's
/// multiply (a Mul a SumReduce reads: the form the product rules match), and where they
/// are outputs or read by an elementwise op that keeps its order (an output's chain).
/// Node ids, inputs and outputs are unchanged.
std::vector<Node> storage_ordered(const Graph& g);

}  // namespace luminal::compiler

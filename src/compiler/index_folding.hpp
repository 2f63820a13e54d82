// Values computed from indices alone, folded into one Iota each (see index_folding.cpp).
#pragma once

#include <vector>

#include "luminal/graph.hpp"

namespace luminal::compiler {

/// `nodes` (a graph's, by id) with every value that depends on indices alone (Iotas and
/// constants through comparisons, logic, integer arithmetic, Where and casts) made one
/// Iota of its expression, and every Where whose condition is always true (or always
/// false) read past: its readers read the operand it passes on, where that operand lies
/// as the Where would store it. Ids, inputs and `outputs` are unchanged. What a front
/// end spells out elementwise (a causal mask built from two aranges, compared, turned
/// into 0 / -inf and back into bool) becomes a mask the attention kernels compute.
std::vector<Node> folded_index_values(std::vector<Node> nodes, const std::vector<NodeId>& outputs);

}  // namespace luminal::compiler

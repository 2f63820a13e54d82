// The reference interpreter: runs HLIR exactly, node by node, on the host. It is the
// oracle every backend is tested against: correct first, fast enough for tests.
#pragma once

#include <functional>
#include <vector>

#include "luminal/backend.hpp"
#include "luminal/buffer.hpp"
#include "luminal/graph.hpp"

namespace luminal {

class ReferenceBackend final : public Backend {
 public:
  std::string name() const override { return "reference"; }
  std::unique_ptr<Executable> compile(const Graph& graph) const override;
};

/// `cx.compile(luminal::reference())`
inline ReferenceBackend reference() {
  return {};
}

/// The value of a Constant or Iota node with `dims` bound (what a backend that computes
/// one inside its kernels reads where it falls back to the host).
Buffer source_values(const Node& n, const Bindings& dims);

/// The reference values of `nodes` of `g` (one for each entry), evaluated as the interpreter
/// runs the graph, under `dims`; `input` gives each Input node's data (block-stored ones
/// raw, as set). For a backend checking its own values node by node.
std::vector<Buffer> reference_values(const Graph& g, const std::vector<NodeId>& nodes,
                                     const Bindings& dims,
                                     const std::function<const Buffer&(NodeId)>& input);

}  // namespace luminal

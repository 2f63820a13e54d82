// The contract between a graph and whatever runs it. A Backend turns a graph into an
// Executable once; the Executable runs it many times with new inputs and dims.
#pragma once

#include <memory>
#include <string>

namespace luminal {

class Graph;

class Executable {
 public:
  virtual ~Executable() = default;
  /// Runs with the graph's current inputs and bound dims, storing outputs in it.
  virtual void run(Graph& graph) = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  virtual std::unique_ptr<Executable> compile(const Graph& graph) const = 0;
};

}  // namespace luminal

// The CUDA backend's program on the reference interpreter (see CudaProgramReference).
#include <algorithm>
#include <deque>
#include <utility>

#include "backends/cuda/compile.hpp"
#include "luminal/cuda.hpp"
#include "luminal/reference.hpp"

namespace luminal {
namespace {

class ProgramReference final : public Executable {
 public:
  explicit ProgramReference(compiler::Optimized program) : program_(std::move(program)) {
    // Each program node an output reads, once (two outputs may name one value).
    for (const auto& [user_out, node] : program_.outputs)
      if (std::find(nodes_.begin(), nodes_.end(), node) == nodes_.end()) nodes_.push_back(node);
  }

  void run(Graph& user) override {
    std::deque<Buffer> copied;  // inputs set in a GPU's memory, copied to the host
    const std::vector<Buffer> values =
        reference_values(*program_.graph, nodes_, user.dims(), [&](NodeId r) -> const Buffer& {
          const NodeId source = program_.source_of[r.value];
          if (const DeviceData* d = user.device_data(source)) {
            check_input_data(user.node(source), source, *d, user.dims());
            return copied.emplace_back(d->to_host());
          }
          const Buffer* b = user.data(source);
          check_input_data(user.node(source), source, b, user.dims());
          return *b;
        });
    for (const auto& [user_out, node] : program_.outputs) {
      const size_t i =
          static_cast<size_t>(std::find(nodes_.begin(), nodes_.end(), node) - nodes_.begin());
      user.set_data(user_out, values[i]);
    }
  }

  RunStats last_run() const override { return {}; }

 private:
  compiler::Optimized program_;
  std::vector<NodeId> nodes_;  // the program's nodes the outputs read
};

}  // namespace

std::unique_ptr<Executable> CudaProgramReference::compile(const Graph& graph) const {
  // (Through the runtime's stage, for its dumps: LUMINAL_DUMP=optimized shows the program.)
  return std::make_unique<ProgramReference>(
      runtime::optimize_and_plan(graph, compiler::Fusion::Off, cudagen::optimize_options())
          .program);
}

}  // namespace luminal

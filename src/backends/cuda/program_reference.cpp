// The CUDA backend's program on the reference interpreter (see CudaProgramReference).
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
    for (const auto& [user_out, node] : program_.outputs) nodes_.push_back(node);
  }

  void run(Graph& user) override {
    std::deque<Buffer> copied;  // inputs set in a GPU's memory, copied to the host
    std::vector<Buffer> values =
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
    for (size_t i = 0; i < values.size(); ++i)
      user.set_data(program_.outputs[i].first, std::move(values[i]));
  }

  RunStats last_run() const override { return {}; }

 private:
  compiler::Optimized program_;
  std::vector<NodeId> nodes_;  // the program's node each output reads, in its order
};

}  // namespace

std::unique_ptr<Executable> CudaProgramReference::compile(const Graph& graph) const {
  // (Through the runtime's stage, for its dumps: LUMINAL_DUMP=optimized shows the program.)
  return std::make_unique<ProgramReference>(
      runtime::optimize_and_plan(graph, compiler::Fusion::Off, cudagen::optimize_options())
          .program);
}

}  // namespace luminal

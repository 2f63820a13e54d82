// Products of the same activations as one launch (see shared_products.hpp).
#include "backends/cuda/shared_products.hpp"

#include <map>
#include <optional>
#include <tuple>
#include <utility>

#include "backends/cuda/gemv.hpp"
#include "backends/cuda/mixed_products.hpp"
#include "backends/cuda/quant_products.hpp"
#include "luminal/compiler/matmul_op.hpp"

namespace luminal::cudagen {
namespace {

// What the products of a run share besides their activations: the weight format, for the
// one-row kernel over half-precision weights; any of the integer kernels' formats, whose
// activations are quantised once for all (llama.cpp's Q4_K_M mixes Q4_K and Q6_K in a
// layer's query, key and value projections).
constexpr uint32_t kIntegerRun = ~0u;

// Kernel k's activations, norm weight (NormQMatMul's; none: ~0) and run kind where it is
// a product over block-format weights that a user input holds, in a format the one-row
// kernels take together. Products of one run share all three.
using SharedKey = std::tuple<uint32_t, uint32_t, uint32_t>;
std::optional<SharedKey> shared_product(const Graph& g, const compiler::KernelPlan& plan,
                                        size_t k) {
  const Node& n = g.node(plan.kernels[k].root);
  const std::optional<QuantProduct> q = quant_product(n);
  if (!q || q->residual || g.node(plan.canon(n.inputs[q->weight].source)).op != Op::Input)
    return std::nullopt;
  const uint32_t x = plan.canon(n.inputs[0].source).value;
  const uint32_t norm = q->norm ? plan.canon(n.inputs[1].source).value : ~0u;
  if (half_weight_type(q->format) && !q->norm) return SharedKey{x, norm, q->format};
  if (integer_products_support(q->format)) return SharedKey{x, norm, kIntegerRun};
  return std::nullopt;
}

}  // namespace

std::optional<QuantProduct> quant_product(const Node& n) {
  if (n.op != Op::Custom) return std::nullopt;
  if (const auto* q = dynamic_cast<const compiler::QMatMulOp*>(n.custom.get()))
    return QuantProduct{q->format, 1, nullptr, false};
  if (const auto* q = dynamic_cast<const compiler::NormQMatMulOp*>(n.custom.get()))
    return QuantProduct{q->format, 2, q, false};
  if (const auto* q = dynamic_cast<const compiler::QMatMulAddOp*>(n.custom.get()))
    return QuantProduct{q->format, 1, nullptr, true};
  return std::nullopt;
}

void adjoin_shared_products(const Graph& g, compiler::KernelPlan& plan) {
  std::vector<size_t> order;
  // Per activations and format: where the run's last product is in `order`, its length.
  std::map<SharedKey, std::pair<size_t, size_t>> runs;
  for (size_t k = 0; k < plan.kernels.size(); ++k) {
    if (const auto key = shared_product(g, plan, k)) {
      const auto it = runs.find(*key);
      if (it != runs.end() && it->second.second < kGemvMatrices) {
        const size_t at = it->second.first + 1;
        order.insert(order.begin() + static_cast<std::ptrdiff_t>(at), k);
        for (auto& [other, run] : runs)
          if (run.first >= at) ++run.first;
        it->second = {at, it->second.second + 1};
        continue;
      }
      runs[*key] = {order.size(), 1};
    }
    order.push_back(k);
  }
  std::vector<compiler::Kernel> kernels;
  kernels.reserve(order.size());
  for (size_t k : order) kernels.push_back(std::move(plan.kernels[k]));
  plan.kernels = std::move(kernels);
}

std::vector<uint32_t> shared_product_runs(const Graph& g, const compiler::KernelPlan& plan) {
  std::vector<uint32_t> runs(plan.kernels.size(), 1);
  for (size_t k = 0; k < plan.kernels.size(); ++k) {
    const auto p = shared_product(g, plan, k);
    if (!p) continue;
    size_t j = k + 1;
    while (j < plan.kernels.size() && j - k < kGemvMatrices && shared_product(g, plan, j) == p) ++j;
    runs[k] = static_cast<uint32_t>(j - k);
    k = j - 1;
  }
  return runs;
}

}  // namespace luminal::cudagen

#include "runtime/kernel_profile.hpp"

#include <algorithm>
#include <cstdio>
#include <map>
#include <utility>

namespace luminal::runtime {

void print_kernel_profile(const Graph& g, const compiler::KernelPlan& plan,
                          const std::string& title, const KernelProfile& p) {
  std::map<std::string, std::pair<double, size_t>> groups;  // seconds, kernels
  double total = 0;
  for (size_t k = 0; k < p.kernels.size(); ++k) {
    const Node& n = g.node(plan.kernels[k].root);
    const std::string what = (n.op == Op::Custom ? n.custom->name() : std::string(op_name(n.op))) +
                             " " + to_string(n.shape);
    groups[what].first += p.kernels[k];
    ++groups[what].second;
    total += p.kernels[k];
  }
  std::vector<std::pair<double, std::string>> order;
  for (const auto& [what, t] : groups) order.emplace_back(t.first, what);
  std::sort(order.rbegin(), order.rend());
  const double per_run = 1e3 / static_cast<double>(std::max<size_t>(p.runs, 1));
  std::fprintf(stderr,
               "luminal profile (%s): %zu kernels, %zu runs, %.3f ms per run in kernels of "
               "%.3f ms per run\n",
               title.c_str(), p.kernels.size(), p.runs, total * per_run, p.run_seconds * per_run);
  for (size_t i = 0; i < order.size() && i < 20; ++i)
    std::fprintf(stderr, "  %6.2f%%  %8.3f ms/run  %4zu x %s\n", 100 * order[i].first / total,
                 order[i].first * per_run, groups[order[i].second].second, order[i].second.c_str());
}

}  // namespace luminal::runtime

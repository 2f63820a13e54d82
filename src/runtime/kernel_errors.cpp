// Kernel-recorded errors as luminal::Error (see kernel_errors.hpp).
#include "runtime/kernel_errors.hpp"

#include <string>

#include "luminal/error.hpp"

namespace luminal::runtime {

void raise_kernel_error(const Graph& g, const compiler::Kernel& k, const int64_t* err) {
  const Node& n = g.node(k.root);
  const std::string where =
      "%" + std::to_string(k.root.value) + " (" + std::string(op_name(n.op)) + ")";
  const char* what = err[0] == 1 ? "Gather in " : err[0] == 2 ? "Scatter " : "Mod in ";
  LUM_CHECK(err[0] != 3) << what << where << ": integer division by zero at element " << err[2];
  LUM_FAIL() << what << where << ": index " << err[1] << " at position " << err[2]
             << " is out of range";
}

}  // namespace luminal::runtime

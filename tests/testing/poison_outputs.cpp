// Linked into every test binary: the CPU backend fills each kernel's output with
// all-ones bytes before the kernel runs (LUMINAL_CPU_POISON), so a kernel that leaves
// elements unwritten fails its test instead of passing on what a recycled buffer held,
// such as the reference interpreter's result for the same output.
#include <cstdlib>

namespace {

const bool poisoned = [] {
  setenv("LUMINAL_CPU_POISON", "1", 0);
  return true;
}();

}  // namespace

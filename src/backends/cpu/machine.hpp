// What the CPU backend's tuned choices depend on (private to src/backends/cpu): the
// processor model and the threads the kernels run on.
#pragma once

#include <string>

namespace luminal::cpugen {

/// /proc/cpuinfo's model name ("unknown cpu" where there is none).
std::string cpu_model();

/// The processor model, the thread count and the BLAS library's build: what a search's
/// winner on this machine depends on (runtime/search.hpp).
std::string cpu_search_context();

}  // namespace luminal::cpugen

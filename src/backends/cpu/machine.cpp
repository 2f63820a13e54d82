// The processor a choice was tuned on (see machine.hpp).
#include "backends/cpu/machine.hpp"

#include <cblas.h>
#include <omp.h>

#include <fstream>

namespace luminal::cpugen {

std::string cpu_model() {
  // Read once: every compile asks, and the file is long on machines of many cores.
  static const std::string model = [] {
    std::ifstream info("/proc/cpuinfo");
    for (std::string line; std::getline(info, line);)
      if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 1);
    return std::string("unknown cpu");
  }();
  return model;
}

std::string cpu_search_context() {
  return cpu_model() + " x " + std::to_string(omp_get_max_threads()) + " threads, " +
         openblas_get_config();
}

}  // namespace luminal::cpugen

// Helpers the `luminal` commands share.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>

#include "luminal/cpu.hpp"
#include "luminal/cuda.hpp"
#include "luminal/reference.hpp"

namespace luminal::cli {

/// A usage error: one line on stderr, exit status 2.
[[noreturn]] inline void usage_error(const std::string& msg) {
  std::fprintf(stderr, "luminal: %s (see --help)\n", msg.c_str());
  std::exit(2);
}

/// `v` as a number, or a usage error naming `option`.
inline double number(const std::string& option, const std::string& v) {
  char* end = nullptr;
  const double d = std::strtod(v.c_str(), &end);
  if (v.empty() || *end) usage_error("option " + option + " expects a number, got '" + v + "'");
  return d;
}

/// Checks a --device value: cpu, reference, or cuda where a GPU can run it. Otherwise
/// a message naming what is wrong (for cuda: what is missing) and exit status 2.
inline void check_device(const std::string& device) {
  if (device == "cuda") {
    std::string why;
    if (cuda_available(&why)) return;
    std::fprintf(stderr, "luminal: --device cuda: the CUDA backend cannot run: %s\n", why.c_str());
    std::exit(2);
  }
  if (device != "cpu" && device != "reference")
    usage_error("unknown device '" + device + "' (cpu, reference or cuda)");
}

/// The backend a (checked) --device value names; `cpu` for the CPU backend's options.
inline std::unique_ptr<Backend> backend_for(const std::string& device, const CpuOptions& cpu) {
  if (device == "cpu") return std::make_unique<CpuBackend>(cpu);
  if (device == "cuda") return std::make_unique<CudaBackend>();
  return std::make_unique<ReferenceBackend>();
}

/// Options every command takes that set how the compiler searches (see the README):
/// `--search off|fast|full` and `--search-budget SECONDS`, passed on as LUMINAL_SEARCH
/// and LUMINAL_SEARCH_BUDGET. False where `option` is neither.
inline bool search_option(const std::string& option, const std::function<std::string()>& value) {
  if (option == "--search") {
    const std::string mode = value();
    if (mode != "off" && mode != "fast" && mode != "full")
      usage_error("--search must be off, fast or full, got '" + mode + "'");
    setenv("LUMINAL_SEARCH", mode.c_str(), 1);
    return true;
  }
  if (option == "--search-budget") {
    const std::string v = value();
    if (number(option, v) < 0) usage_error("--search-budget must be a number of seconds >= 0");
    setenv("LUMINAL_SEARCH_BUDGET", v.c_str(), 1);
    return true;
  }
  return false;
}

/// A `--residual` value: which quantised products carry the activations' second int8
/// term (CpuOptions::residual).
inline CpuOptions::Residual residual_term(const std::string& v) {
  if (v == "none") return CpuOptions::Residual::none;
  if (v == "sensitive") return CpuOptions::Residual::sensitive;
  if (v == "all") return CpuOptions::Residual::all;
  usage_error("--residual must be none, sensitive or all, got '" + v + "'");
}

/// `luminal perplexity`.
int perplexity(int argc, char** argv);

}  // namespace luminal::cli

// The kernel timeline (see kernel_trace.hpp).
#include "backends/cuda/kernel_trace.hpp"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <map>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "backends/cuda/device.hpp"
#include "luminal/error.hpp"
#include "runtime/env.hpp"

namespace luminal::cudagen {
namespace {

struct Trace {
  std::mutex mutex;
  uint64_t* slots = nullptr;  // device memory, never freed: the process's
  int device = -1;            // where the slots are
  std::vector<const void*> launches;
  std::vector<size_t> run_ends;  // launches before each run's end
  std::unordered_map<const void*, std::string> names;
};

Trace& trace() {
  static Trace t;
  return t;
}

}  // namespace

bool tracing() {
  static const bool on = runtime::env_has("LUMINAL_CUDA_TRACE", "1");
  return on;
}

void trace_module(cudaLibrary_t library) {
  Trace& t = trace();
  std::lock_guard lock(t.mutex);
  int device = 0;
  check(cudaGetDevice(&device), "cudaGetDevice");
  if (!t.slots) {
    // Slot 0 counts the launches; a time for each after it.
    check(cudaMalloc(reinterpret_cast<void**>(&t.slots), (kTraceSlots + 1) * sizeof(uint64_t)),
          "allocating the kernel trace");
    check(cudaMemset(t.slots, 0, sizeof(uint64_t)), "clearing the kernel trace");
    t.device = device;
  }
  LUM_CHECK(device == t.device) << "LUMINAL_CUDA_TRACE traces one GPU a process: kernels were "
                                   "loaded on GPU "
                                << t.device << " and then on GPU " << device;
  void* global = nullptr;
  size_t bytes = 0;
  check(cudaLibraryGetGlobal(&global, &bytes, library, "lum_trace"),
        "finding a module's kernel trace pointer");
  copy_to_device(global, &t.slots, sizeof t.slots, "setting a module's kernel trace pointer");
}

void trace_name(const void* function, const std::string& name, bool replace) {
  Trace& t = trace();
  std::lock_guard lock(t.mutex);
  if (replace)
    t.names.insert_or_assign(function, name);
  else
    t.names.try_emplace(function, name);
}

void trace_launch(const void* function) {
  Trace& t = trace();
  std::lock_guard lock(t.mutex);
  t.launches.push_back(function);
}

void trace_run_end() {
  Trace& t = trace();
  std::lock_guard lock(t.mutex);
  if (t.run_ends.empty() || t.run_ends.back() != t.launches.size())
    t.run_ends.push_back(t.launches.size());
}

std::string trace_report() {
  Trace& t = trace();
  std::lock_guard lock(t.mutex);
  if (!t.slots || t.launches.empty()) return "";
  check(cudaDeviceSynchronize(), "waiting for the traced kernels");
  uint64_t count = 0;
  check(cudaMemcpy(&count, t.slots, sizeof count, cudaMemcpyDeviceToHost), "reading the trace");
  const size_t n = std::min<size_t>({count, kTraceSlots, t.launches.size()});
  std::vector<uint64_t> at(n);
  check(cudaMemcpy(at.data(), t.slots + 1, n * sizeof(uint64_t), cudaMemcpyDeviceToHost),
        "reading the trace");
  // The most frequent run length: the runs to add up.
  std::map<size_t, size_t> lengths;
  for (size_t r = 0, begin = 0; r < t.run_ends.size(); begin = t.run_ends[r++])
    if (t.run_ends[r] <= n) ++lengths[t.run_ends[r] - begin];
  size_t length = 0, runs = 0;
  for (const auto& [len, times] : lengths)
    if (times > runs) length = len, runs = times;
  struct Sum {
    size_t launches = 0;
    double ns = 0;
  };
  std::map<std::string, Sum> sums;
  double total = 0;
  for (size_t r = 0, begin = 0; r < t.run_ends.size(); begin = t.run_ends[r++]) {
    const size_t end = t.run_ends[r];
    if (end > n || end - begin != length) continue;
    for (size_t i = begin; i + 1 < end; ++i) {
      const auto name = t.names.find(t.launches[i]);
      Sum& s = sums[name == t.names.end() ? "(unnamed)" : name->second];
      const double ns = static_cast<double>(at[i + 1] - at[i]);
      ++s.launches, s.ns += ns, total += ns;
    }
  }
  std::vector<std::pair<std::string, Sum>> order(sums.begin(), sums.end());
  std::sort(order.begin(), order.end(),
            [](const auto& a, const auto& b) { return a.second.ns > b.second.ns; });
  const double per = static_cast<double>(std::max<size_t>(runs, 1));
  std::string out;
  char line[512];
  std::snprintf(line, sizeof line,
                "kernel trace (LUMINAL_CUDA_TRACE): %zu runs of %zu launches (of %zu runs, "
                "%zu launches, %llu slots): %.3f ms a run from its first kernel's start to its "
                "last kernel's\n",
                runs, length, t.run_ends.size(), t.launches.size(),
                static_cast<unsigned long long>(count), total / per * 1e-6);
  out += line;
  for (const auto& [name, s] : order) {
    std::snprintf(
        line, sizeof line, "  %5.1f%%  %8.1f us a run  %5.1f launches  %6.2f us each  %s\n",
        100 * s.ns / std::max(total, 1.0), s.ns / per * 1e-3, static_cast<double>(s.launches) / per,
        s.ns / static_cast<double>(s.launches) * 1e-3, name.c_str());
    out += line;
  }
  t.launches.clear();
  t.run_ends.clear();
  check(cudaMemset(t.slots, 0, sizeof(uint64_t)), "clearing the kernel trace");
  return out;
}

}  // namespace luminal::cudagen

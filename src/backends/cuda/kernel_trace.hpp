// A timeline of the GPU's kernels as they really run (private to src/backends/cuda):
// with LUMINAL_CUDA_TRACE=1, every luminal kernel's first thread notes the device's
// nanosecond clock as it passes lum_after_prior_grids, in one slot a launch. That is the
// moment the kernel before it finished, so the time between two launches' slots is the
// first one's whole time on the device, in a recorded CUDA graph as much as launched
// alone, and free of the waits and flushes that timing each kernel with events adds (a
// one-block kernel costs a few microseconds either way). The host notes which function
// each launch was and where each run ends; the report adds up each function's time over
// the runs most alike (a decoding step's). Library kernels (cuBLASLt, NCCL) note nothing:
// their time goes to the kernel before them.
#pragma once

#include <cuda_runtime_api.h>

#include <string>

namespace luminal::cudagen {

/// Whether LUMINAL_CUDA_TRACE=1 (read once): kernels are compiled with the trace.
bool tracing();

/// Launches a trace holds (32 MiB of times); later ones are not timed.
constexpr unsigned long long kTraceSlots = 1ull << 22;

/// Points a loaded module's trace slot pointer at this process's slots (allocated on the
/// current device the first time; a module on another device is an Error: one GPU a
/// process is traced).
void trace_module(cudaLibrary_t library);

/// Names a kernel function for the report: `replace` a name it has (a generated kernel's
/// description for its function's name), or not.
void trace_name(const void* function, const std::string& name, bool replace);

/// A launch of `function`, in the order the GPU runs them.
void trace_launch(const void* function);

/// The end of a run: the time after its last launch is not that kernel's.
void trace_run_end();

/// Each function's time over the most frequent kind of run (those of the same number of
/// launches), most first; the slots and notes are cleared. Waits for the device.
std::string trace_report();

}  // namespace luminal::cudagen

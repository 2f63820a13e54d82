// NVRTC compilation with an on-disk cache, and loading cubins (see nvrtc.hpp).
#include "backends/cuda/nvrtc.hpp"

#include <nvrtc.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "backends/cuda/device.hpp"
#include "backends/cuda/kernel_trace.hpp"
#include "luminal/error.hpp"
#include "luminal/hash.hpp"
#include "runtime/kernel_cache.hpp"

namespace luminal::cudagen {
namespace {

namespace fs = std::filesystem;

// No fast math: kernels must round as the reference does. No FMA contraction either, so
// that a fused a * b + c rounds twice, as op-by-op evaluation does; generated kernels
// are bound by memory, not by these instructions.
std::vector<std::string> options(const std::string& arch) {
  return {"--gpu-architecture=" + arch, "--std=c++17", "--fmad=false", "-default-device",
          "--extra-device-vectorization"};
}

void check_nvrtc(nvrtcResult r, const char* what) {
  LUM_CHECK(r == NVRTC_SUCCESS) << what << ": " << nvrtcGetErrorString(r);
}

void write_file(const fs::path& path, const std::string& bytes) {
  const fs::path tmp = path.string() + "." + runtime::unique_tag() + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary);
    f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    LUM_CHECK(f) << "cannot write " << tmp;
  }
  fs::rename(tmp, path);
}

}  // namespace

std::string nvrtc_version() {
  int major = 0, minor = 0;
  check_nvrtc(nvrtcVersion(&major, &minor), "nvrtcVersion");
  return std::to_string(major) + "." + std::to_string(minor);
}

namespace {

// Compiles under way, by cubin file: a second caller waits for the first's result.
std::mutex in_flight_mutex;
std::unordered_map<std::string, std::shared_future<Cubin>> in_flight;

// NVRTC's compile of `source` (options `opts`) into `cubin_path`; `key` names the kept
// source of a failed compile.
Cubin compile_now(const std::string& source, const std::vector<std::string>& opts,
                  const fs::path& cubin_path, const std::string& key) {
  const auto start = std::chrono::steady_clock::now();
  const fs::path dir = cubin_path.parent_path();
  Cubin out;
  nvrtcProgram prog = nullptr;
  check_nvrtc(nvrtcCreateProgram(&prog, source.c_str(), "luminal_kernels.cu", 0, nullptr, nullptr),
              "nvrtcCreateProgram");
  std::vector<const char*> argv;
  for (const std::string& o : opts) argv.push_back(o.c_str());
  const nvrtcResult r = nvrtcCompileProgram(prog, static_cast<int>(argv.size()), argv.data());
  size_t log_size = 0;
  nvrtcGetProgramLogSize(prog, &log_size);
  std::string log(log_size, '\0');
  if (log_size) nvrtcGetProgramLog(prog, log.data());
  if (r != NVRTC_SUCCESS) {
    nvrtcDestroyProgram(&prog);
    const fs::path src = dir / ("c" + key + ".cu");
    write_file(src, source);
    LUM_FAIL() << "NVRTC failed on generated CUDA kernels (" << nvrtcGetErrorString(r)
               << "); source kept at " << src.string() << "\n"
               << log.substr(0, 4000);
  }
  size_t size = 0;
  check_nvrtc(nvrtcGetCUBINSize(prog, &size), "nvrtcGetCUBINSize");
  out.code.resize(size);
  check_nvrtc(nvrtcGetCUBIN(prog, out.code.data()), "nvrtcGetCUBIN");
  nvrtcDestroyProgram(&prog);
  write_file(cubin_path, out.code);
  out.compile_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return out;
}

}  // namespace

Cubin compile_cubin(const std::string& source, const std::string& arch) {
  const std::vector<std::string> opts = options(arch);
  uint64_t h = hash_bytes(nvrtc_version());
  for (const std::string& o : opts) h = hash_bytes(o, h);
  const std::string key = runtime::hex(hash_bytes(source, h));
  const fs::path cubin_path = fs::path(runtime::cache_dir()) / ("c" + key + "." + arch + ".cubin");
  if (std::ifstream f{cubin_path, std::ios::binary}) {
    Cubin out;
    out.code.assign(std::istreambuf_iterator<char>(f), {});
    out.cache_hit = true;
    return out;
  }
  std::promise<Cubin> mine;
  std::shared_future<Cubin> theirs;
  {
    const std::lock_guard<std::mutex> lock(in_flight_mutex);
    const auto [it, fresh] = in_flight.try_emplace(cubin_path.string(), mine.get_future().share());
    if (!fresh) theirs = it->second;
  }
  if (theirs.valid()) return theirs.get();
  auto done = [&] {
    const std::lock_guard<std::mutex> lock(in_flight_mutex);
    in_flight.erase(cubin_path.string());
  };
  try {
    Cubin out = compile_now(source, opts, cubin_path, key);
    mine.set_value(out);
    done();
    return out;
  } catch (...) {
    mine.set_exception(std::current_exception());
    done();
    throw;
  }
}

std::vector<std::future<void>> compile_in_background(std::vector<std::string> sources,
                                                     const std::string& arch) {
  std::vector<std::future<void>> tasks;
  for (std::string& source : sources)
    tasks.push_back(std::async(std::launch::async, [source = std::move(source), arch] {
      try {
        compile_cubin(source, arch);
      } catch (const Error&) {  // (raised again by the compile_cubin that needs it)
      }
    }));
  return tasks;
}

Module::Module(const std::string& cubin) {
  check(cudaLibraryLoadData(&library_, cubin.data(), nullptr, nullptr, 0, nullptr, nullptr, 0),
        "loading compiled CUDA kernels");
  if (tracing()) trace_module(library_);
}

Module::~Module() {
  if (library_) cudaLibraryUnload(library_);
}

const void* Module::kernel(const std::string& name) const {
  cudaKernel_t k = nullptr;
  // (The message only on failure: this runs for many launches.)
  if (const cudaError_t e = cudaLibraryGetKernel(&k, library_, name.c_str()); e != cudaSuccess)
    check(e, ("finding kernel " + name).c_str());
  if (tracing()) trace_name(k, name, false);
  return reinterpret_cast<const void*>(k);
}

}  // namespace luminal::cudagen

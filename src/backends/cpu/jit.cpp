// System-compiler JIT with an on-disk cache.
#include "backends/cpu/jit.hpp"

#include <dlfcn.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "luminal/error.hpp"
#include "luminal/hash.hpp"
#include "runtime/kernel_cache.hpp"

namespace luminal::cpugen {
namespace {

namespace fs = std::filesystem;
using runtime::cache_dir;
using runtime::hex;

const char* compiler() {
  const char* c = std::getenv("LUMINAL_CXX");
  return c && *c ? c : "c++";
}

const std::string& flags() {
  static const std::string f =
      "-std=c++17 -O3 -march=native -fno-math-errno -fopenmp -fPIC -shared -w";
  return f;
}

// Runs a shell command; returns its exit status and combined output.
std::pair<int, std::string> run(const std::string& cmd) {
  std::array<char, 4096> buf;
  std::string out;
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  LUM_CHECK(p) << "cannot run the C++ compiler (" << cmd << ")";
  while (size_t n = fread(buf.data(), 1, buf.size(), p)) out.append(buf.data(), n);
  const int status = pclose(p);
  return {status, out};
}

// The compiler's identity is part of the cache key: a new compiler recompiles.
const std::string& compiler_version() {
  static const std::string v = run(std::string(compiler()) + " --version").second;
  return v;
}

std::unique_ptr<SharedObject> load(const std::string& path) {
  void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  LUM_CHECK(h) << "cannot load compiled kernels " << path << ": " << dlerror();
  return std::make_unique<SharedObject>(h, path);
}

}  // namespace

SharedObject::~SharedObject() {
  if (handle_) dlclose(handle_);
}

void* SharedObject::symbol(const std::string& name) const {
  void* s = dlsym(handle_, name.c_str());
  LUM_CHECK(s) << "compiled kernels " << path_ << " lack symbol " << name;
  return s;
}

JitResult compile_and_load(const std::string& source) {
  const auto start = std::chrono::steady_clock::now();
  const std::string key = hex(hash_bytes(source, hash_bytes(flags() + compiler_version())));
  const fs::path dir = cache_dir();
  const fs::path so = dir / ("k" + key + ".so");
  JitResult r;
  if (fs::exists(so)) {
    r.library = load(so.string());
    r.cache_hit = true;
    return r;
  }
  // Source and library under unique temporary names, then renamed: concurrent compiles
  // of the same kernels (ranks of a parallel run) never read or load a half-written file.
  const std::string tag = runtime::unique_tag();
  const fs::path src = dir / ("k" + key + "." + tag + ".tmp.cpp");
  const fs::path tmp = dir / ("k" + key + "." + tag + ".tmp.so");
  {
    std::ofstream f(src);
    f << source;
    LUM_CHECK(f) << "cannot write kernel source " << src;
  }
  const std::string cmd =
      std::string(compiler()) + " " + flags() + " -o '" + tmp.string() + "' '" + src.string() + "'";
  const auto [status, output] = run(cmd);
  if (status != 0) {
    std::error_code ec;
    fs::remove(tmp, ec);
    LUM_FAIL() << "the C++ compiler failed on generated kernels; source kept at " << src.string()
               << "\ncommand: " << cmd << "\n"
               << output.substr(0, 4000);
  }
  fs::rename(tmp, so);
  std::error_code ec;
  fs::rename(src, dir / ("k" + key + ".cpp"), ec);  // kept beside it, to read
  r.library = load(so.string());
  r.compile_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return r;
}

}  // namespace luminal::cpugen

// The on-disk kernel cache's location and file naming (see kernel_cache.hpp).
#include "runtime/kernel_cache.hpp"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "luminal/error.hpp"
#include "luminal/hash.hpp"

namespace luminal::runtime {

namespace fs = std::filesystem;

std::string cache_dir() {
  fs::path dir;
  if (const char* d = std::getenv("LUMINAL_CACHE_DIR"); d && *d) {
    dir = d;
  } else if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) {
    dir = fs::path(x) / "luminal";
  } else if (const char* home = std::getenv("HOME"); home && *home) {
    dir = fs::path(home) / ".cache" / "luminal";
  } else {
    dir = fs::temp_directory_path() / "luminal-cache";
  }
  std::error_code ec;
  fs::create_directories(dir, ec);
  LUM_CHECK(!ec) << "cannot create the kernel cache directory " << dir << ": " << ec.message()
                 << " (set LUMINAL_CACHE_DIR)";
  return dir.string();
}

std::string hex(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

std::string unique_tag() {
  static std::atomic<uint64_t> counter{0};
  const uint64_t now =
      static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  return std::to_string(getpid()) + "-" + hex(hash_mix(now, counter++));
}

}  // namespace luminal::runtime

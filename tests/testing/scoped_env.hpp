// An environment variable set for a scope and restored after it (tests of switches read
// from the environment), and a kernel cache directory of a test's own.
#pragma once

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>

namespace luminal::testing {

class ScopedEnv {
 public:
  /// Sets `name` to `value`, or unsets it where `value` is null.
  ScopedEnv(std::string name, const char* value) : name_(std::move(name)) {
    if (const char* old = std::getenv(name_.c_str())) old_ = old;
    if (value)
      setenv(name_.c_str(), value, 1);
    else
      unsetenv(name_.c_str());
  }
  ~ScopedEnv() {
    if (old_)
      setenv(name_.c_str(), old_->c_str(), 1);
    else
      unsetenv(name_.c_str());
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  std::string name_;
  std::optional<std::string> old_;
};

/// An empty kernel cache directory for a scope, named for `tag` and the process, set as
/// LUMINAL_CACHE_DIR, and removed with what was written there after the scope.
class ScopedCacheDir {
 public:
  explicit ScopedCacheDir(const std::string& tag)
      : path_(std::filesystem::temp_directory_path() /
              ("luminal-" + tag + "-" + std::to_string(getpid()))) {
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
    env_.emplace("LUMINAL_CACHE_DIR", path_.c_str());
  }
  ~ScopedCacheDir() {
    env_.reset();
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  ScopedCacheDir(const ScopedCacheDir&) = delete;
  ScopedCacheDir& operator=(const ScopedCacheDir&) = delete;

  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
  std::optional<ScopedEnv> env_;
};

}  // namespace luminal::testing

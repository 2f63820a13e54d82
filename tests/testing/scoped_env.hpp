// An environment variable set for a scope and restored after it (tests of switches read
// from the environment).
#pragma once

#include <cstdlib>
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

}  // namespace luminal::testing

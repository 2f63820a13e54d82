// Compiling generated C++ into a shared object with the system compiler, cached on
// disk by content hash (private to src/backends/cpu).
#pragma once

#include <memory>
#include <string>

namespace luminal::cpugen {

/// A loaded shared object; closed on destruction.
class SharedObject {
 public:
  SharedObject(void* handle, std::string path) : handle_(handle), path_(std::move(path)) {}
  ~SharedObject();
  SharedObject(const SharedObject&) = delete;
  SharedObject& operator=(const SharedObject&) = delete;
  /// The address of an exported symbol; throws luminal::Error if absent.
  void* symbol(const std::string& name) const;
  const std::string& path() const { return path_; }

 private:
  void* handle_;
  std::string path_;
};

struct JitResult {
  std::unique_ptr<SharedObject> library;
  bool cache_hit = false;
  double compile_seconds = 0;
};

/// Compiles (or finds in the cache) and loads `source`. A compiler failure keeps the
/// source on disk and raises luminal::Error naming it with the compiler's message.
JitResult compile_and_load(const std::string& source);

}  // namespace luminal::cpugen

// A read-only memory-mapped file: model weights are read in place, not copied.
#pragma once

#include <cstddef>
#include <span>
#include <string>

namespace luminal::models {

class MappedFile {
 public:
  /// Maps `path`; throws luminal::Error naming the file if it cannot be opened.
  explicit MappedFile(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  std::span<const std::byte> bytes() const { return {data_, size_}; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  const std::byte* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace luminal::models

// safetensors: memory-mapped reading with full header validation, and atomic writing.
#pragma once

#include <map>
#include <span>
#include <string>
#include <vector>

#include "luminal/buffer.hpp"
#include "luminal/models/mapped_file.hpp"

namespace luminal::models {

struct SafetensorsTensor {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  size_t begin = 0, end = 0;  // byte range within the data section
  size_t numel() const;
};

class SafetensorsFile {
 public:
  /// Maps and validates `path`: header size, JSON, dtypes, shapes and offsets (in range,
  /// sized to match, covering the data without overlap). Errors name the file and tensor.
  explicit SafetensorsFile(const std::string& path);

  const std::vector<SafetensorsTensor>& tensors() const { return tensors_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  bool has(const std::string& name) const;
  const SafetensorsTensor& tensor(const std::string& name) const;
  /// The raw bytes of a tensor in the mapping.
  std::span<const std::byte> data(const SafetensorsTensor& t) const;
  /// A copy of a tensor in its own dtype.
  Buffer read(const std::string& name) const;
  const std::string& path() const { return file_.path(); }

 private:
  MappedFile file_;
  std::vector<SafetensorsTensor> tensors_;
  std::map<std::string, std::string> metadata_;
  size_t data_start_ = 0;
};

struct NamedTensor {
  std::string name;
  std::vector<int64_t> shape;
  const Buffer* data;
};

/// Writes a safetensors file: to a temporary name first, renamed into place, so an
/// error never leaves a half-written file at `path`.
void save_safetensors(const std::string& path, const std::vector<NamedTensor>& tensors,
                      const std::map<std::string, std::string>& metadata = {});

}  // namespace luminal::models

// GGUF (v2 and v3): metadata, tensor infos and data, with dequantisation of the common
// ggml block formats. Every read is bounds-checked: a truncated or corrupt file raises
// luminal::Error naming the file and what is wrong.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <variant>
#include <vector>

#include "luminal/buffer.hpp"
#include "luminal/models/mapped_file.hpp"
#include "luminal/quant.hpp"

namespace luminal::models {

using luminal::dequantize;
using luminal::ggml_block_layout;
using luminal::ggml_type_name;
using luminal::GgmlType;

struct GgufValue;
using GgufArray = std::vector<GgufValue>;
/// A metadata value: integers widen to int64 / uint64, floats to double.
struct GgufValue {
  std::variant<uint64_t, int64_t, double, bool, std::string, std::shared_ptr<GgufArray>> v;
  std::string to_string() const;
};

struct GgufTensorInfo {
  std::string name;
  std::vector<int64_t> shape;  // row-major: the reverse of the file's ggml dims
  uint32_t type = 0;
  uint64_t offset = 0;  // from the start of the data section
  size_t bytes = 0;
  size_t numel() const;
};

class GgufFile {
 public:
  /// Opens, maps and validates `path`.
  explicit GgufFile(const std::string& path);

  uint32_t version() const { return version_; }
  const std::map<std::string, GgufValue>& metadata() const { return metadata_; }
  const GgufValue* find(const std::string& key) const;
  /// Typed getters: throw naming the key if absent or of another type.
  std::string get_string(const std::string& key) const;
  int64_t get_int(const std::string& key) const;
  double get_float(const std::string& key) const;
  /// A boolean flag (stored as bool or integer); `fallback` if absent.
  bool get_flag(const std::string& key, bool fallback) const;
  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
  const GgufTensorInfo& tensor(const std::string& name) const;
  bool has_tensor(const std::string& name) const;
  /// The raw bytes of a tensor in the mapping.
  std::span<const std::byte> data(const GgufTensorInfo& t) const;
  /// A tensor decoded to f32.
  Buffer read(const std::string& name) const;
  const std::string& path() const { return file_.path(); }

 private:
  MappedFile file_;
  uint32_t version_ = 0;
  std::map<std::string, GgufValue> metadata_;
  std::vector<GgufTensorInfo> tensors_;
  size_t data_start_ = 0;
};

}  // namespace luminal::models

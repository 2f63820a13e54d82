// GGUF parsing with bounds checks on every read.
#include "luminal/models/gguf.hpp"

#include <unordered_set>

#include <cstring>
#include <sstream>

#include "luminal/error.hpp"

namespace luminal::models {
namespace {

class Cursor {
 public:
  Cursor(std::span<const std::byte> bytes, const std::string& path) : b_(bytes), path_(path) {}

  template <class T>
  T read(const char* what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, b_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  std::string string(const char* what) {
    const auto n = read<uint64_t>(what);
    need(n, what);
    std::string s(reinterpret_cast<const char*>(b_.data() + pos_), n);
    pos_ += n;
    return s;
  }
  size_t pos() const { return pos_; }
  size_t remaining() const { return b_.size() - pos_; }
  [[noreturn]] void fail(const std::string& what) const {
    LUM_FAIL() << path_ << ": corrupt GGUF file: " << what << " (at byte " << pos_ << " of "
               << b_.size() << ")";
  }

 private:
  void need(uint64_t n, const char* what) const {
    if (n > b_.size() - pos_) {
      LUM_FAIL() << path_ << ": truncated GGUF file: " << what << " needs " << n
                 << " bytes at byte " << pos_ << ", file has " << b_.size();
    }
  }
  std::span<const std::byte> b_;
  const std::string& path_;
  size_t pos_ = 0;
};

GgufValue read_value(Cursor& c, uint32_t type, int depth) {
  GgufValue v;
  switch (type) {
    case 0:
      v.v = uint64_t{c.read<uint8_t>("u8 value")};
      break;
    case 1:
      v.v = int64_t{c.read<int8_t>("i8 value")};
      break;
    case 2:
      v.v = uint64_t{c.read<uint16_t>("u16 value")};
      break;
    case 3:
      v.v = int64_t{c.read<int16_t>("i16 value")};
      break;
    case 4:
      v.v = uint64_t{c.read<uint32_t>("u32 value")};
      break;
    case 5:
      v.v = int64_t{c.read<int32_t>("i32 value")};
      break;
    case 6:
      v.v = double{c.read<float>("f32 value")};
      break;
    case 7: {
      const auto b = c.read<uint8_t>("bool value");
      if (b > 1) c.fail("bool value " + std::to_string(b));
      v.v = b == 1;
      break;
    }
    case 8:
      v.v = c.string("string value");
      break;
    case 9: {
      if (depth > 3) c.fail("arrays nested too deeply");
      const auto elem = c.read<uint32_t>("array type");
      const auto n = c.read<uint64_t>("array length");
      if (n > c.remaining()) c.fail("array of " + std::to_string(n) + " elements cannot fit");
      auto arr = std::make_shared<GgufArray>();
      arr->reserve(static_cast<size_t>(n));
      for (uint64_t i = 0; i < n; ++i) arr->push_back(read_value(c, elem, depth + 1));
      v.v = std::move(arr);
      break;
    }
    case 10:
      v.v = c.read<uint64_t>("u64 value");
      break;
    case 11:
      v.v = c.read<int64_t>("i64 value");
      break;
    case 12:
      v.v = c.read<double>("f64 value");
      break;
    default:
      c.fail("unknown metadata value type " + std::to_string(type));
  }
  return v;
}

}  // namespace

std::string GgufValue::to_string() const {
  std::ostringstream os;
  std::visit(
      [&](const auto& x) {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, std::shared_ptr<GgufArray>>) {
          os << "[" << x->size() << " items]";
        } else if constexpr (std::is_same_v<T, std::string>) {
          os << '"' << x << '"';
        } else {
          os << x;
        }
      },
      v);
  return os.str();
}

size_t GgufTensorInfo::numel() const {
  size_t n = 1;
  for (int64_t d : shape) n *= static_cast<size_t>(d);
  return n;
}

GgufFile::GgufFile(const std::string& path) : file_(path) {
  Cursor c(file_.bytes(), file_.path());
  const auto magic = c.read<uint32_t>("magic");
  if (magic != 0x46554747u) c.fail("not a GGUF file (bad magic)");
  version_ = c.read<uint32_t>("version");
  if (version_ != 2 && version_ != 3)
    c.fail("unsupported GGUF version " + std::to_string(version_));
  const auto n_tensors = c.read<uint64_t>("tensor count");
  const auto n_kv = c.read<uint64_t>("metadata count");
  if (n_kv > c.remaining() / 13 || n_tensors > c.remaining() / 24)
    c.fail("counts larger than the file");
  for (uint64_t i = 0; i < n_kv; ++i) {
    std::string key = c.string("metadata key");
    const auto type = c.read<uint32_t>("metadata type");
    metadata_[std::move(key)] = read_value(c, type, 0);
  }
  std::unordered_set<std::string> names;
  for (uint64_t i = 0; i < n_tensors; ++i) {
    GgufTensorInfo t;
    t.name = c.string("tensor name");
    const auto n_dims = c.read<uint32_t>("tensor rank");
    if (n_dims == 0 || n_dims > 8)
      c.fail("tensor '" + t.name + "' has rank " + std::to_string(n_dims));
    uint64_t numel = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      const auto dim = c.read<uint64_t>("tensor dim");
      if (dim == 0 || dim > (uint64_t{1} << 40) || numel > (uint64_t{1} << 48) / dim)
        c.fail("tensor '" + t.name + "' has an invalid dimension " + std::to_string(dim));
      numel *= dim;
      t.shape.insert(t.shape.begin(), static_cast<int64_t>(dim));  // ggml dims are innermost first
    }
    t.type = c.read<uint32_t>("tensor type");
    t.offset = c.read<uint64_t>("tensor offset");
    size_t be, bb;
    if (ggml_block_layout(t.type, be, bb)) {
      if (numel % be != 0)
        c.fail("tensor '" + t.name + "' is not a whole number of " + ggml_type_name(t.type) +
               " blocks");
      t.bytes = static_cast<size_t>(numel / be * bb);
    }
    if (!names.insert(t.name).second) c.fail("tensor '" + t.name + "' appears twice");
    tensors_.push_back(std::move(t));
  }
  uint64_t alignment = 32;
  if (const GgufValue* a = find("general.alignment")) {
    const auto* u = std::get_if<uint64_t>(&a->v);
    if (!u || *u == 0 || (*u & (*u - 1)) != 0) c.fail("general.alignment must be a power of two");
    alignment = *u;
  }
  data_start_ = static_cast<size_t>((c.pos() + alignment - 1) / alignment * alignment);
  for (const GgufTensorInfo& t : tensors_) {
    if (t.offset % alignment != 0) c.fail("tensor '" + t.name + "' data is not aligned");
    const bool fits =
        !t.bytes || (data_start_ <= file_.size() && t.offset <= file_.size() - data_start_ &&
                     t.bytes <= file_.size() - data_start_ - t.offset);
    LUM_CHECK(fits) << file_.path() << ": truncated GGUF file: tensor '" << t.name << "' ("
                    << ggml_type_name(t.type) << ", " << t.bytes << " bytes at data offset "
                    << t.offset << ") runs past the end of the file (" << file_.size() << " bytes)";
  }
}

const GgufValue* GgufFile::find(const std::string& key) const {
  auto it = metadata_.find(key);
  return it == metadata_.end() ? nullptr : &it->second;
}

std::string GgufFile::get_string(const std::string& key) const {
  const GgufValue* v = find(key);
  LUM_CHECK(v) << path() << ": metadata key '" << key << "' is missing";
  const auto* s = std::get_if<std::string>(&v->v);
  LUM_CHECK(s) << path() << ": metadata key '" << key << "' is not a string";
  return *s;
}

int64_t GgufFile::get_int(const std::string& key) const {
  const GgufValue* v = find(key);
  LUM_CHECK(v) << path() << ": metadata key '" << key << "' is missing";
  if (const auto* u = std::get_if<uint64_t>(&v->v)) return static_cast<int64_t>(*u);
  if (const auto* i = std::get_if<int64_t>(&v->v)) return *i;
  LUM_FAIL() << path() << ": metadata key '" << key << "' is not an integer";
}

double GgufFile::get_float(const std::string& key) const {
  const GgufValue* v = find(key);
  LUM_CHECK(v) << path() << ": metadata key '" << key << "' is missing";
  if (const auto* d = std::get_if<double>(&v->v)) return *d;
  return static_cast<double>(get_int(key));
}

bool GgufFile::get_flag(const std::string& key, bool fallback) const {
  const GgufValue* v = find(key);
  if (!v) return fallback;
  if (const auto* b = std::get_if<bool>(&v->v)) return *b;
  return get_int(key) != 0;
}

bool GgufFile::has_tensor(const std::string& name) const {
  for (const GgufTensorInfo& t : tensors_)
    if (t.name == name) return true;
  return false;
}

const GgufTensorInfo& GgufFile::tensor(const std::string& name) const {
  for (const GgufTensorInfo& t : tensors_)
    if (t.name == name) return t;
  LUM_FAIL() << path() << ": no tensor named '" << name << "'";
}

std::span<const std::byte> GgufFile::data(const GgufTensorInfo& t) const {
  LUM_CHECK(t.bytes > 0) << path() << ": tensor '" << t.name << "' has unsupported type "
                         << ggml_type_name(t.type);
  return file_.bytes().subspan(data_start_ + t.offset, t.bytes);
}

Buffer GgufFile::read(const std::string& name) const {
  const GgufTensorInfo& t = tensor(name);
  const auto bytes = data(t);
  Buffer out(DType::F32, t.numel(), Buffer::Uninitialized{});
  dequantize(t.type, bytes.data(), t.numel(), out.span<float>().data());
  return out;
}

}  // namespace luminal::models

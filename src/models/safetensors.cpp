// safetensors reading and writing.
#include "luminal/models/safetensors.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "luminal/error.hpp"
#include "models/json.hpp"

namespace luminal::models {
namespace {

struct DtypeName {
  const char* name;
  DType dtype;
};
constexpr DtypeName kDtypes[] = {{"F32", DType::F32}, {"F16", DType::F16}, {"BF16", DType::BF16},
                                 {"F64", DType::F64}, {"I32", DType::I32}, {"I64", DType::I64},
                                 {"I8", DType::I8},   {"U8", DType::U8},   {"BOOL", DType::Bool}};

const char* name_of(DType t) {
  for (const auto& d : kDtypes)
    if (d.dtype == t) return d.name;
  return "?";
}

constexpr uint64_t kMaxHeader = 100u << 20;

}  // namespace

size_t SafetensorsTensor::numel() const {
  size_t n = 1;
  for (int64_t d : shape) n *= static_cast<size_t>(d);
  return n;
}

SafetensorsFile::SafetensorsFile(const std::string& path) : file_(path) {
  const auto bytes = file_.bytes();
  LUM_CHECK(bytes.size() >= 8) << path << ": not a safetensors file (only " << bytes.size()
                               << " bytes)";
  uint64_t n;
  std::memcpy(&n, bytes.data(), 8);
  LUM_CHECK(n <= kMaxHeader && n <= bytes.size() - 8)
      << path << ": corrupt safetensors header size " << n << " (file has " << bytes.size()
      << " bytes)";
  data_start_ = 8 + static_cast<size_t>(n);
  const size_t data_size = bytes.size() - data_start_;
  const std::string_view text(reinterpret_cast<const char*>(bytes.data() + 8),
                              static_cast<size_t>(n));
  const Json header = parse_json(text, path + " header");
  LUM_CHECK(header.is_object()) << path << ": safetensors header is not a JSON object";
  for (const auto& [name, entry] : header.object()) {
    if (name == "__metadata__") {
      LUM_CHECK(entry.is_object()) << path << ": __metadata__ is not an object";
      for (const auto& [k, v] : entry.object()) {
        LUM_CHECK(v.is_string()) << path << ": __metadata__ value for '" << k
                                 << "' is not a string";
        metadata_[k] = v.string();
      }
      continue;
    }
    auto bad = [&](const std::string& what) {
      LUM_FAIL() << path << ": tensor '" << name << "': " << what;
    };
    if (!entry.is_object()) bad("entry is not an object");
    const Json* dt = entry.find("dtype");
    const Json* shape = entry.find("shape");
    const Json* offsets = entry.find("data_offsets");
    if (!dt || !dt->is_string()) bad("missing dtype");
    if (!shape || !shape->is_array()) bad("missing shape");
    if (!offsets || !offsets->is_array() || offsets->array().size() != 2)
      bad("data_offsets must be [begin, end]");
    SafetensorsTensor t;
    t.name = name;
    const auto* d = std::find_if(std::begin(kDtypes), std::end(kDtypes),
                                 [&](const DtypeName& x) { return dt->string() == x.name; });
    if (d == std::end(kDtypes)) bad("unsupported dtype " + dt->string());
    t.dtype = d->dtype;
    uint64_t numel = 1;
    for (const Json& s : shape->array()) {
      if (!s.is_int() || s.integer() < 0 || s.integer() > (int64_t{1} << 40))
        bad("bad dimension in shape");
      numel *= static_cast<uint64_t>(s.integer());
      if (numel > (uint64_t{1} << 44)) bad("shape too large");
      t.shape.push_back(s.integer());
    }
    const Json& b = offsets->array()[0];
    const Json& e = offsets->array()[1];
    if (!b.is_int() || !e.is_int() || b.integer() < 0 || e.integer() < b.integer())
      bad("bad data_offsets");
    t.begin = static_cast<size_t>(b.integer());
    t.end = static_cast<size_t>(e.integer());
    if (t.end > data_size)
      bad("data_offsets end " + std::to_string(t.end) + " beyond the " + std::to_string(data_size) +
          " data bytes (truncated file?)");
    if (t.end - t.begin != numel * dtype_size(t.dtype))
      bad("holds " + std::to_string(t.end - t.begin) + " bytes but " + dt->string() +
          " shape needs " + std::to_string(numel * dtype_size(t.dtype)));
    tensors_.push_back(std::move(t));
  }
  // The tensors must tile the data section exactly: no overlap, no gap.
  std::vector<const SafetensorsTensor*> order;
  for (const auto& t : tensors_) order.push_back(&t);
  std::sort(order.begin(), order.end(), [](auto* a, auto* b) { return a->begin < b->begin; });
  size_t at = 0;
  for (const SafetensorsTensor* t : order) {
    LUM_CHECK(t->begin == at) << path << ": tensor '" << t->name << "' starts at byte " << t->begin
                              << ", expected " << at << " (overlapping or gapped data)";
    at = t->end;
  }
  LUM_CHECK(at == data_size) << path << ": " << data_size - at << " data bytes belong to no tensor";
}

bool SafetensorsFile::has(const std::string& name) const {
  return std::any_of(tensors_.begin(), tensors_.end(),
                     [&](const auto& t) { return t.name == name; });
}

const SafetensorsTensor& SafetensorsFile::tensor(const std::string& name) const {
  for (const auto& t : tensors_)
    if (t.name == name) return t;
  LUM_FAIL() << path() << ": no tensor named '" << name << "'";
}

std::span<const std::byte> SafetensorsFile::data(const SafetensorsTensor& t) const {
  return file_.bytes().subspan(data_start_ + t.begin, t.end - t.begin);
}

Buffer SafetensorsFile::read(const std::string& name) const {
  const SafetensorsTensor& t = tensor(name);
  Buffer out(t.dtype, t.numel(), Buffer::Uninitialized{});
  const auto bytes = data(t);
  if (!bytes.empty()) std::memcpy(out.data(), bytes.data(), bytes.size());
  return out;
}

void save_safetensors(const std::string& path, const std::vector<NamedTensor>& tensors,
                      const std::map<std::string, std::string>& metadata) {
  std::vector<const NamedTensor*> order;
  for (const auto& t : tensors) {
    LUM_CHECK(t.data) << "save_safetensors: tensor '" << t.name << "' has no data";
    size_t numel = 1;
    for (int64_t d : t.shape) numel *= static_cast<size_t>(d);
    LUM_CHECK(numel == t.data->numel())
        << "save_safetensors: tensor '" << t.name << "' shape holds " << numel
        << " elements, its data " << t.data->numel();
    order.push_back(&t);
  }
  std::sort(order.begin(), order.end(), [](auto* a, auto* b) { return a->name < b->name; });
  std::ostringstream h;
  h << '{';
  bool first = true;
  if (!metadata.empty()) {
    h << "\"__metadata__\":{";
    for (const auto& [k, v] : metadata) {
      h << (first ? "" : ",") << '"' << json_escape(k) << "\":\"" << json_escape(v) << '"';
      first = false;
    }
    h << '}';
  }
  size_t offset = 0;
  for (const NamedTensor* t : order) {
    h << (metadata.empty() && t == order.front() ? "" : ",") << '"' << json_escape(t->name)
      << "\":{\"dtype\":\"" << name_of(t->data->dtype()) << "\",\"shape\":[";
    for (size_t i = 0; i < t->shape.size(); ++i) h << (i ? "," : "") << t->shape[i];
    h << "],\"data_offsets\":[" << offset << ',' << offset + t->data->bytes() << "]}";
    offset += t->data->bytes();
  }
  h << '}';
  std::string header = h.str();
  header.append((8 - header.size() % 8) % 8, ' ');  // keep the data 8-byte aligned
  const std::string tmp = path + ".tmp-" + std::to_string(::getpid());
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    LUM_CHECK(f) << "cannot write " << tmp;
    const uint64_t n = header.size();
    f.write(reinterpret_cast<const char*>(&n), 8);
    f.write(header.data(), static_cast<std::streamsize>(header.size()));
    for (const NamedTensor* t : order)
      f.write(static_cast<const char*>(t->data->data()),
              static_cast<std::streamsize>(t->data->bytes()));
    if (!f) {
      f.close();
      std::filesystem::remove(tmp);
      LUM_FAIL() << "error writing " << tmp;
    }
  }
  std::filesystem::rename(tmp, path);
}

}  // namespace luminal::models

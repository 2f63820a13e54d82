// Strict JSON parsing.
#include "models/json.hpp"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <fstream>
#include <iterator>

#include "luminal/error.hpp"

namespace luminal::models {
namespace {

// Builds our tree from nlohmann's SAX events: the library does the lexing (strict: no
// comments, no trailing commas, valid UTF-8, paired surrogates); we keep object keys in
// file order, refuse nesting deeper than kMaxDepth before it can exhaust the stack, and
// turn integers beyond int64 into doubles.
class Builder final : public nlohmann::json_sax<nlohmann::json> {
 public:
  explicit Builder(const std::string& what) : what_(what) {}
  Json result() { return std::move(root_); }

  bool null() override { return add(Json{nullptr}); }
  bool boolean(bool b) override { return add(Json{b}); }
  bool number_integer(number_integer_t v) override { return add(Json{static_cast<int64_t>(v)}); }
  bool number_unsigned(number_unsigned_t v) override {
    if (v <= static_cast<uint64_t>(INT64_MAX)) return add(Json{static_cast<int64_t>(v)});
    return add(Json{static_cast<double>(v)});
  }
  bool number_float(number_float_t v, const string_t&) override { return add(Json{static_cast<double>(v)}); }
  bool string(string_t& v) override { return add(Json{std::move(v)}); }
  bool binary(binary_t&) override { return false; }  // not produced by the JSON format
  bool start_object(std::size_t) override { return open(Json{std::make_shared<JsonObject>()}); }
  bool key(string_t& k) override {
    key_ = std::move(k);
    return true;
  }
  bool end_object() override { return close(); }
  bool start_array(std::size_t) override { return open(Json{std::make_shared<JsonArray>()}); }
  bool end_array() override { return close(); }
  bool parse_error(std::size_t position, const std::string&,
                   const nlohmann::detail::exception& e) override {
    // The library's message names the line and column; its exception prefix goes.
    std::string msg = e.what();
    if (const size_t at = msg.find("] "); at != std::string::npos) msg = msg.substr(at + 2);
    LUM_FAIL() << what_ << ": invalid JSON at byte " << (position > 0 ? position - 1 : 0) << ": "
               << msg;
  }

 private:
  static constexpr size_t kMaxDepth = 64;

  // Appends `j` to the innermost open container (or makes it the document). Pointers into
  // a container stay valid while a value nested in it is open: only that value grows.
  Json* append(Json j) {
    if (stack_.empty()) {
      root_ = std::move(j);
      return &root_;
    }
    Json& top = *stack_.back();
    if (top.is_object()) {
      auto& obj = *std::get<std::shared_ptr<JsonObject>>(top.v);
      obj.emplace_back(std::move(key_), std::move(j));
      return &obj.back().second;
    }
    auto& arr = *std::get<std::shared_ptr<JsonArray>>(top.v);
    arr.push_back(std::move(j));
    return &arr.back();
  }
  bool add(Json j) {
    append(std::move(j));
    return true;
  }
  bool open(Json container) {
    LUM_CHECK(stack_.size() < kMaxDepth)
        << what_ << ": invalid JSON: nesting deeper than " << kMaxDepth;
    stack_.push_back(append(std::move(container)));
    return true;
  }
  bool close() {
    stack_.pop_back();
    return true;
  }

  const std::string& what_;
  Json root_;
  std::vector<Json*> stack_;  // the open containers; their storage is shared_ptr-held
  std::string key_;
};

}  // namespace

void Json::throw_type_error(const char* expected) const {
  static constexpr const char* kNames[] = {"null",     "a boolean", "an integer", "a number",
                                           "a string", "an array",  "an object"};
  throw Error(std::string("JSON value is ") + kNames[v.index()] + ", expected " + expected);
}

Json read_json_object(const std::string& path, const std::string& what) {
  std::ifstream f(path, std::ios::binary);
  LUM_CHECK(f) << "cannot open " << what << " " << path;
  const std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  Json j = parse_json(text, path);
  LUM_CHECK(j.is_object()) << path << ": " << what << " is not a JSON object";
  return j;
}

int64_t int_field(const Json& j, const char* key, const std::string& path,
                  std::optional<int64_t> fallback) {
  const Json* v = j.find(key);
  if (!v || std::holds_alternative<std::nullptr_t>(v->v)) {
    LUM_CHECK(fallback) << path << ": config field '" << key << "' is missing";
    return *fallback;
  }
  LUM_CHECK(v->is_int()) << path << ": config field '" << key << "' is not an integer";
  return v->integer();
}

double number_field(const Json& j, const char* key, const std::string& path, double fallback) {
  const Json* v = j.find(key);
  if (!v || std::holds_alternative<std::nullptr_t>(v->v)) return fallback;
  LUM_CHECK(v->is_number()) << path << ": config field '" << key << "' is not a number";
  return v->number();
}

const Json* Json::find(std::string_view key) const {
  if (!is_object()) return nullptr;
  for (const auto& [k, v] : object())
    if (k == key) return &v;
  return nullptr;
}

Json parse_json(std::string_view text, const std::string& what) {
  Builder b(what);
  nlohmann::json::sax_parse(text.begin(), text.end(), &b, nlohmann::json::input_format_t::json,
                            /*strict=*/true, /*ignore_comments=*/false);
  return b.result();
}

std::string json_escape(std::string_view s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += c;
        }
    }
  }
  return out;
}

}  // namespace luminal::models

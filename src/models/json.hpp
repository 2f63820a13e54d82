// JSON for model headers, configs and tokenizer.json (private to src/models): nlohmann's
// strict parser fills a small tree that keeps object keys in file order. Errors raise
// luminal::Error with the byte offset; nesting is limited so a hostile file cannot
// exhaust the stack.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace luminal::models {

struct Json;
using JsonArray = std::vector<Json>;
using JsonObject = std::vector<std::pair<std::string, Json>>;  // in file order

struct Json {
  std::variant<std::nullptr_t, bool, int64_t, double, std::string, std::shared_ptr<JsonArray>,
               std::shared_ptr<JsonObject>>
      v;
  bool is_object() const { return std::holds_alternative<std::shared_ptr<JsonObject>>(v); }
  bool is_array() const { return std::holds_alternative<std::shared_ptr<JsonArray>>(v); }
  bool is_string() const { return std::holds_alternative<std::string>(v); }
  bool is_int() const { return std::holds_alternative<int64_t>(v); }
  bool is_number() const { return is_int() || std::holds_alternative<double>(v); }
  // Typed access; the wrong type raises luminal::Error (callers that can name the file
  // check is_*() first and say more).
  const JsonObject& object() const { return *get<std::shared_ptr<JsonObject>>("an object"); }
  const JsonArray& array() const { return *get<std::shared_ptr<JsonArray>>("an array"); }
  const std::string& string() const { return get<std::string>("a string"); }
  int64_t integer() const { return get<int64_t>("an integer"); }
  double number() const {
    return is_int() ? static_cast<double>(integer()) : get<double>("a number");
  }
  /// Member lookup in an object; nullptr if absent.
  const Json* find(std::string_view key) const;

 private:
  template <class T>
  const T& get(const char* what) const {
    if (const T* p = std::get_if<T>(&v)) return *p;
    throw_type_error(what);
  }
  [[noreturn]] void throw_type_error(const char* expected) const;
};

/// Parses one JSON document; `what` names the source in errors.
Json parse_json(std::string_view text, const std::string& what);

/// Reads and parses file `path`, which must hold a JSON object; `what` ("model config",
/// "tokenizer") names it in errors.
Json read_json_object(const std::string& path, const std::string& what);

/// An integer field of a config object: absent or null means `fallback` (an error naming
/// `path` and `key` without one); any other non-integer, a string too, is an error.
int64_t int_field(const Json& j, const char* key, const std::string& path,
                  std::optional<int64_t> fallback = {});
/// A number field of a config object, or `fallback` when absent or null; any other
/// non-number is an error naming `path` and `key`.
double number_field(const Json& j, const char* key, const std::string& path, double fallback);

/// Escapes a string for output inside double quotes.
std::string json_escape(std::string_view s);

}  // namespace luminal::models

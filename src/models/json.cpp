// Strict JSON parsing.
#include "models/json.hpp"

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <iterator>

#include "luminal/error.hpp"
#include "models/utf8.hpp"

namespace luminal::models {
namespace {

class Parser {
 public:
  Parser(std::string_view s, const std::string& what) : s_(s), what_(what) {}

  Json document() {
    Json j = value(0);
    skip();
    if (pos_ != s_.size()) fail("trailing characters after the JSON value");
    return j;
  }

 private:
  [[noreturn]] void fail(const std::string& msg) const {
    LUM_FAIL() << what_ << ": invalid JSON at byte " << pos_ << ": " << msg;
  }
  void skip() {
    while (pos_ < s_.size() &&
           (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\n' || s_[pos_] == '\r'))
      ++pos_;
  }
  char peek() {
    skip();
    if (pos_ >= s_.size()) fail("unexpected end");
    return s_[pos_];
  }
  void expect(char c) {
    if (peek() != c) fail(std::string("expected '") + c + "'");
    ++pos_;
  }
  bool literal(std::string_view word) {
    if (s_.substr(pos_, word.size()) != word) return false;
    pos_ += word.size();
    return true;
  }

  Json value(int depth) {
    if (depth > 64) fail("nesting deeper than 64");
    const char c = peek();
    Json j;
    if (c == '{') {
      ++pos_;
      auto obj = std::make_shared<JsonObject>();
      if (peek() == '}') {
        ++pos_;
      } else {
        for (;;) {
          if (peek() != '"') fail("expected a string key");
          std::string key = string();
          expect(':');
          obj->emplace_back(std::move(key), value(depth + 1));
          if (peek() == ',') {
            ++pos_;
            continue;
          }
          expect('}');
          break;
        }
      }
      j.v = std::move(obj);
    } else if (c == '[') {
      ++pos_;
      auto arr = std::make_shared<JsonArray>();
      if (peek() == ']') {
        ++pos_;
      } else {
        for (;;) {
          arr->push_back(value(depth + 1));
          if (peek() == ',') {
            ++pos_;
            continue;
          }
          expect(']');
          break;
        }
      }
      j.v = std::move(arr);
    } else if (c == '"') {
      j.v = string();
    } else if (literal("true")) {
      j.v = true;
    } else if (literal("false")) {
      j.v = false;
    } else if (literal("null")) {
      j.v = nullptr;
    } else if (c == '-' || (c >= '0' && c <= '9')) {
      j = number();
    } else {
      fail(std::string("unexpected '") + c + "'");
    }
    return j;
  }

  Json number() {
    const size_t start = pos_;
    if (s_[pos_] == '-') ++pos_;
    bool is_float = false;
    while (pos_ < s_.size()) {
      const char c = s_[pos_];
      if (c >= '0' && c <= '9') {
        ++pos_;
      } else if (c == '.' || c == 'e' || c == 'E' || c == '+' || c == '-') {
        is_float = true;
        ++pos_;
      } else {
        break;
      }
    }
    const std::string text(s_.substr(start, pos_ - start));
    char* end = nullptr;
    Json j;
    if (!is_float) {
      errno = 0;
      const long long v = std::strtoll(text.c_str(), &end, 10);
      if (*end == '\0' && errno == 0 && text != "-") {
        j.v = static_cast<int64_t>(v);
        return j;
      }
    }
    const double d = std::strtod(text.c_str(), &end);
    if (*end != '\0' || text.empty() || text == "-") fail("malformed number '" + text + "'");
    j.v = d;
    return j;
  }

  uint32_t hex4() {
    if (pos_ + 4 > s_.size()) fail("short \\u escape");
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) {
      const char c = s_[pos_++];
      v <<= 4;
      if (c >= '0' && c <= '9')
        v |= static_cast<uint32_t>(c - '0');
      else if (c >= 'a' && c <= 'f')
        v |= static_cast<uint32_t>(c - 'a' + 10);
      else if (c >= 'A' && c <= 'F')
        v |= static_cast<uint32_t>(c - 'A' + 10);
      else
        fail("bad \\u escape");
    }
    return v;
  }

  std::string string() {
    ++pos_;  // opening quote
    std::string out;
    for (;;) {
      if (pos_ >= s_.size()) fail("unterminated string");
      const char c = s_[pos_++];
      if (c == '"') break;
      if (static_cast<unsigned char>(c) < 0x20) fail("control character in string");
      if (c != '\\') {
        out += c;
        continue;
      }
      if (pos_ >= s_.size()) fail("unterminated escape");
      const char e = s_[pos_++];
      switch (e) {
        case '"':
          out += '"';
          break;
        case '\\':
          out += '\\';
          break;
        case '/':
          out += '/';
          break;
        case 'b':
          out += '\b';
          break;
        case 'f':
          out += '\f';
          break;
        case 'n':
          out += '\n';
          break;
        case 'r':
          out += '\r';
          break;
        case 't':
          out += '\t';
          break;
        case 'u': {
          uint32_t cp = hex4();
          if (cp >= 0xD800 && cp < 0xDC00) {
            if (!literal("\\u")) fail("unpaired surrogate");
            const uint32_t lo = hex4();
            if (lo < 0xDC00 || lo >= 0xE000) fail("bad low surrogate");
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
          } else if (cp >= 0xDC00 && cp < 0xE000) {
            fail("unpaired surrogate");
          }
          append_utf8(out, cp);
          break;
        }
        default:
          fail(std::string("bad escape '\\") + e + "'");
      }
    }
    return out;
  }

  std::string_view s_;
  const std::string& what_;
  size_t pos_ = 0;
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
  if (!v || v->is_string() || std::holds_alternative<std::nullptr_t>(v->v)) {
    LUM_CHECK(fallback) << path << ": config field '" << key << "' is missing";
    return *fallback;
  }
  LUM_CHECK(v->is_int()) << path << ": config field '" << key << "' is not an integer";
  return v->integer();
}

double number_field(const Json& j, const char* key, double fallback) {
  const Json* v = j.find(key);
  return v && v->is_number() ? v->number() : fallback;
}

const Json* Json::find(std::string_view key) const {
  if (!is_object()) return nullptr;
  for (const auto& [k, v] : object())
    if (k == key) return &v;
  return nullptr;
}

Json parse_json(std::string_view text, const std::string& what) {
  return Parser(text, what).document();
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

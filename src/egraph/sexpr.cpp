// S-expression reading.
#include "egraph/sexpr.hpp"

#include <cctype>

#include "luminal/error.hpp"

namespace luminal::eg {
namespace {

class Reader {
 public:
  Reader(std::string_view text, std::string_view source) : s_(text), source_(source) {}

  std::vector<SExpr> all() {
    std::vector<SExpr> out;
    for (skip(); pos_ < s_.size(); skip()) out.push_back(form());
    return out;
  }

 private:
  [[noreturn]] void fail(const std::string& what, int line, int col) const {
    LUM_FAIL() << source_ << ":" << line << ":" << col << ": " << what;
  }

  void advance() {
    if (s_[pos_] == '\n') {
      ++line_;
      col_ = 1;
    } else {
      ++col_;
    }
    ++pos_;
  }

  void skip() {
    while (pos_ < s_.size()) {
      if (std::isspace(static_cast<unsigned char>(s_[pos_]))) {
        advance();
      } else if (s_[pos_] == ';') {
        while (pos_ < s_.size() && s_[pos_] != '\n') advance();
      } else {
        break;
      }
    }
  }

  SExpr form() {
    SExpr e;
    e.line = line_;
    e.col = col_;
    const char c = s_[pos_];
    if (c == '(') {
      advance();
      e.kind = SExpr::Kind::List;
      for (skip(); pos_ < s_.size() && s_[pos_] != ')'; skip()) e.items.push_back(form());
      if (pos_ >= s_.size()) fail("unclosed '('", e.line, e.col);
      advance();
    } else if (c == ')') {
      fail("unexpected ')'", line_, col_);
    } else if (c == '"') {
      advance();
      e.kind = SExpr::Kind::String;
      while (pos_ < s_.size() && s_[pos_] != '"') {
        if (s_[pos_] == '\\' && pos_ + 1 < s_.size()) advance();
        if (s_[pos_] == '\n') fail("newline in string", line_, col_);
        e.text += s_[pos_];
        advance();
      }
      if (pos_ >= s_.size()) fail("unterminated string", e.line, e.col);
      advance();
    } else {
      while (pos_ < s_.size() && !std::isspace(static_cast<unsigned char>(s_[pos_])) &&
             s_[pos_] != '(' && s_[pos_] != ')' && s_[pos_] != ';' && s_[pos_] != '"') {
        e.text += s_[pos_];
        advance();
      }
    }
    return e;
  }

  std::string_view s_, source_;
  size_t pos_ = 0;
  int line_ = 1, col_ = 1;
};

}  // namespace

std::vector<SExpr> read_sexprs(std::string_view text, std::string_view source) {
  return Reader(text, source).all();
}

std::string where(std::string_view source, const SExpr& e) {
  return std::string(source) + ":" + std::to_string(e.line) + ":" + std::to_string(e.col) + ": ";
}

}  // namespace luminal::eg

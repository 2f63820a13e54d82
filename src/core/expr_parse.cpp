// Parser for the infix expression syntax (what Expr::to_string prints).
#include <cctype>

#include "core/expr_ast.hpp"
#include "luminal/error.hpp"

namespace luminal::expr_detail {
namespace {

class Parser {
 public:
  explicit Parser(std::string_view text) : s_(text) {}

  Ast parse() {
    Ast a = binary(0);
    skip_space();
    if (pos_ != s_.size()) fail("unexpected '" + std::string(1, s_[pos_]) + "'");
    return a;
  }

 private:
  struct OpInfo {
    const char* spelling;
    int prec;
  };
  // Binary operators by precedence (higher binds tighter); all left-associative.
  static constexpr OpInfo kOps[] = {{"||", 1}, {"&&", 2}, {"==", 3}, {"!=", 3}, {"<=", 3},
                                    {">=", 3}, {"<", 3},  {">", 3},  {"+", 4},  {"-", 4},
                                    {"*", 5},  {"/", 5},  {"%", 5}};

  [[noreturn]] void fail(const std::string& what) const {
    LUM_FAIL() << "expression syntax error at column " << (pos_ + 1) << ": " << what << " in '"
               << s_ << "'";
  }

  void skip_space() {
    while (pos_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[pos_]))) ++pos_;
  }

  const OpInfo* peek_op() {
    skip_space();
    for (const auto& op : kOps) {
      std::string_view sp(op.spelling);
      if (s_.substr(pos_, sp.size()) == sp) return &op;
    }
    return nullptr;
  }

  Ast binary(int min_prec) {
    Ast lhs = unary();
    while (const OpInfo* op = peek_op()) {
      if (op->prec <= min_prec) break;
      pos_ += std::string_view(op->spelling).size();
      Ast rhs = binary(op->prec);
      Ast node;
      node.kind = Ast::Kind::Binary;
      node.name = op->spelling;
      node.kids = {std::move(lhs), std::move(rhs)};
      lhs = std::move(node);
    }
    return lhs;
  }

  Ast unary() {
    skip_space();
    if (pos_ < s_.size() && (s_[pos_] == '-' || s_[pos_] == '!')) {
      Ast node;
      node.kind = Ast::Kind::Unary;
      node.name = std::string(1, s_[pos_++]);
      Ast operand = unary();
      if (node.name == "-" && operand.kind == Ast::Kind::Num) {
        operand.value = -operand.value;
        return operand;
      }
      node.kids.push_back(std::move(operand));
      return node;
    }
    return primary();
  }

  Ast primary() {
    skip_space();
    if (pos_ >= s_.size()) fail("unexpected end of input");
    const char c = s_[pos_];
    if (c == '(') {
      ++pos_;
      Ast inner = binary(0);
      expect(')');
      return inner;
    }
    Ast node;
    if (std::isdigit(static_cast<unsigned char>(c))) {
      int64_t v = 0;
      while (pos_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[pos_]))) {
        if (__builtin_mul_overflow(v, 10, &v) || __builtin_add_overflow(v, s_[pos_] - '0', &v))
          fail("integer literal out of range");
        ++pos_;
      }
      node.kind = Ast::Kind::Num;
      node.value = v;
      return node;
    }
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      size_t start = pos_;
      while (pos_ < s_.size() &&
             (std::isalnum(static_cast<unsigned char>(s_[pos_])) || s_[pos_] == '_'))
        ++pos_;
      node.name = std::string(s_.substr(start, pos_ - start));
      skip_space();
      if (pos_ < s_.size() && s_[pos_] == '(') {
        ++pos_;
        node.kind = Ast::Kind::Call;
        node.kids.push_back(binary(0));
        skip_space();
        while (pos_ < s_.size() && s_[pos_] == ',') {
          ++pos_;
          node.kids.push_back(binary(0));
          skip_space();
        }
        expect(')');
      } else {
        node.kind = Ast::Kind::Ident;
      }
      return node;
    }
    fail("unexpected '" + std::string(1, c) + "'");
  }

  void expect(char c) {
    skip_space();
    if (pos_ >= s_.size() || s_[pos_] != c) fail(std::string("expected '") + c + "'");
    ++pos_;
  }

  std::string_view s_;
  size_t pos_ = 0;
};

}  // namespace

Ast parse_ast(std::string_view text) {
  return Parser(text).parse();
}

Expr instantiate(const Ast& ast, const std::function<Expr(const std::string&)>& ident) {
  switch (ast.kind) {
    case Ast::Kind::Num:
      return Expr(ast.value);
    case Ast::Kind::Ident:
      return ident(ast.name);
    case Ast::Kind::Unary: {
      Expr x = instantiate(ast.kids[0], ident);
      return ast.name == "-" ? -x : logical_and(ge(x, 0), ge(0, x));  // !x is x == 0
    }
    case Ast::Kind::Call: {
      LUM_CHECK((ast.name == "min" || ast.name == "max") && ast.kids.size() == 2)
          << "unknown function '" << ast.name << "' with " << ast.kids.size()
          << " arguments in expression (expected min(a, b) or max(a, b))";
      Expr a = instantiate(ast.kids[0], ident), b = instantiate(ast.kids[1], ident);
      return ast.name == "min" ? min(a, b) : max(a, b);
    }
    case Ast::Kind::Binary:
      break;
  }
  Expr a = instantiate(ast.kids[0], ident), b = instantiate(ast.kids[1], ident);
  const std::string& op = ast.name;
  if (op == "+") return a + b;
  if (op == "-") return a - b;
  if (op == "*") return a * b;
  if (op == "/") return a / b;
  if (op == "%") return a % b;
  if (op == "<") return lt(a, b);
  if (op == ">") return lt(b, a);
  if (op == "<=") return ge(b, a);
  if (op == ">=") return ge(a, b);
  if (op == "==") return logical_and(ge(a, b), ge(b, a));
  if (op == "!=") return logical_or(lt(a, b), lt(b, a));
  if (op == "&&") return logical_and(a, b);
  LUM_ASSERT(op == "||") << "unknown operator " << op;
  return logical_or(a, b);
}

}  // namespace luminal::expr_detail

namespace luminal {

Expr parse_expr(std::string_view text) {
  auto ast = expr_detail::parse_ast(text);
  return expr_detail::instantiate(ast, [](const std::string& name) { return Expr::var(name); });
}

}  // namespace luminal

// Expr::to_c_bounds: interval arithmetic over an expression, rendered as C statements.
//
// Each node of the expression (a DAG: shared subexpressions are rendered once) gets two
// temporaries, its least and greatest value over the box. The rules are the usual
// interval ones for floor semantics: sums and min/max bound by their operands' ends,
// products and quotients by the four corners (floor division is monotone in each operand
// where the divisor keeps one sign), remainders by the divisor's range unless the
// dividend stays within one period, comparisons and logic as 0/1 where the operands
// decide them and [0, 1] where they do not. A divisor whose range holds zero has no
// bound: the node then clears `<name>_known`, and its temporaries hold 0 so that nothing
// after it divides by zero or overflows.
#include <sstream>
#include <unordered_map>

#include "luminal/error.hpp"
#include "luminal/expr.hpp"

namespace luminal {
namespace {

class BoundsPrinter {
 public:
  BoundsPrinter(std::ostream& os, std::string_view name) : os_(os), name_(name) {}

  // The temporaries' stem of e's bounds (`<stem>_lo`, `<stem>_hi`), rendering e first.
  std::string visit(Expr e) {
    if (auto it = stems_.find(e.id()); it != stems_.end()) return it->second;
    std::string lo, hi;
    switch (e.op()) {
      case ExprOp::Const:
        lo = hi = e.to_c();
        break;
      case ExprOp::Var:
        lo = std::string(e.var_name()) + "_lo";
        hi = std::string(e.var_name()) + "_hi";
        break;
      default:
        return binary(e);
    }
    const std::string stem = fresh();
    os_ << "const long long " << stem << "_lo = " << lo << ", " << stem << "_hi = " << hi << "; ";
    return stems_[e.id()] = stem;
  }

 private:
  std::string binary(Expr e) {
    const std::string a = visit(e.lhs()), b = visit(e.rhs());
    const std::string al = a + "_lo", ah = a + "_hi", bl = b + "_lo", bh = b + "_hi";
    // The least and greatest of f over the four corners of the operands' box.
    auto corners = [&](const std::string& f, std::string& lo, std::string& hi) {
      const std::string c[4] = {f + "(" + al + ", " + bl + ")", f + "(" + al + ", " + bh + ")",
                                f + "(" + ah + ", " + bl + ")", f + "(" + ah + ", " + bh + ")"};
      lo = "lum_min(lum_min(" + c[0] + ", " + c[1] + "), lum_min(" + c[2] + ", " + c[3] + "))";
      hi = "lum_max(lum_max(" + c[0] + ", " + c[1] + "), lum_max(" + c[2] + ", " + c[3] + "))";
    };
    // Whether an operand is nonzero throughout (true), or zero throughout (false).
    auto truth = [](const std::string& s) { return "(" + s + "_lo > 0 || " + s + "_hi < 0)"; };
    auto falsity = [](const std::string& s) { return "(" + s + "_lo == 0 && " + s + "_hi == 0)"; };
    std::string lo, hi, defined = "1";
    switch (e.op()) {
      case ExprOp::Add:
        lo = al + " + " + bl, hi = ah + " + " + bh;
        break;
      case ExprOp::Mul:
        corners("lum_mul", lo, hi);
        break;
      case ExprOp::Div:
        defined = truth(b);  // a divisor nonzero throughout
        corners("lum_floordiv", lo, hi);
        break;
      case ExprOp::Mod: {
        // A positive divisor leaves [0, divisor) (a fixed one, a dividend within one
        // period: its own ends' remainders); a negative one (divisor, 0].
        defined = truth(b);
        const std::string one_period = "(" + bl + " == " + bh + " && lum_floordiv(" + al + ", " +
                                       bl + ") == lum_floordiv(" + ah + ", " + bl + "))";
        lo = "(" + bl + " > 0 ? (" + one_period + " ? lum_floormod(" + al + ", " + bl +
             ") : 0) : " + bl + " + 1)";
        hi = "(" + bl + " > 0 ? (" + one_period + " ? lum_floormod(" + ah + ", " + bl +
             ") : " + bh + " - 1) : 0)";
        break;
      }
      case ExprOp::Min:
        lo = "lum_min(" + al + ", " + bl + ")", hi = "lum_min(" + ah + ", " + bh + ")";
        break;
      case ExprOp::Max:
        lo = "lum_max(" + al + ", " + bl + ")", hi = "lum_max(" + ah + ", " + bh + ")";
        break;
      case ExprOp::Lt:
        lo = "(long long)(" + ah + " < " + bl + ")", hi = "(long long)(" + al + " < " + bh + ")";
        break;
      case ExprOp::Ge:
        lo = "(long long)(" + al + " >= " + bh + ")", hi = "(long long)(" + ah + " >= " + bl + ")";
        break;
      case ExprOp::And:
        lo = "(long long)(" + truth(a) + " && " + truth(b) + ")";
        hi = "(long long)!(" + falsity(a) + " || " + falsity(b) + ")";
        break;
      case ExprOp::Or:
        lo = "(long long)(" + truth(a) + " || " + truth(b) + ")";
        hi = "(long long)!(" + falsity(a) + " && " + falsity(b) + ")";
        break;
      default:
        LUM_ASSERT(false) << "unhandled op";
    }
    const std::string stem = fresh();
    if (defined == "1") {
      os_ << "const long long " << stem << "_lo = " << lo << ", " << stem << "_hi = " << hi << "; ";
    } else {
      os_ << "const int " << stem << "_defined = " << defined << "; " << name_
          << "_known &= " << stem << "_defined; const long long " << stem << "_lo = " << stem
          << "_defined ? " << lo << " : 0, " << stem << "_hi = " << stem << "_defined ? " << hi
          << " : 0; ";
    }
    return stems_[e.id()] = stem;
  }

  std::string fresh() { return name_ + "_" + std::to_string(stems_.size()); }

  std::ostream& os_;
  std::string name_;
  std::unordered_map<uint32_t, std::string> stems_;
};

}  // namespace

std::string Expr::to_c_bounds(std::string_view name) const {
  std::ostringstream os;
  os << "int " << name << "_known = 1; ";
  BoundsPrinter printer(os, name);
  const std::string stem = printer.visit(*this);
  os << "const long long " << name << "_lo = " << stem << "_lo, " << name << "_hi = " << stem
     << "_hi;";
  return os.str();
}

}  // namespace luminal

// Values computed from indices alone, folded into one Iota each (see index_folding.hpp).
//
// Front ends spell masks out elementwise: torch's causal mask is two aranges compared,
// the comparison turned into a float mask of 0 and -inf, that compared with 0 back into
// bool, and a guard for rows that keep no key (a count of the kept keys compared with
// 0, and a Where that zeroes such rows' outputs). Each of those is a kernel reading and
// writing the mask, and the attention reads its mask from memory (a pass over the mask
// to find the tiles it skips, every call). As one Iota the mask is an expression of the
// row and key the attention kernels compute themselves, and the guard, whose count is
// at least one in every row of a causal mask, goes.
//
// Every node's value is followed as a function of its flat index z, where it is one:
// exactly (an integer expression, for integer and bool values and for float values that
// are 0/1 or integers as their type stores them), or as a choice between two constants by
// a 0/1 condition (the 0 and -inf, or the type's lowest value, of a float mask: its
// comparisons come out as the condition or its negation), or as "at least 1 everywhere"
// (a count of kept keys where every row keeps its first or last one). Where a float would
// round, nothing is followed further.
#include "compiler/index_folding.hpp"

#include <cmath>
#include <optional>
#include <unordered_set>

#include "luminal/buffer.hpp"

namespace luminal::compiler {
namespace {

// Longer folded expressions are left as the nodes they were (a kernel computing them
// per element would do more work than the nodes).
constexpr size_t kMaxExpressionText = 1000;
// Integers beyond this are not compared with float constants (their doubles round).
constexpr double kLargestCompared = 1e15;

struct Known {
  enum Kind { Exact, Choice, AtLeastOne } kind = Exact;
  Expr e;                  // Exact: the value; Choice: the 0/1 condition
  double yes = 0, no = 0;  // Choice: the value where the condition holds, where it does not
  bool rounds = false;     // Exact before a float type's rounding: no operand of a fold
};

bool is_boolean(Expr e) {
  switch (e.op()) {
    case ExprOp::Lt:
    case ExprOp::Ge:
    case ExprOp::And:
    case ExprOp::Or:
      return true;
    case ExprOp::Const:
      return *e.as_const() == 0 || *e.as_const() == 1;
    default:
      return false;
  }
}

Expr truth(Expr e) {
  return is_boolean(e) ? e : logical_or(lt(e, 0), lt(0, e));
}
Expr negation(Expr c) {  // (of a 0/1 condition)
  if (c.op() == ExprOp::Lt) return ge(c.lhs(), c.rhs());
  if (c.op() == ExprOp::Ge) return lt(c.lhs(), c.rhs());
  return lt(c, 1);
}

// x < y for integers, where x or y is a 0/1 condition: not x (x < 1), y (0 < y).
Expr compare(Expr x, Expr y) {
  if (y == Expr(1) && is_boolean(x)) return negation(x);
  if (x == Expr(0) && is_boolean(y)) return y;
  return lt(x, y);
}

// One case of a value: where `when` holds, the integer `exact` or else the constant `value`.
struct Case {
  Expr when;
  std::optional<Expr> exact;
  double value = 0;
};

std::vector<Case> cases(const Known& k) {
  if (k.kind == Known::Exact) return {{Expr(1), k.e}};
  return {{k.e, std::nullopt, k.yes}, {negation(k.e), std::nullopt, k.no}};
}

// a < b for one case of each (0/1): an integer x against a float constant y compares
// with y's ceiling (x < y) or floor (y < x).
Expr less(const Case& a, const Case& b) {
  if (a.exact && b.exact) return compare(*a.exact, *b.exact);
  if (!a.exact && !b.exact) return Expr(a.value < b.value ? 1 : 0);
  const double y = a.exact ? b.value : a.value;
  const Expr x = a.exact ? *a.exact : *b.exact;
  if (std::isnan(y)) return Expr(0);
  const bool x_first = a.exact.has_value();
  if (y > kLargestCompared) return Expr(x_first ? 1 : 0);
  if (y < -kLargestCompared) return Expr(x_first ? 0 : 1);
  return x_first ? lt(x, Expr(static_cast<int64_t>(std::ceil(y))))
                 : lt(Expr(static_cast<int64_t>(std::floor(y))), x);
}

// The constant a known value always has, if it has one.
std::optional<double> constant(const Known& k) {
  if (k.kind == Known::Exact && k.e.is_const()) return static_cast<double>(*k.e.as_const());
  if (k.kind == Known::Choice && (k.yes == k.no || k.e == Expr(1))) return k.yes;
  if (k.kind == Known::Choice && k.e == Expr(0)) return k.no;
  return std::nullopt;
}

Known exact(Expr e) {
  return {Known::Exact, e};
}

// A choice between integer constants as an integer expression; an exact value as it is.
std::optional<Known> as_exact(const Known& k) {
  if (k.kind == Known::Exact) return k;
  auto integer = [](double v) { return v == std::floor(v) && std::fabs(v) <= kLargestCompared; };
  if (k.kind != Known::Choice || !integer(k.yes) || !integer(k.no)) return std::nullopt;
  const auto yes = static_cast<int64_t>(k.yes), no = static_cast<int64_t>(k.no);
  return exact(k.e * yes + negation(k.e) * no);
}

// `e` simplified knowing z ranges over node `n`'s elements.
Expr over_elements(Expr e, const Node& n) {
  return simplify_within(e, {{"z", {0, product(n.shape)}}});
}

// `v` as a value of float type `t` holds it (rounded to its precision).
double stored(double v, DType t) {
  Buffer b(t, 1);
  b.set_f64(0, v);
  return b.get_f64(0);
}

// A float value `v` (as stored): exactly, where it is an integer, else as a constant.
std::optional<Known> float_constant(double v) {
  if (std::isnan(v)) return std::nullopt;
  if (v == std::floor(v) && std::fabs(v) <= kLargestCompared)
    return exact(Expr(static_cast<int64_t>(v)));
  return Known{Known::Choice, Expr(1), v, v};
}

// A source node's value, where it is known.
std::optional<Known> source(const Node& n) {
  if (n.op == Op::Iota) {
    if (n.dtype == DType::Bool) return exact(truth(n.iota));
    if (!is_float(n.dtype) || is_boolean(n.iota)) return exact(n.iota);
    return std::nullopt;
  }
  const double v = n.value.as_double();
  if (n.dtype == DType::Bool) return exact(Expr(v != 0 ? 1 : 0));
  if (!is_float(n.dtype)) return exact(Expr(n.value.is_int ? n.value.i : static_cast<int64_t>(v)));
  return float_constant(stored(v, n.dtype));
}

// An input's known value as node `n` reads it through `view` (at n's flat index z).
std::optional<Known> read(const Known& k, const View& view, const std::vector<Expr>& shape) {
  const std::vector<Expr> idx = View::contiguous(shape).unflatten(Expr("z"));
  const Expr valid = simplify(view.valid(idx));
  if (k.kind == Known::AtLeastOne)  // (the same everywhere, but 0 where masked)
    return valid == Expr(1) ? std::optional{k} : std::nullopt;
  Known r = k;
  r.e = k.e.substitute("z", view.index(idx));
  if (valid == Expr(1)) return r;
  // Masked elements read 0 (a bias padded to an aligned length).
  if (k.kind == Known::Exact) {
    r.e = is_boolean(r.e) ? logical_and(valid, r.e) : valid * r.e;
  } else if (k.yes == 0) {
    r.e = logical_or(negation(valid), r.e);
  } else if (k.no == 0) {
    r.e = logical_and(valid, r.e);
  } else {
    return std::nullopt;
  }
  return r;
}

// x < y where one side is at least 1 everywhere and the other a constant.
std::optional<Known> compared_with_count(const Known& x, const Known& y) {
  if (y.kind == Known::AtLeastOne) {
    const std::optional<double> c = constant(x);
    if (c && *c < 1) return exact(Expr(1));
  } else if (x.kind == Known::AtLeastOne) {
    const std::optional<double> c = constant(y);
    if (c && *c <= 1) return exact(Expr(0));
  }
  return std::nullopt;
}

std::optional<Known> less_than(const Known& x, const Known& y) {
  if (x.kind == Known::AtLeastOne || y.kind == Known::AtLeastOne) return compared_with_count(x, y);
  Expr any = 0;
  for (const Case& a : cases(x))
    for (const Case& b : cases(y))
      any = logical_or(any, logical_and(logical_and(a.when, b.when), less(a, b)));
  return exact(any);
}

std::optional<Known> arithmetic(const Node& n, const Known& xk, const Known& yk) {
  const std::optional<Known> xe = as_exact(xk), ye = as_exact(yk);
  if (!xe || !ye) return std::nullopt;
  const Known &x = *xe, &y = *ye;
  const bool add = n.op == Op::Add;
  if (n.dtype == DType::Bool)
    return exact(add ? logical_or(truth(x.e), truth(y.e)) : logical_and(truth(x.e), truth(y.e)));
  if (!is_float(n.dtype)) return exact(add ? x.e + y.e : x.e * y.e);
  // Floats: 0/1 values only (their products and sums are small integers, exact).
  if (!is_boolean(x.e) || !is_boolean(y.e)) return std::nullopt;
  return exact(add ? x.e + y.e : logical_and(x.e, y.e));
}

// (Two constants stay a choice, whose comparisons come out as its condition or its
// negation: not 0 > c * -65536.)
std::optional<Known> where(const Known& ck, const Known& a, const Known& b) {
  const std::optional<Known> c = as_exact(ck);
  if (!c || a.kind == Known::AtLeastOne || b.kind == Known::AtLeastOne) return std::nullopt;
  const Expr cond = truth(c->e);
  const std::optional<double> yes = constant(a), no = constant(b);
  if (yes && no) return Known{Known::Choice, cond, *yes, *no};
  const std::optional<Known> x = as_exact(a), y = as_exact(b);
  if (!x || !y) return std::nullopt;
  return exact(is_boolean(x->e) && is_boolean(y->e)
                   ? logical_or(logical_and(cond, x->e), logical_and(negation(cond), y->e))
                   : cond * x->e + negation(cond) * y->e);
}

std::optional<Known> cast(const Node& n, DType from, const Known& x) {
  if (x.kind == Known::AtLeastOne) return std::nullopt;
  if (n.dtype == DType::Bool) {
    Expr any = 0;
    for (const Case& c : cases(x))
      any = logical_or(any,
                       logical_and(c.when, c.exact ? truth(*c.exact) : Expr(c.value != 0 ? 1 : 0)));
    return exact(any);
  }
  // Float constants to a float type: rounded to it.
  if (x.kind == Known::Choice) {
    if (!is_float(n.dtype)) return as_exact(x);
    Known y = x;
    y.yes = stored(x.yes, n.dtype), y.no = stored(x.no, n.dtype);
    return y;
  }
  if (!is_float(n.dtype)) return x;  // integers and bools, and floats known exactly
  if (x.e.is_const()) return float_constant(stored(static_cast<double>(*x.e.as_const()), n.dtype));
  // (f32 holds every f16 and bf16 value.)
  if (is_boolean(x.e) || (n.dtype == DType::F32 && (from == DType::F16 || from == DType::BF16)))
    return x;
  // Integers converted to floats, as a float Iota converts its values, but rounded
  // beyond the type's precision: an Iota, followed no further.
  if (is_float(from)) return std::nullopt;
  Known rounded = x;
  rounded.rounds = true;
  return rounded;
}

// A sum or max along an axis of 0/1 values that is 1 at the axis's first or last
// position in every row: at least 1 everywhere. (The axis is not empty wherever there
// is a row: its length is at least 1, or at least one of the rows' dims.)
std::optional<Known> count(const Node& n, const Edge& in, const Known& xk) {
  const std::optional<Known> x = as_exact(xk);
  if (!x || !is_boolean(x->e)) return std::nullopt;
  const View& v = in.view;
  const auto axis = static_cast<size_t>(n.axis);
  const Expr len = v.shape()[axis];
  bool nonempty = len.lower_bound() >= 1;
  for (const Expr& d : n.shape) nonempty = nonempty || simplify(ge(len, d)) == Expr(1);
  if (!nonempty) return std::nullopt;
  for (const Expr at : {Expr(0), len - 1}) {
    std::vector<Expr> idx = View::contiguous(n.shape).unflatten(Expr("z"));
    idx.insert(idx.begin() + static_cast<std::ptrdiff_t>(axis), at);
    const Expr kept = logical_and(v.valid(idx), x->e.substitute("z", v.index(idx)));
    if (over_elements(kept, n) == Expr(1)) return Known{Known::AtLeastOne, Expr(1)};
  }
  return std::nullopt;
}

// Node n's value from its inputs' (each known, read through its edge).
std::optional<Known> combined(const Node& n, const std::vector<Known>& in,
                              const std::vector<Node>& nodes) {
  switch (n.op) {
    case Op::LessThan:
      return less_than(in[0], in[1]);
    case Op::Add:
    case Op::Mul:
      return arithmetic(n, in[0], in[1]);
    case Op::Where:
      return where(in[0], in[1], in[2]);
    case Op::Cast:
      return cast(n, nodes[n.inputs[0].source.value].dtype, in[0]);
    case Op::Contiguous:
      return in[0];
    default:
      return std::nullopt;
  }
}

// Whether `e` reads its source's elements as they lie, all of them, over `shape`.
bool reads_as_stored(const Edge& e, const Node& source, const std::vector<Expr>& shape) {
  const View& v = e.view;
  return !v.has_mask() && v.offset() == Expr(0) && v.is_contiguous() &&
         simplify(product(source.shape)) == simplify(product(shape));
}

}  // namespace

std::vector<Node> folded_index_values(std::vector<Node> nodes, const std::vector<NodeId>& outputs) {
  std::unordered_set<uint32_t> is_output;
  for (NodeId o : outputs) is_output.insert(o.value);
  std::vector<std::optional<Known>> known(nodes.size());
  for (uint32_t i = 0; i < nodes.size(); ++i) {
    Node& n = nodes[i];
    if (n.op == Op::Iota || n.op == Op::Constant) {
      known[i] = source(n);
      continue;
    }
    const OpCategory category = traits(n.op).category;
    if (category != OpCategory::Unary && category != OpCategory::Binary &&
        category != OpCategory::Ternary && category != OpCategory::Reduce)
      continue;
    std::vector<Known> in;
    for (const Edge& e : n.inputs) {
      if (e.source.value >= i || !known[e.source.value] || known[e.source.value]->rounds) break;
      if (category == OpCategory::Reduce) {
        in.push_back(*known[e.source.value]);
      } else if (auto r = read(*known[e.source.value], e.view, n.shape)) {
        in.push_back(*r);
      } else {
        break;
      }
    }
    // A Where whose condition always holds (or never does) passes an operand on: its
    // readers read that operand instead, where it lies as the Where stores its values.
    const std::optional<Known> cond =
        n.op == Op::Where && !in.empty() ? as_exact(in[0]) : std::nullopt;
    if (cond && !is_output.contains(i)) {
      const Expr always = over_elements(truth(cond->e), n);
      const Edge* passed = always == Expr(1)   ? &n.inputs[1]
                           : always == Expr(0) ? &n.inputs[2]
                                               : nullptr;
      if (passed && reads_as_stored(*passed, nodes[passed->source.value], n.shape)) {
        const NodeId to = passed->source;
        for (uint32_t j = i + 1; j < nodes.size(); ++j)
          for (Edge& e : nodes[j].inputs)
            if (e.source.value == i) e.source = to;
        continue;
      }
    }
    if (in.size() != n.inputs.size()) continue;
    std::optional<Known> k =
        category == OpCategory::Reduce
            ? (n.op == Op::SumReduce || n.op == Op::MaxReduce ? count(n, n.inputs[0], in[0])
                                                              : std::nullopt)
            : combined(n, in, nodes);
    if (!k) continue;
    if (k->kind != Known::AtLeastOne) k->e = over_elements(k->e, n);
    known[i] = k;
  }
  // Values known exactly (or as a choice between integers) become Iotas of their
  // expressions.
  for (uint32_t i = 0; i < nodes.size(); ++i) {
    Node& n = nodes[i];
    if (!known[i] || n.op == Op::Iota || n.op == Op::Constant) continue;
    const std::optional<Known> k = as_exact(*known[i]);
    if (!k) continue;
    // (A choice's expression is new here; an exact value's was simplified as it was found.)
    const Expr e = known[i]->kind == Known::Exact ? k->e : over_elements(k->e, n);
    if (e.to_string().size() > kMaxExpressionText) continue;
    n.op = Op::Iota;
    n.iota = e;
    n.inputs.clear();
    n.axis = -1;
  }
  return nodes;
}

}  // namespace luminal::compiler

// Renders a kernel's value at one output element as C statements (see element_writer.hpp).
#include "runtime/element_writer.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>

#include "luminal/error.hpp"
#include "luminal/quant.hpp"

namespace luminal::runtime {
namespace {

// Applies the rounding or wrapping the reference performs when it stores a value of
// dtype `t`, so that fused chains match op-by-op evaluation.
std::string normalize(DType t, const std::string& v) {
  switch (t) {
    case DType::F16:
      return "lum_round_f16(" + v + ")";
    case DType::BF16:
      return "lum_round_bf16(" + v + ")";
    case DType::I32:
      return "(int64_t)(int32_t)(" + v + ")";
    case DType::I8:
      return "(int64_t)(int8_t)(" + v + ")";
    case DType::U8:
      return "(int64_t)(uint8_t)(" + v + ")";
    case DType::Bool:
      return "(int64_t)((" + v + ") != 0)";
    default:
      return v;
  }
}

std::pair<double, double> int_range(DType t) {
  switch (t) {
    case DType::I32:
      return {std::numeric_limits<int32_t>::min(), std::numeric_limits<int32_t>::max()};
    case DType::I8:
      return {-128, 127};
    case DType::U8:
      return {0, 255};
    case DType::Bool:
      return {0, 1};
    default:
      return {-9.2233720368547758e18, 9.2233720368547758e18};
  }
}

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

int64_t lowest_int(DType t) {
  switch (t) {
    case DType::I32:
      return std::numeric_limits<int32_t>::min();
    case DType::I8:
      return -128;
    case DType::U8:
      return 0;
    default:
      return std::numeric_limits<int64_t>::min();
  }
}

}  // namespace

std::string compute_type(DType t) {
  if (t == DType::F64) return "double";
  return is_float(t) ? "float" : "int64_t";
}

std::string storage_type(DType t) {
  switch (t) {
    case DType::F32:
      return "float";
    case DType::F64:
      return "double";
    case DType::F16:
    case DType::BF16:
      return "uint16_t";
    case DType::I32:
      return "int32_t";
    case DType::I64:
      return "int64_t";
    case DType::I8:
      return "int8_t";
    case DType::U8:
    case DType::Bool:
      return "uint8_t";
  }
  return "?";
}

// Converts a stored element to its compute type.
std::string load_expr(DType t, const std::string& element) {
  switch (t) {
    case DType::F16:
      return "lum_h2f(" + element + ")";
    case DType::BF16:
      return "lum_bf2f(" + element + ")";
    case DType::F32:
    case DType::F64:
      return element;
    default:
      return "(int64_t)(" + element + ")";
  }
}

// Converts a compute value to its storage type (integers wrap, as the reference does).
std::string store_expr(DType t, const std::string& v) {
  switch (t) {
    case DType::F16:
      return "lum_f2h(" + v + ")";
    case DType::BF16:
      return "lum_f2bf(" + v + ")";
    case DType::Bool:
      return "(uint8_t)((" + v + ") != 0)";
    default:
      return "(" + storage_type(t) + ")(" + v + ")";
  }
}

std::string literal(double v, DType t) {
  if (!is_float(t)) return std::to_string(static_cast<int64_t>(v)) + "LL";
  const bool f64 = t == DType::F64;
  if (std::isnan(v)) return f64 ? "lum_u2d(0x7ff8000000000000ull)" : "lum_u2f(0x7fc00000u)";
  if (std::isinf(v)) {
    if (f64) return v < 0 ? "lum_u2d(0xfff0000000000000ull)" : "lum_u2d(0x7ff0000000000000ull)";
    return v < 0 ? "lum_u2f(0xff800000u)" : "lum_u2f(0x7f800000u)";
  }
  std::ostringstream os;
  os.precision(17);
  os << v;
  std::string s = os.str();
  if (s.find_first_of(".e") == std::string::npos) s += ".0";
  return t == DType::F64 ? s : s + "f";
}

std::string reduction_identity(Op op, DType t) {
  if (op == Op::SumReduce) return is_float(t) ? literal(0, t) : "0";
  return is_float(t) ? literal(-INFINITY, t) : std::to_string(lowest_int(t)) + "LL";
}

std::string reduction_step(const Node& r, const std::string& acc, const std::string& v) {
  if (r.op == Op::MaxReduce)
    return "lum_max<" + compute_type(r.dtype) + ">(" + acc + ", " + v + ")";
  return is_float(r.dtype) ? acc + " + " + v : "lum_wrap_add(" + acc + ", " + v + ")";
}

// Row-major flat index of a multi-index in `shape`.
Expr flatten(const std::vector<Expr>& idx, const std::vector<Expr>& shape) {
  Expr f = 0;
  for (size_t d = 0; d < shape.size(); ++d) f = f * shape[d] + idx[d];
  return f;
}

ElementWriter::ElementWriter(const Graph& g, const compiler::KernelPlan& plan,
                             const compiler::Kernel& k)
    : g_(g), plan_(plan), k_(k) {
  for (size_t i = 0; i < k.reads.size(); ++i) slot_[k.reads[i].value] = i + 1;
}

void ElementWriter::write_ordered_scatter(const Node& root) {
  const std::vector<Expr>& ishape = root.inputs[1].view.shape();
  const Expr m = product(ishape);
  note_vars(m);
  os_ << "  for (int64_t lum_j = 0; lum_j < " << m.to_c() << "; ++lum_j) {\n";
  os_ << "    const int64_t lum_o = lum_j;\n";
  const std::vector<Expr> jidx = split_counter("lum_j", ishape, "    ");
  const std::string pos = operand(root.inputs[1], jidx, "    ");
  const std::string src = operand(root.inputs[2], jidx, "    ");
  os_ << "    const int64_t lum_p = " << pos << ";\n";
  os_ << "    if (lum_p < 0 || lum_p >= lum_n) { lum_fail(err, 2, lum_p, lum_j); continue; }\n";
  os_ << "    out[lum_p] = " << store_expr(root.dtype, src) << ";\n  }\n";
}

std::string ElementWriter::output_type() const {
  return storage_type(g_.node(k_.root).dtype);
}

std::string ElementWriter::input_type(size_t i) const {
  const Node& r = g_.node(k_.reads[i]);
  return r.quant != kPlainStorage ? "uint8_t" : storage_type(r.dtype);
}

// A loop counter named `name` over [0, size), with its range recorded.
Expr ElementWriter::counter(const std::string& name, Expr size) {
  const auto c = size.as_const();
  const Expr v = c ? Expr::var(name, 0, std::max<int64_t>(*c - 1, 0)) : Expr::var(name);
  ranges_[name] = {Expr(0), size};
  counters_[name] = v;
  return v;
}

// Splits the flat counter `flat` (a C variable) into one counter per dim of `shape`,
// declared once where it is called; dims of size 1 get index 0. The counters carry
// their (symbolic) ranges, so index math over them simplifies without divisions.
std::optional<size_t> innermost_dim(const std::vector<Expr>& shape) {
  for (size_t d = shape.size(); d-- > 0;)
    if (!(shape[d] == Expr(1))) return d;
  return std::nullopt;
}

std::vector<Expr> ElementWriter::split_counter(const std::string& flat,
                                               const std::vector<Expr>& shape,
                                               const std::string& indent, const std::string& step) {
  const std::vector<Expr> parts = View::contiguous(shape).unflatten(Expr::var(flat));
  const std::optional<size_t> innermost = innermost_dim(shape);
  std::vector<Expr> idx;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == Expr(1)) {
      idx.emplace_back(0);
      continue;
    }
    const std::string name = "lum_i" + std::to_string(next_++);
    note_vars(parts[d]);
    os_ << indent << "const int64_t " << name << " = " << parts[d].to_c()
        << (d == innermost && !step.empty() ? " + " + step : "") << ";\n";
    idx.push_back(counter(name, shape[d]));
  }
  return idx;
}

// Inside a padding guard, a masked dim's index is known to lie within the mask: where it
// is one counter plus an offset, that counter's range narrows; where it is a sum of
// several (a window's position in a padded image: 2 x + r), it is declared as a counter
// of its own over the mask, so that the index arithmetic after it (the padded value's
// own views, unflattened) simplifies as it would over a plain counter. Returns `idx`
// with those replaced.
std::vector<Expr> ElementWriter::narrow(const View& view, std::vector<Expr> idx,
                                        const std::string& indent) {
  for (size_t d = 0; d < view.rank(); ++d) {
    if (!view.is_masked(d)) continue;
    std::vector<std::string> ranged;
    for (const std::string& name : idx[d].variables())
      if (ranges_.count(name)) ranged.push_back(name);
    if (ranged.empty()) continue;
    if (ranged.size() == 1) {
      const Expr offset = idx[d] - counters_.at(ranged[0]);  // idx = counter + offset?
      const std::vector<std::string> rest = offset.variables();
      if (std::none_of(rest.begin(), rest.end(),
                       [&](const std::string& n) { return ranges_.count(n) > 0; })) {
        VarRange& r = ranges_[ranged[0]];
        r = {max(r.lo, view.mask_lo(d) - offset), min(r.hi, view.mask_hi(d) - offset)};
        continue;
      }
    }
    const std::optional<int64_t> lo = view.mask_lo(d).as_const(), hi = view.mask_hi(d).as_const();
    if (!lo || !hi || *hi <= *lo) continue;
    const std::string name = "lum_i" + std::to_string(next_++);
    note_vars(idx[d]);
    os_ << indent << "const int64_t " << name << " = " << idx[d].to_c() << ";\n";
    const Expr v = Expr::var(name, *lo, *hi - 1);
    ranges_[name] = {Expr(*lo), Expr(*hi)};
    counters_[name] = v;
    idx[d] = v;
  }
  return idx;
}

void ElementWriter::note_vars(Expr e) {
  for (const std::string& v : e.variables())
    if (v.rfind("lum_", 0) != 0) vars_.insert(v);
}

// Loads element `flat` of a stored value (decoding it if the input is block-stored).
std::string ElementWriter::element_of(const std::string& array, const Expr& flat) {
  note_vars(flat);
  return array + "[" + flat.to_c() + "]";
}

std::string ElementWriter::load(NodeId n, Expr flat) {
  const Node& node = g_.node(n);
  flat = within(flat);
  if (std::optional<std::string> array = precomputed(n)) return element_of(*array, flat);
  if (std::optional<std::string> v = held(n, flat)) return *v;
  note_vars(flat);
  const std::string buf = read_buffer(n);
  if (node.quant != kPlainStorage)
    return "lum_dq_" + lower(ggml_type_name(node.quant)) + "(" + buf + ", " + flat.to_c() + ")";
  return load_expr(node.dtype, buf + "[" + flat.to_c() + "]");
}

// The value an edge supplies at the consumer's logical index: through the view, with
// padding reading zero.
std::string ElementWriter::operand(const Edge& e, const std::vector<Expr>& idx,
                                   const std::string& indent) {
  const Call call(*this);
  const NodeId src = plan_.canon(e.source);
  const Node& p = g_.node(src);
  const View contiguous = View::contiguous(p.shape);
  if (e.view == contiguous) return value(src, idx, indent);
  // A stored value is read at the flat offset itself; only a fused producer needs its
  // multi-index.
  const bool stored = src != k_.root && plan_.materialized[src.value];
  std::vector<Expr> at = idx;  // (inside the padding guard: narrowed)
  const auto read = [&](const std::string& ind) {
    const Expr flat = within(e.view.index(at));
    if (stored) return load(src, flat);
    std::vector<Expr> pidx = contiguous.unflatten(flat);
    for (Expr& i : pidx) i = within(i);
    return value(src, pidx, ind);
  };
  const Expr valid = within(e.view.valid(idx));
  note_vars(valid);
  if (valid == Expr(1)) return read(indent);
  const std::string t = compute_type(p.dtype), name = fresh();
  const VarRanges outside = ranges_;
  at = narrow(e.view, idx, indent);
  // A stored value of a fixed, nonzero size is read without a branch: from element 0
  // where the read falls in the padding, then zeroed. Behind a branch each read waits for
  // the one before it (the compiler may not move a load out of one), so an im2col copy's
  // four elements a thread were read one after another: 0.19 ms for a 3x3 convolution's
  // 115 MB of columns at batch 32, its threads stalled on each load in turn.
  const std::optional<int64_t> count = product(p.shape).as_const();
  if (stored && p.quant == kPlainStorage && count && *count > 0) {
    const Expr flat = within(e.view.index(at));
    ranges_ = outside;
    note_vars(flat);
    const std::string keep = fresh(), raw = fresh();
    os_ << indent << "const bool " << keep << " = " << valid.to_c() << ";\n";
    os_ << indent << "const " << t << " " << raw << " = "
        << load_expr(p.dtype, read_buffer(src) + "[" + keep + " ? (" + flat.to_c() + ") : 0]")
        << ";\n";
    os_ << indent << "const " << t << " " << name << " = " << keep << " ? " << raw << " : (" << t
        << ")0;\n";
    return name;
  }
  os_ << indent << t << " " << name << " = 0;\n";
  os_ << indent << "if (" << valid.to_c() << ") {\n";
  {
    const Scope guarded(*this);
    const std::string inner = read(indent + "  ");
    os_ << indent << "  " << name << " = " << inner << ";\n" << indent << "}\n";
  }
  ranges_ = outside;
  return name;
}

ElementWriter::Scope::~Scope() {
  while (w_.bound_order_.size() > mark_) {
    w_.bound_.erase(w_.bound_order_.back());
    w_.bound_order_.pop_back();
  }
}

ElementWriter::Call::Call(ElementWriter& w) : w_(w) {
  if (w_.depth_++ > 0) return;
  w_.bound_.clear();
  w_.bound_order_.clear();
}

std::string ElementWriter::value(NodeId n, const std::vector<Expr>& idx,
                                 const std::string& indent) {
  const Call call(*this);
  n = plan_.canon(n);
  std::string key = std::to_string(n.value);
  for (const Expr& i : idx) key += "," + i.to_string();
  if (auto it = bound_.find(key); it != bound_.end()) return it->second;
  std::string v = compute(n, idx, indent);
  bound_.emplace(key, v);
  bound_order_.push_back(std::move(key));
  return v;
}

// Node n (canonical) at multi-index idx, not yet bound in this call.
std::string ElementWriter::compute(NodeId n, const std::vector<Expr>& idx,
                                   const std::string& indent) {
  const Node& node = g_.node(n);
  const std::string t = compute_type(node.dtype);
  if (n != k_.root && plan_.materialized[n.value]) return load(n, flatten(idx, node.shape));
  if (n != k_.root)
    if (std::optional<std::string> array = precomputed(n))
      return element_of(*array, within(flatten(idx, node.shape)));
  auto bind = [&](const std::string& expr) {
    const std::string name = fresh();
    if (hoisting_ && invariant(expr)) {
      hoisted_ << hoist_indent_ << "const " << t << " " << name << " = " << expr << ";\n";
      invariant_temps_.insert(name);
    } else {
      os_ << indent << "const " << t << " " << name << " = " << expr << ";\n";
    }
    return name;
  };
  auto in = [&](size_t k) { return operand(node.inputs[k], idx, indent); };
  const bool f = is_float(node.dtype);
  const std::string suffix = node.dtype == DType::F64 ? "" : "f";
  switch (node.op) {
    case Op::Constant:
      return node.value.is_int && !f ? std::to_string(node.value.i) + "LL"
                                     : literal(node.value.as_double(), node.dtype);
    case Op::Iota: {
      const Expr z = flatten(idx, node.shape);
      const Expr v = within(node.iota.substitute("z", z));
      note_vars(v);
      return bind(rounded(n, node.dtype, "(" + t + ")(" + v.to_c() + ")"));
    }
    case Op::Contiguous:
      return in(0);
    case Op::Cast:
      return bind(cast(n, node.inputs[0], in(0), node.dtype));
    case Op::Log2:
      return bind(rounded(n, node.dtype, "log2" + suffix + "(" + in(0) + ")"));
    case Op::Exp2: {  // lum_exp2f vectorises; double keeps libm
      const std::string fn = !(f && suffix == "f") ? "exp2" + suffix
                             : loose_f32_          ? "lum_approx_exp2f"
                                                   : "lum_exp2f";
      return bind(rounded(n, node.dtype, fn + "(" + in(0) + ")"));
    }
    case Op::Sin:
      return bind(rounded(n, node.dtype, "sin" + suffix + "(" + in(0) + ")"));
    case Op::Sqrt:
      return bind(rounded(n, node.dtype, "sqrt" + suffix + "(" + in(0) + ")"));
    case Op::Recip:
      return bind(rounded(n, node.dtype,
                          t != "float" ? "(" + t + ")1 / " + in(0)
                          : loose_f32_ ? "lum_approx_recipf(" + in(0) + ")"
                                       : "lum_recipf(" + in(0) + ")"));
    case Op::Add: {
      const std::string a = in(0), b = in(1);
      if (loose_f32_ && node.dtype == DType::F32)
        for (const auto& [p, other] : {std::pair{a, b}, std::pair{b, a}})
          if (const auto it = products_.find(p); it != products_.end())
            return bind("fmaf(" + it->second.first + ", " + it->second.second + ", " + other + ")");
      return bind(rounded(n, node.dtype, f ? a + " + " + b : "lum_wrap_add(" + a + ", " + b + ")"));
    }
    case Op::Mul: {
      const std::string a = in(0), b = in(1);
      const std::string name =
          bind(rounded(n, node.dtype, f ? a + " * " + b : "lum_wrap_mul(" + a + ", " + b + ")"));
      if (loose_f32_ && node.dtype == DType::F32) products_[name] = {a, b};
      return name;
    }
    case Op::Mod: {
      const std::string a = in(0), b = in(1);
      return bind(rounded(n, node.dtype,
                          f ? "fmod" + suffix + "(" + a + ", " + b + ")"
                            : "lum_imod(" + a + ", " + b + ", err, lum_o)"));
    }
    case Op::LessThan: {
      const std::string a = in(0), b = in(1);
      return bind("(int64_t)(" + a + " < " + b + ")");
    }
    case Op::Where: {
      const std::string c = in(0), a = in(1), b = in(2);
      return bind("(" + c + ") ? " + a + " : " + b);
    }
    case Op::Gather:
      return gather(node, idx, indent);
    case Op::SumReduce:
    case Op::MaxReduce:
      return nested_reduction(n, idx, indent);
    default:
      break;
  }
  LUM_FAIL() << "code generation: no rendering for " << op_name(node.op) << " (%" << n.value << ")";
}

void ElementWriter::hoist_invariants(const std::string& indent, std::set<std::string> varying) {
  hoisting_ = true;
  hoist_indent_ = indent;
  varying_ = std::move(varying);
  hoisted_.str("");
}

std::string ElementWriter::take_hoisted() {
  hoisting_ = false;
  invariant_temps_.clear();
  std::string out = hoisted_.str();
  hoisted_.str("");
  return out;
}

// Whether an expression bound to a temporary takes the same value at every step of the
// loop being hoisted from: it reads no memory (any subscript counts as a read), names
// none of the varying identifiers, and names only temporaries hoisted before it (a
// temporary bound in the loop, or declared by other statements, may vary). A name starts
// where a letter or '_' follows neither a name character nor '.', which passes over the
// letters inside numbers (1e-05f, 0x7f800000u).
bool ElementWriter::invariant(const std::string& expr) const {
  if (expr.find('[') != std::string::npos) return false;
  const auto in_name = [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
  };
  for (size_t i = 0; i < expr.size(); ++i) {
    const bool starts = (std::isalpha(static_cast<unsigned char>(expr[i])) || expr[i] == '_') &&
                        (i == 0 || (!in_name(expr[i - 1]) && expr[i - 1] != '.'));
    if (!starts) continue;
    size_t end = i;
    while (end < expr.size() && in_name(expr[end])) ++end;
    const std::string name = expr.substr(i, end - i);
    i = end;
    if (varying_.count(name)) return false;
    const bool temporary = name.size() > 1 && name[0] == 't' &&
                           std::all_of(name.begin() + 1, name.end(), [](char c) {
                             return std::isdigit(static_cast<unsigned char>(c));
                           });
    if (temporary && !invariant_temps_.count(name)) return false;
  }
  return true;
}

// Node n's value rounded or wrapped as the reference stores a value of dtype t (see
// normalize), except at the kernel's root, whose store does the same: rounding there as
// well (float -> half -> float -> half per element) made a decode step's key and value
// cache casts take twice as long.
std::string ElementWriter::rounded(NodeId n, DType t, const std::string& v) const {
  return n == k_.root ? v : normalize(t, v);
}

std::string ElementWriter::cast(NodeId n, const Edge& e, const std::string& v, DType to) {
  const DType from = g_.node(plan_.canon(e.source)).dtype;
  if (to == DType::Bool) return "(int64_t)(" + v + " != 0)";
  if (is_float(to)) {
    const std::string widened = "(" + compute_type(to) + ")(" + v + ")";
    return rounded(n, to, widened);
  }
  if (is_float(from)) {
    const auto [lo, hi] = int_range(to);
    return rounded(
        n, to,
        "lum_f2i(" + v + ", " + literal(lo, DType::F64) + ", " + literal(hi, DType::F64) + ")");
  }
  return rounded(n, to, v);
}

// A fused reduction (a pooling window's row, planned into its reader: plan_kernels) at
// idx: a loop over its axis, in order, as the kernel of its own would run it; its value
// rounded as that kernel would store it.
std::string ElementWriter::nested_reduction(NodeId n, const std::vector<Expr>& idx,
                                            const std::string& indent) {
  const Node& node = g_.node(n);
  const Edge& e = node.inputs[0];
  const auto axis = static_cast<size_t>(node.axis);
  const Expr len = e.view.shape()[axis];
  note_vars(len);
  const std::string acc = fresh(), r = "lum_r" + std::to_string(next_++);
  os_ << indent << compute_type(node.dtype) << " " << acc << " = "
      << reduction_identity(node.op, node.dtype) << ";\n"
      << indent << "for (int64_t " << r << " = 0; " << r << " < " << len.to_c() << "; ++" << r
      << ") {\n";
  std::vector<Expr> in_idx = idx;
  in_idx.insert(in_idx.begin() + static_cast<std::ptrdiff_t>(axis), counter(r, len));
  {
    const Scope looped(*this);  // (what the loop binds depends on its counter)
    const std::string v = operand(e, in_idx, indent + "  ");
    os_ << indent << "  " << acc << " = " << reduction_step(node, acc, v) << ";\n";
  }
  os_ << indent << "}\n";
  const std::string out = fresh();
  os_ << indent << "const " << compute_type(node.dtype) << " " << out << " = "
      << rounded(n, node.dtype, acc) << ";\n";
  return out;
}

std::string ElementWriter::gather(const Node& node, const std::vector<Expr>& idx,
                                  const std::string& indent) {
  const std::string pos = operand(node.inputs[1], idx, indent);
  const Edge& data = node.inputs[0];
  const Expr limit = product(data.view.shape());
  note_vars(limit);
  const std::string g = "lum_g" + std::to_string(next_++);
  os_ << indent << "const int64_t " << g << " = " << pos << ";\n";
  const std::string out = fresh();
  const std::string t = compute_type(node.dtype);
  os_ << indent << t << " " << out << " = 0;\n";
  os_ << indent << "if (" << g << " < 0 || " << g << " >= " << limit.to_c() << ") {\n"
      << indent << "  lum_fail(err, 1, " << g << ", lum_o);\n"
      << indent << "} else {\n";
  const std::vector<Expr> didx =
      View::contiguous(data.view.shape()).unflatten(Expr::var(g, kExprNegInf, kExprInf));
  const Scope guarded(*this);
  const std::string v = operand(data, didx, indent + "  ");
  os_ << indent << "  " << out << " = " << v << ";\n" << indent << "}\n";
  return out;
}

}  // namespace luminal::runtime

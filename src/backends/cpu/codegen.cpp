// Renders each planned kernel as a C++ loop nest. A kernel evaluates its root at every
// output element; fused producers are evaluated inline at the index their consumer's
// view maps to (so permutes, broadcasts, slices and padding cost only index math), and
// materialised ones are loaded from their buffers.
#include "backends/cpu/codegen.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>
#include <map>
#include <set>
#include <sstream>
#include <string_view>

#include "luminal/error.hpp"

namespace luminal::cpugen {
namespace {

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

std::string literal(double v, DType t) {
  if (!is_float(t)) return std::to_string(static_cast<int64_t>(v)) + "LL";
  if (std::isnan(v)) return "std::numeric_limits<" + compute_type(t) + ">::quiet_NaN()";
  if (std::isinf(v))
    return std::string(v < 0 ? "-" : "") + "std::numeric_limits<" + compute_type(t) +
           ">::infinity()";
  std::ostringstream os;
  os.precision(17);
  os << v;
  std::string s = os.str();
  if (s.find_first_of(".e") == std::string::npos) s += ".0";
  return t == DType::F64 ? s : s + "f";
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

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// Row-major flat index of a multi-index in `shape`.
Expr flatten(const std::vector<Expr>& idx, const std::vector<Expr>& shape) {
  Expr f = 0;
  for (size_t d = 0; d < shape.size(); ++d) f = f * shape[d] + idx[d];
  return f;
}

class KernelWriter {
 public:
  KernelWriter(const Graph& g, const compiler::KernelPlan& plan, const compiler::Kernel& k)
      : g_(g), plan_(plan), k_(k) {
    for (size_t i = 0; i < k.reads.size(); ++i) slot_[k.reads[i].value] = i + 1;
  }

  // The function body (without the dims declarations, which need every kernel's vars).
  std::string write() {
    const Node& root = g_.node(k_.root);
    out_type_ = storage_type(root.dtype);
    os_ << "  " << out_type_ << "* out = (" << out_type_ << "*)bufs[0];\n";
    for (size_t i = 0; i < k_.reads.size(); ++i) {
      const Node& r = g_.node(k_.reads[i]);
      const std::string t = r.quant != kPlainStorage ? "uint8_t" : storage_type(r.dtype);
      os_ << "  const " << t << "* in" << (i + 1) << " = (const " << t << "*)bufs[" << (i + 1)
          << "];\n";
    }
    switch (root.op) {
      case Op::SumReduce:
      case Op::MaxReduce:
        write_reduce(root);
        break;
      case Op::Scatter:
        write_scatter(root);
        break;
      default:
        write_map(root);
        break;
    }
    return os_.str();
  }

  const std::set<std::string>& vars() const { return vars_; }

 private:
  // Declares the flat output loop.
  void open_loop(const std::vector<Expr>& shape, const std::string& indent) {
    const Expr n = product(shape);
    note_vars(n);
    os_ << indent << "const int64_t lum_n = " << n.to_c() << ";\n";
    os_ << parallel_for(n, "lum_n", indent);
    os_ << indent << "for (int64_t lum_o = 0; lum_o < lum_n; ++lum_o) {\n";
  }

  // The pragma that splits the next loop over the threads when the kernel touches more
  // than kParallelElements (the bound lum_for in the prelude uses too). A parallel region
  // costs about 0.7 us even when its `if` keeps it to one thread, so a kernel whose size
  // is a small constant (most of a decode step's hundreds of kernels) gets no pragma.
  static std::string parallel_for(const Expr& elements, const std::string& c_elements,
                                  const std::string& indent) {
    const auto c = elements.as_const();
    if (c && *c <= kParallelElements) return "";
    return indent + "#pragma omp parallel for schedule(static) if(" + c_elements + " > " +
           std::to_string(kParallelElements) + ")\n";
  }

  // A loop counter named `name` over [0, size), with its range recorded.
  Expr counter(const std::string& name, Expr size) {
    const auto c = size.as_const();
    const Expr v = c ? Expr::var(name, 0, std::max<int64_t>(*c - 1, 0)) : Expr::var(name);
    ranges_[name] = {Expr(0), size};
    counters_[name] = v;
    return v;
  }

  // Splits the flat counter `flat` (a C variable) into one counter per dim of `shape`,
  // declared once where it is called; dims of size 1 get index 0. The counters carry
  // their (symbolic) ranges, so index math over them simplifies without divisions.
  std::vector<Expr> split_counter(const std::string& flat, const std::vector<Expr>& shape,
                                  const std::string& indent) {
    const std::vector<Expr> parts = View::contiguous(shape).unflatten(Expr::var(flat));
    std::vector<Expr> idx;
    for (size_t d = 0; d < shape.size(); ++d) {
      if (shape[d] == Expr(1)) {
        idx.emplace_back(0);
        continue;
      }
      const std::string name = "lum_i" + std::to_string(next_++);
      note_vars(parts[d]);
      os_ << indent << "const int64_t " << name << " = " << parts[d].to_c() << ";\n";
      idx.push_back(counter(name, shape[d]));
    }
    return idx;
  }

  Expr within(Expr e) const { return simplify_within(e, ranges_); }

  // Inside a padding guard, a masked dim's counter is known to lie within the mask.
  void narrow(const View& view, const std::vector<Expr>& idx) {
    for (size_t d = 0; d < view.rank(); ++d) {
      if (!view.is_masked(d)) continue;
      std::vector<std::string> ranged;
      for (const std::string& name : idx[d].variables())
        if (ranges_.count(name)) ranged.push_back(name);
      if (ranged.size() != 1) continue;
      const Expr offset = idx[d] - counters_.at(ranged[0]);  // idx = counter + offset?
      const std::vector<std::string> rest = offset.variables();
      if (std::any_of(rest.begin(), rest.end(),
                      [&](const std::string& n) { return ranges_.count(n) > 0; }))
        continue;
      VarRange& r = ranges_[ranged[0]];
      r = {max(r.lo, view.mask_lo(d) - offset), min(r.hi, view.mask_hi(d) - offset)};
    }
  }

  void write_map(const Node& root) {
    if (root.shape.empty()) {
      os_ << "  {\n    const int64_t lum_o = 0; (void)lum_o;\n";
      const std::string v = value(k_.root, {}, "    ");
      os_ << "    out[0] = " << store_expr(root.dtype, v) << ";\n  }\n";
      return;
    }
    // The last dim gets an inner loop of its own: its index is a plain counter, masks
    // along it become comparisons the compiler can vectorise, and the outer dims are
    // split from the row counter once per row. A single row (decoding) splits its
    // columns over the threads instead.
    const Expr cols = root.shape.back();
    const std::vector<Expr> outer(root.shape.begin(), root.shape.end() - 1);
    const Expr rows = product(outer);
    note_vars(rows);
    note_vars(cols);
    os_ << "  const int64_t lum_rows = " << rows.to_c() << ", lum_cols = " << cols.to_c() << ";\n";
    // The column loop is declared `omp simd` (a kernel's output never aliases its
    // inputs): GCC 12 otherwise vectorises the row loop around a short column loop,
    // and miscompiles selects on byte masks when it does.
    // A single row (decoding) splits its columns over the threads with lum_for instead,
    // and its pieces are `omp simd` loops as well: GCC 12 vectorises no `omp parallel
    // for simd` loop, and lum_for enters no parallel region for a small row. (lum_for's
    // lambdas everywhere made the JIT compile of a model's kernels 60% slower.)
    const bool one_row = rows == Expr(1);
    if (one_row) {
      os_ << "  {\n    const int64_t lum_row = 0;\n";
      os_ << "    lum_for(lum_cols, lum_cols, [&](int64_t lum_begin, int64_t lum_end) {\n";
    } else {
      os_ << parallel_for(rows * cols, "lum_rows * lum_cols", "  ");
      os_ << "  for (int64_t lum_row = 0; lum_row < lum_rows; ++lum_row) {\n";
    }
    std::vector<Expr> idx = split_counter("lum_row", outer, "    ");
    idx.push_back(counter("lum_col", cols));
    // The body first, to see whether it can report errors (simd lanes would race to
    // record the first one).
    std::ostringstream head;
    std::swap(head, os_);
    os_ << "      const int64_t lum_o = lum_row * lum_cols + lum_col; (void)lum_o;\n";
    const std::string v = value(k_.root, idx, "      ");
    os_ << "      out[lum_o] = " << store_expr(root.dtype, v) << ";\n    }\n";
    os_ << (one_row ? "    });\n  }\n" : "  }\n");
    const std::string body = os_.str();
    std::swap(head, os_);
    const bool simd =
        body.find("lum_fail") == std::string::npos && body.find("lum_imod") == std::string::npos;
    if (simd) os_ << "    #pragma omp simd\n";
    const std::string first = one_row ? "lum_begin" : "0", last = one_row ? "lum_end" : "lum_cols";
    os_ << "    for (int64_t lum_col = " << first << "; lum_col < " << last << "; ++lum_col) {\n"
        << body;
  }

  void write_reduce(const Node& root) {
    const Edge& e = root.inputs[0];
    const auto axis = static_cast<size_t>(root.axis);
    const Expr len = e.view.shape()[axis];
    note_vars(len);
    open_loop(root.shape, "  ");
    std::vector<Expr> in_idx = split_counter("lum_o", root.shape, "    ");
    in_idx.insert(in_idx.begin() + static_cast<std::ptrdiff_t>(axis), counter("lum_r", len));
    const std::string t = compute_type(root.dtype);
    const bool sum = root.op == Op::SumReduce;
    std::string init;
    if (sum) {
      init = is_float(root.dtype) ? literal(0, root.dtype) : "0";
    } else {
      init = is_float(root.dtype) ? "-std::numeric_limits<" + t + ">::infinity()"
                                  : std::to_string(lowest_int(root.dtype)) + "LL";
    }
    // Float reductions are declared to OpenMP so the inner loop vectorises (partial sums
    // in SIMD lanes). Max tracks NaN separately so that fmax can vectorise while a NaN
    // still propagates, as in PyTorch.
    const bool simd = is_float(root.dtype);
    os_ << "    " << t << " acc = " << init << ";\n";
    if (simd && !sum) os_ << "    int lum_nan = 0;\n";
    if (simd)
      os_ << (sum ? "    #pragma omp simd reduction(+:acc)\n"
                  : "    #pragma omp simd reduction(max:acc) reduction(|:lum_nan)\n");
    os_ << "    for (int64_t lum_r = 0; lum_r < " << len.to_c() << "; ++lum_r) {\n";
    const std::string v = operand(e, in_idx, "      ");
    if (sum) {
      os_ << "      acc = " << (simd ? "acc + " + v : "lum_wrap_add(acc, " + v + ")") << ";\n";
    } else if (simd) {
      os_ << "      lum_nan |= (" << v << " != " << v << ");\n";
      os_ << "      acc = " << v << " > acc ? " << v << " : acc;\n";
    } else {
      os_ << "      acc = lum_max<" << t << ">(acc, " << v << ");\n";
    }
    os_ << "    }\n";
    if (simd && !sum)
      os_ << "    if (lum_nan) acc = std::numeric_limits<" << t << ">::quiet_NaN();\n";
    os_ << "    out[lum_o] = " << store_expr(root.dtype, "acc") << ";\n  }\n";
  }

  void write_scatter(const Node& root) {
    // Copy the destination, then write sources in order (later writes win).
    open_loop(root.shape, "  ");
    const std::string d =
        operand(root.inputs[0], split_counter("lum_o", root.shape, "    "), "    ");
    os_ << "    out[lum_o] = " << store_expr(root.dtype, d) << ";\n  }\n";
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

  void note_vars(Expr e) {
    for (const std::string& v : e.variables())
      if (v.rfind("lum_", 0) != 0) vars_.insert(v);
  }

  std::string fresh() { return "t" + std::to_string(next_++); }

  // Loads element `flat` of a stored value (decoding it if the input is block-stored).
  std::string load(NodeId n, Expr flat) {
    const Node& node = g_.node(n);
    flat = within(flat);
    note_vars(flat);
    const std::string buf = "in" + std::to_string(slot_.at(n.value));
    if (node.quant != kPlainStorage)
      return "lum_dq_" + lower(ggml_type_name(node.quant)) + "(" + buf + ", " + flat.to_c() + ")";
    return load_expr(node.dtype, buf + "[" + flat.to_c() + "]");
  }

  // The value an edge supplies at the consumer's logical index: through the view, with
  // padding reading zero.
  std::string operand(const Edge& e, const std::vector<Expr>& idx, const std::string& indent) {
    const NodeId src = plan_.canon(e.source);
    const Node& p = g_.node(src);
    const View contiguous = View::contiguous(p.shape);
    if (e.view == contiguous) return value(src, idx, indent);
    // A stored value is read at the flat offset itself; only a fused producer needs its
    // multi-index.
    const bool stored = src != k_.root && plan_.materialized[src.value];
    const auto read = [&](const std::string& ind) {
      const Expr flat = within(e.view.index(idx));
      if (stored) return load(src, flat);
      std::vector<Expr> pidx = contiguous.unflatten(flat);
      for (Expr& i : pidx) i = within(i);
      return value(src, pidx, ind);
    };
    const Expr valid = within(e.view.valid(idx));
    note_vars(valid);
    if (valid == Expr(1)) return read(indent);
    const std::string t = compute_type(p.dtype), name = fresh();
    os_ << indent << t << " " << name << " = 0;\n";
    os_ << indent << "if (" << valid.to_c() << ") {\n";
    const VarRanges outside = ranges_;
    narrow(e.view, idx);
    const std::string inner = read(indent + "  ");
    ranges_ = outside;
    os_ << indent << "  " << name << " = " << inner << ";\n" << indent << "}\n";
    return name;
  }

  // Emits statements computing node `n` at multi-index `idx`; returns a C expression.
  std::string value(NodeId n, const std::vector<Expr>& idx, const std::string& indent) {
    n = plan_.canon(n);
    const Node& node = g_.node(n);
    const std::string t = compute_type(node.dtype);
    if (n != k_.root && plan_.materialized[n.value]) return load(n, flatten(idx, node.shape));
    auto bind = [&](const std::string& expr) {
      const std::string name = fresh();
      os_ << indent << "const " << t << " " << name << " = " << expr << ";\n";
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
      case Op::Exp2:  // lum_exp2f vectorises; double keeps libm
        return bind(
            rounded(n, node.dtype,
                    (f && suffix == "f" ? "lum_exp2f(" : "exp2" + suffix + "(") + in(0) + ")"));
      case Op::Sin:
        return bind(rounded(n, node.dtype, "sin" + suffix + "(" + in(0) + ")"));
      case Op::Sqrt:
        return bind(rounded(n, node.dtype, "sqrt" + suffix + "(" + in(0) + ")"));
      case Op::Recip:
        return bind(rounded(n, node.dtype, "(" + t + ")1 / " + in(0)));
      case Op::Add: {
        const std::string a = in(0), b = in(1);
        return bind(
            rounded(n, node.dtype, f ? a + " + " + b : "lum_wrap_add(" + a + ", " + b + ")"));
      }
      case Op::Mul: {
        const std::string a = in(0), b = in(1);
        return bind(
            rounded(n, node.dtype, f ? a + " * " + b : "lum_wrap_mul(" + a + ", " + b + ")"));
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
      default:
        break;
    }
    LUM_FAIL() << "CPU backend: cannot generate code for " << op_name(node.op) << " (%" << n.value
               << ")";
  }

  // Node n's value rounded or wrapped as the reference stores a value of dtype t (see
  // normalize), except at the kernel's root, whose store does the same: rounding there as
  // well (float -> half -> float -> half per element) made a decode step's key and value
  // cache casts take twice as long.
  std::string rounded(NodeId n, DType t, const std::string& v) const {
    return n == k_.root ? v : normalize(t, v);
  }

  std::string cast(NodeId n, const Edge& e, const std::string& v, DType to) {
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

  std::string gather(const Node& node, const std::vector<Expr>& idx, const std::string& indent) {
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
    const std::string v = operand(data, didx, indent + "  ");
    os_ << indent << "  " << out << " = " << v << ";\n" << indent << "}\n";
    return out;
  }

  const Graph& g_;
  const compiler::KernelPlan& plan_;
  const compiler::Kernel& k_;
  std::map<uint32_t, size_t> slot_;
  std::ostringstream os_;
  std::string out_type_;
  std::set<std::string> vars_;
  VarRanges ranges_;                      // of the loop counters in scope
  std::map<std::string, Expr> counters_;  // by name
  int next_ = 0;
};

}  // namespace

GeneratedSource generate_source(const Graph& g, const compiler::KernelPlan& plan) {
  std::vector<std::string> bodies;
  std::set<std::string> vars;
  for (const compiler::Kernel& k : plan.kernels) {
    if (g.node(k.root).op == Op::Custom) {  // library kernels run natively
      bodies.emplace_back();
      continue;
    }
    KernelWriter w(g, plan, k);
    bodies.push_back(w.write());
    vars.insert(w.vars().begin(), w.vars().end());
  }
  GeneratedSource out;
  out.dims.assign(vars.begin(), vars.end());
  std::ostringstream os;
  os << kernel_prelude() << expr_c_prelude() << "\n";
  // A transformer's layers make the same kernels over and over, on other buffers: each
  // body is compiled once and its repeats are aliases of it. Less code to compile, and a
  // decode step runs a few dozen kernels' code, which the caches keep, instead of hundreds
  // that the weights streaming through them evict.
  std::map<std::string_view, size_t> first_with_body;
  for (size_t k = 0; k < bodies.size(); ++k) {
    if (bodies[k].empty()) continue;
    const auto [first, fresh] = first_with_body.emplace(bodies[k], k);
    if (!fresh) {
      os << "extern \"C\" void lum_kernel_" << k
         << "(void**, const int64_t*, int64_t*) __attribute__((alias(\"lum_kernel_" << first->second
         << "\")));\n\n";
      continue;
    }
    os << "extern \"C\" void lum_kernel_" << k
       << "(void** bufs, const int64_t* dims, int64_t* err) {\n"
       << "  (void)dims; (void)err;\n";
    for (size_t i = 0; i < out.dims.size(); ++i)
      os << "  const int64_t " << out.dims[i] << " = dims[" << i << "]; (void)" << out.dims[i]
         << ";\n";
    os << bodies[k] << "}\n\n";
  }
  out.code = os.str();
  return out;
}

}  // namespace luminal::cpugen

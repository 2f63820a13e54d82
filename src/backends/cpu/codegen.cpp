// Renders each planned kernel as a C++ loop nest around the shared element rendering
// (runtime::ElementWriter): OpenMP loops over the output, SIMD inner loops, reductions
// vectorised through OpenMP reduction clauses.
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
#include "runtime/element_writer.hpp"

namespace luminal::cpugen {
namespace {

using runtime::compute_type;
using runtime::literal;
using runtime::store_expr;

class KernelWriter : public runtime::ElementWriter {
 public:
  using ElementWriter::ElementWriter;

  // The function body (without the dims declarations, which need every kernel's vars).
  std::string write() {
    const Node& root = g_.node(k_.root);
    const std::string out_type = output_type();
    os_ << "  " << out_type << "* out = (" << out_type << "*)bufs[0];\n";
    for (size_t i = 0; i < k_.reads.size(); ++i) {
      const std::string t = input_type(i);
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
    // Float reductions are declared to OpenMP so the inner loop vectorises (partial sums
    // in SIMD lanes). Max tracks NaN separately so that fmax can vectorise while a NaN
    // still propagates, as in PyTorch.
    const bool simd = is_float(root.dtype);
    os_ << "    " << t << " acc = " << runtime::reduction_identity(root.op, root.dtype) << ";\n";
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
      os_ << "    if (lum_nan) acc = " << literal(NAN, root.dtype) << ";\n";
    os_ << "    out[lum_o] = " << store_expr(root.dtype, "acc") << ";\n  }\n";
  }

  void write_scatter(const Node& root) {
    // Copy the destination, then write sources in order (later writes win).
    open_loop(root.shape, "  ");
    const std::string d =
        operand(root.inputs[0], split_counter("lum_o", root.shape, "    "), "    ");
    os_ << "    out[lum_o] = " << store_expr(root.dtype, d) << ";\n  }\n";
    write_ordered_scatter(root);
  }
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
  os << kernel_prelude() << runtime::scalar_prelude() << "}  // namespace\n\n"
     << "#define LUM_EXPR_FN static inline\n"
     << expr_c_prelude() << "\n";
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

// Renders each planned kernel as a CUDA grid-stride loop around the shared element
// rendering (runtime::ElementWriter), so CPU and GPU compute every element by the same
// expression and round it the same way.
#include "backends/cuda/codegen.hpp"

#include <algorithm>
#include <map>
#include <set>
#include <sstream>

#include "luminal/error.hpp"
#include "runtime/element_writer.hpp"

namespace luminal::cudagen {
namespace {

using runtime::compute_type;
using runtime::store_expr;

class KernelWriter : public runtime::ElementWriter {
 public:
  using ElementWriter::ElementWriter;

  // The kernel body (without the dims declarations, which need every kernel's vars);
  // `threads` is set to what the grid-stride loop covers.
  std::string write(Expr& threads) {
    const Node& root = g_.node(k_.root);
    switch (root.op) {
      case Op::SumReduce:
      case Op::MaxReduce:
        write_reduce(root, threads);
        break;
      case Op::Scatter:
        write_copy(root, threads);
        break;
      default:
        write_map(root, threads);
        break;
    }
    return os_.str();
  }

  // The functions' parameter list: the output, the reads, the error slot, the dims.
  std::string parameters() const {
    std::string p = output_type() + "* __restrict__ out";
    for (size_t i = 0; i < k_.reads.size(); ++i)
      p += ", const " + input_type(i) + "* __restrict__ in" + std::to_string(i + 1);
    return p + ", int64_t* err, LumDims lum_dims";
  }

  // The second kernel of a Scatter: the sources written in order (later writes win, as
  // in the reference), by one thread.
  std::string write_scatter() {
    const Node& root = g_.node(k_.root);
    const Expr n = product(root.shape);
    note_vars(n);
    os_ << "  if (blockIdx.x != 0 || threadIdx.x != 0) return;\n";
    os_ << "  const int64_t lum_n = " << n.to_c() << ";\n";
    write_ordered_scatter(root);
    return os_.str();
  }

 private:
  // for each output element lum_o (one per thread, grid-stride)
  void open_loop(const Expr& n, const std::string& per) {
    note_vars(n);
    os_ << "  const int64_t lum_n = " << n.to_c() << ";\n";
    os_ << "  const int64_t lum_step = (int64_t)gridDim.x * blockDim.x" << per << ";\n";
    os_ << "  for (int64_t lum_o = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x)" << per
        << "; lum_o < lum_n; lum_o += lum_step) {\n";
  }

  void write_map(const Node& root, Expr& threads) {
    threads = product(root.shape);
    open_loop(threads, "");
    const std::vector<Expr> idx = split_counter("lum_o", root.shape, "    ");
    const std::string v = value(k_.root, idx, "    ");
    os_ << "    out[lum_o] = " << store_expr(root.dtype, v) << ";\n  }\n";
  }

  void write_copy(const Node& root, Expr& threads) {
    threads = product(root.shape);
    open_loop(threads, "");
    const std::string d =
        operand(root.inputs[0], split_counter("lum_o", root.shape, "    "), "    ");
    os_ << "    out[lum_o] = " << store_expr(root.dtype, d) << ";\n  }\n";
  }

  // One warp per output element: lanes stride over the reduced axis, then combine
  // through shuffles. Every lane of a warp takes the same trips round the outer loop.
  void write_reduce(const Node& root, Expr& threads) {
    const Edge& e = root.inputs[0];
    const auto axis = static_cast<size_t>(root.axis);
    const Expr len = e.view.shape()[axis];
    note_vars(len);
    const Expr outputs = product(root.shape);
    threads = outputs * 32;
    open_loop(outputs, " >> 5");
    std::vector<Expr> in_idx = split_counter("lum_o", root.shape, "    ");
    in_idx.insert(in_idx.begin() + static_cast<std::ptrdiff_t>(axis), counter("lum_r", len));
    const std::string t = compute_type(root.dtype);
    const bool sum = root.op == Op::SumReduce, f = is_float(root.dtype);
    auto combine = [&](const std::string& a, const std::string& b) {
      if (!sum) return "lum_max<" + t + ">(" + a + ", " + b + ")";
      return f ? a + " + " + b : "lum_wrap_add(" + a + ", " + b + ")";
    };
    os_ << "    " << t << " acc = " << runtime::reduction_identity(root.op, root.dtype) << ";\n";
    os_ << "    for (int64_t lum_r = threadIdx.x & 31; lum_r < " << len.to_c()
        << "; lum_r += 32) {\n";
    const std::string v = operand(e, in_idx, "      ");
    os_ << "      acc = " << combine("acc", v) << ";\n    }\n";
    os_ << "    for (int lum_s = 16; lum_s > 0; lum_s >>= 1) {\n"
        << "      const " << t << " lum_other = __shfl_xor_sync(0xffffffffu, acc, lum_s);\n"
        << "      acc = " << combine("acc", "lum_other") << ";\n    }\n";
    os_ << "    if ((threadIdx.x & 31) == 0) out[lum_o] = " << store_expr(root.dtype, "acc")
        << ";\n  }\n";
  }
};

}  // namespace

CudaSource generate_cuda_source(const Graph& g, const compiler::KernelPlan& plan) {
  struct Body {
    std::string params, main, scatter;
  };
  std::vector<Body> bodies(plan.kernels.size());
  CudaSource out;
  out.launches.resize(plan.kernels.size());
  std::set<std::string> vars;
  for (size_t k = 0; k < plan.kernels.size(); ++k) {
    const compiler::Kernel& kn = plan.kernels[k];
    const Node& root = g.node(kn.root);
    if (root.op == Op::Custom) continue;  // library kernels run natively
    KernelLaunch& launch = out.launches[k];
    launch.shape = root.op == Op::Scatter                                    ? KernelShape::Scatter
                   : root.op == Op::SumReduce || root.op == Op::MaxReduce ? KernelShape::Reduce
                                                                          : KernelShape::Map;
    // A fresh writer per function: each declares its own temporaries.
    KernelWriter w(g, plan, kn);
    bodies[k].main = w.write(launch.threads);
    vars.insert(w.vars().begin(), w.vars().end());
    if (launch.shape == KernelShape::Scatter) {
      KernelWriter s(g, plan, kn);
      bodies[k].scatter = s.write_scatter();
      vars.insert(s.vars().begin(), s.vars().end());
    }
    bodies[k].params = w.parameters();
  }
  out.dims.assign(vars.begin(), vars.end());
  std::ostringstream os;
  os << cuda_prelude() << runtime::scalar_prelude()
     << "#define LUM_EXPR_FN static __device__ __forceinline__\n"
     << expr_c_prelude() << "\n"
     << "struct LumDims { int64_t v[" << std::max<size_t>(out.dims.size(), 1) << "]; };\n\n";
  std::string dims_decl;
  for (size_t i = 0; i < out.dims.size(); ++i)
    dims_decl += "  const int64_t " + out.dims[i] + " = lum_dims.v[" + std::to_string(i) +
                 "]; (void)" + out.dims[i] + ";\n";
  // A transformer's layers make the same kernels over and over, on other buffers: each
  // distinct function is compiled once and launched for all of them.
  std::map<std::string, std::string> function_of;  // full text after the name -> name
  auto emit = [&](const std::string& name, const std::string& params, const std::string& body) {
    const std::string rest = "(" + params + ") {\n  (void)err;\n" + dims_decl + body + "}\n\n";
    const auto [it, fresh] = function_of.emplace(rest, name);
    if (fresh) os << "extern \"C\" __global__ void __launch_bounds__(256) " << name << rest;
    return it->second;
  };
  for (size_t k = 0; k < plan.kernels.size(); ++k) {
    if (bodies[k].main.empty()) continue;
    const std::string name = "lum_kernel_" + std::to_string(k);
    out.launches[k].function = emit(name, bodies[k].params, bodies[k].main);
    if (!bodies[k].scatter.empty())
      out.launches[k].scatter_function = emit(name + "_scatter", bodies[k].params, bodies[k].scatter);
  }
  out.code = os.str();
  return out;
}

}  // namespace luminal::cudagen

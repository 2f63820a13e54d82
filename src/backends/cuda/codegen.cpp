// Renders each planned kernel as a CUDA grid-stride loop around the shared element
// rendering (runtime::ElementWriter), so CPU and GPU compute every element by the same
// expression and round it the same way.
#include "backends/cuda/codegen.hpp"

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <tuple>

#include "luminal/error.hpp"
#include "runtime/element_writer.hpp"

namespace luminal::cudagen {
namespace {

using runtime::compute_type;
using runtime::reduction_step;
using runtime::store_expr;

// Statements leaving in every lane of a warp its lanes' partials `acc` of reduction `r`
// combined, through shuffles.
std::string warp_combine(const Node& r, const std::string& indent) {
  return indent + "for (int lum_s = 16; lum_s > 0; lum_s >>= 1)\n" + indent +
         "  acc = " + reduction_step(r, "acc", "__shfl_xor_sync(0xffffffffu, acc, lum_s)") + ";\n";
}

// Statements leaving in every thread of a block of `threads` (a C expression) its
// threads' partials `acc` of reduction `r` combined: through shuffles within each warp,
// then the warps' in order through shared array `part` (a slot a warp), which they may
// rewrite after.
std::string block_combine(const Node& r, const std::string& part, const std::string& threads,
                          const std::string& indent) {
  return warp_combine(r, indent) + indent + "if ((threadIdx.x & 31) == 0) " + part +
         "[threadIdx.x >> 5] = acc;\n" + indent + "__syncthreads();\n" + indent + "acc = " + part +
         "[0];\n" + indent + "for (int lum_w = 1; lum_w < (" + threads + " >> 5); ++lum_w)\n" +
         indent + "  acc = " + reduction_step(r, "acc", part + "[lum_w]") + ";\n" + indent +
         "__syncthreads();\n";
}

// Whether a reduction over `axis` of what edge `e` reads sums across rows: the axis is not
// the innermost and does not step one element, so adjacent outputs read adjacent elements
// and a warp striding along the axis would read one element a 32-byte sector.
bool reduces_across_rows(const Edge& e, size_t axis) {
  return axis + 1 < e.view.rank() && e.view.strides()[axis] != Expr(1);
}

// The most values (floats) a generated function holds in shared memory: 8 KiB (a
// ResNet's last BatchNorm holds four values of 512 channels), which leaves room for 16
// blocks of 256 threads on an SM.
constexpr int64_t kMaxSharedValues = 2048;

// Whether a kernel's f32 steps may round loosely (ElementWriter::loose_f32_): where what
// it stores is half precision.
bool stores_half(const Graph& g, const compiler::Kernel& k) {
  const DType t = g.node(k.root).dtype;
  return t == DType::BF16 || t == DType::F16;
}

class KernelWriter : public runtime::ElementWriter {
 public:
  KernelWriter(const Graph& g, const compiler::KernelPlan& plan, const compiler::Kernel& k)
      : ElementWriter(g, plan, k) {
    loose_f32_ = stores_half(g, k);
  }

  /// At most `floats` values in shared memory (a map group's members share one budget).
  void limit_shared_values(int64_t floats) { shared_budget_ = floats; }
  /// The values the kernel holds in shared memory, in floats.
  int64_t shared_values_held() const {
    int64_t n = 0;
    for (const auto& [node, elements] : shared_values_) n += elements;
    return n;
  }

  // The kernel body (without the dims declarations, which need every kernel's vars);
  // `threads` is set to the threads a launch needs (its grid-stride loop takes any fewer).
  std::string write(Expr& threads) {
    const Node& root = g_.node(k_.root);
    switch (root.op) {
      case Op::SumReduce:
      case Op::MaxReduce:
        if (parted_)
          write_parted_reduce(root, threads);
        else
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

  /// A reduction over a few long rows (parted_rows): each row dealt out to many blocks
  /// (write_parted_reduce).
  void part_rows() { parted_ = true; }

  // The functions' parameter list: the output, the reads, the error slot, the dims, and
  // for a parted reduction the scratch memory.
  std::string parameters() const {
    std::string p = output_type() + "* __restrict__ out";
    for (size_t i = 0; i < k_.reads.size(); ++i)
      p += ", const " + input_type(i) + "* __restrict__ in" + std::to_string(i + 1);
    return p + ", int64_t* err, const LumDims* __restrict__ lum_dims" +
           (parted_ ? ", unsigned char* __restrict__ lum_scratch" : "");
  }

  // As a map group's member: its output and reads as parameters named with `prefix`, and
  // the declarations in its scope that give them the names its body uses (out, in<i>,
  // err: the member's own error slot of the group's).
  std::string member_parameters(const std::string& prefix) const {
    std::string p = output_type() + "* __restrict__ " + prefix + "out";
    for (size_t i = 0; i < k_.reads.size(); ++i)
      p += ", const " + input_type(i) + "* __restrict__ " + prefix + "in" + std::to_string(i + 1);
    return p;
  }
  std::string member_aliases(const std::string& prefix, size_t member) const {
    std::string a = "      " + output_type() + "* __restrict__ out = " + prefix + "out;\n";
    for (size_t i = 0; i < k_.reads.size(); ++i) {
      const std::string in = "in" + std::to_string(i + 1);
      a += "      const " + input_type(i) + "* __restrict__ " + in + " = " + prefix + in + ";\n";
    }
    return a + "      int64_t* err = lum_err + " + std::to_string(3 * member) + "; (void)err;\n";
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

  // Each thread takes kMapVectors x kMapElements output elements a round and first loads,
  // for all of them, every input read at the output's own element: several loads are in
  // flight at once, where a body with a branch (sinf's slow path) would otherwise keep
  // the next element's load behind it. Other reads load in place. Where the output and
  // those inputs are aligned to kMapElements elements (as the arena's buffers are), a
  // vector's elements are adjacent and move as one load (16 bytes for f32): a quarter of
  // the memory instructions (and for a kernel that reads nothing whole, such as a mask's
  // Iota of bytes, one 4-byte store for four); a thread's vectors lie a block's width
  // apart. Elsewhere its elements are a grid stride apart, each loaded alone.
  void write_map(const Node& root, Expr& threads) {
    const Expr elements = product(root.shape);
    note_vars(elements);
    write_shared_values(elements);
    // The body at element `flat` (+ `step` along the innermost dim), and its value stored.
    const auto render = [&](const std::string& flat, const std::string& step) {
      const std::string before = os_.str();
      os_.str("");
      const std::vector<Expr> idx = split_counter(flat, root.shape, "      ", step);
      own_element_ = within(runtime::flatten(idx, root.shape));
      own_numel_ = elements;
      const std::string v = value(k_.root, idx, "      ");
      std::pair<std::string, std::string> out{os_.str(), store_expr(root.dtype, v)};
      os_.str(before);
      os_.seekp(0, std::ios_base::end);
      own_element_.reset();
      return out;
    };
    const auto [body, store] = render("lum_o", "");
    // Where the innermost dim is a multiple of kMapElements, a thread's adjacent elements
    // differ only along it: their indices are split once, from the first, and what
    // depends on the outer dims alone (a padded copy's guard, its row's offset) is
    // computed once for the four.
    const std::optional<size_t> inner = runtime::innermost_dim(root.shape);
    const std::optional<int64_t> innermost = inner ? root.shape[*inner].as_const() : std::nullopt;
    const auto [vector_body, vector_store] = innermost && *innermost % kMapElements == 0
                                                 ? render("lum_o0", "lum_u")
                                                 : std::pair{body, store};
    const std::string vec = "lum_vec<" + output_type() + ", " + std::to_string(kMapElements) + ">";
    // A thread takes kMapVectors x kMapElements elements a round: the launch needs no
    // more threads.
    threads = ceil_div(elements, Expr::constant(kMapVectors * kMapElements));
    os_ << "  const int64_t lum_n = " << elements.to_c() << ";\n"
        << "  const int64_t lum_step = (int64_t)gridDim.x * blockDim.x;\n"
        << "  const int64_t lum_t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;\n"
        << "  if (lum_aligned<" << kMapElements << ">(out)";
    for (const auto& [n, buffer] : preloaded_)
      os_ << " && lum_aligned<" << kMapElements << ">(" << buffer << ")";
    // Kernels that move more than kStreamBytes stream past the L2 (lum_load_vec).
    size_t element_bytes = dtype_size(root.dtype);
    for (const auto& [n, buffer] : preloaded_)
      element_bytes += dtype_size(g_.node(NodeId{n}).dtype);
    os_ << ") {\n"
        << "    const bool lum_stream = lum_n > "
        << kStreamBytes / static_cast<int64_t>(element_bytes) << ";\n"
        << "    const int64_t lum_whole = lum_n / " << kMapElements << " * " << kMapElements
        << ";\n"
        << "    const int64_t lum_apart = (int64_t)blockDim.x * " << kMapElements << ";\n"
        << "    for (int64_t lum_b = ((int64_t)blockIdx.x * blockDim.x * " << kMapVectors
        << " + threadIdx.x) * " << kMapElements
        << "; lum_b < lum_whole; lum_b += " << kMapVectors * kMapElements << " * lum_step) {\n";
    for (const auto& [n, buffer] : preloaded_)
      os_ << "      " << preloaded_vec(n) << " lum_a" << n << "[" << kMapVectors << "];\n";
    os_ << "#pragma unroll\n      for (int lum_h = 0; lum_h < " << kMapVectors << "; ++lum_h)\n"
        << "        if (lum_b + lum_h * lum_apart < lum_whole) {\n";
    for (const auto& [n, buffer] : preloaded_)
      os_ << "          lum_a" << n << "[lum_h] = lum_load_vec<" << kMapElements << ">(" << buffer
          << " + lum_b + lum_h * lum_apart, lum_stream);\n";
    os_ << "        }\n"
        << "#pragma unroll\n      for (int lum_h = 0; lum_h < " << kMapVectors << "; ++lum_h) {\n"
        << "      const int64_t lum_o0 = lum_b + lum_h * lum_apart;\n"
        << "      if (lum_o0 >= lum_whole) break;\n";
    for (const auto& [n, buffer] : preloaded_)
      os_ << "      const auto& lum_v" << n << " = lum_a" << n << "[lum_h];\n";
    os_ << "      " << vec << " lum_r;\n"
        << "#pragma unroll\n      for (int lum_u = 0; lum_u < " << kMapElements << "; ++lum_u) {\n"
        << "      const int64_t lum_o = lum_o0 + lum_u;\n"
        << vector_body << "      lum_r.v[lum_u] = " << vector_store << ";\n      }\n"
        << "      lum_store_vec(out + lum_o0, lum_r, lum_stream);\n      }\n    }\n"
        << "    for (int64_t lum_o = lum_whole + lum_t; lum_o < lum_n; lum_o += lum_step) {\n"
        << "      const int lum_u = 0;\n      (void)lum_u;\n";
    declare_preloaded("      ");
    for (const auto& [n, buffer] : preloaded_)
      os_ << "      lum_v" << n << ".v[0] = " << buffer << "[lum_o];\n";
    os_ << body << "      out[lum_o] = " << store << ";\n    }\n    return;\n  }\n";
    os_ << "  for (int64_t lum_o0 = lum_t; lum_o0 < lum_n; lum_o0 += " << kMapElements
        << " * lum_step) {\n";
    declare_preloaded("    ");
    os_ << "#pragma unroll\n    for (int lum_u = 0; lum_u < " << kMapElements << "; ++lum_u) {\n"
        << "      const int64_t lum_o = lum_o0 + lum_u * lum_step;\n"
        << "      if (lum_o >= lum_n) break;\n";
    for (const auto& [n, buffer] : preloaded_)
      os_ << "      lum_v" << n << ".v[lum_u] = " << buffer << "[lum_o];\n";
    os_ << "    }\n#pragma unroll\n    for (int lum_u = 0; lum_u < " << kMapElements
        << "; ++lum_u) {\n      const int64_t lum_o = lum_o0 + lum_u * lum_step;\n"
        << "      if (lum_o >= lum_n) break;\n"
        << body << "      out[lum_o] = " << store << ";\n    }\n  }\n";
  }

  // A value of a few elements that the kernel reads broadcast (a BatchNorm's 1/sqrt(var +
  // eps) a channel, its mean, weight and bias, read once for every pixel) is computed or
  // loaded into shared memory by each block, once an element, before the loop, which
  // reads it there: the loop would otherwise compute it again for every element (a
  // square root and a division) or load it from global memory (a 64-bit address each).
  void write_shared_values(const Expr& elements) {
    int64_t total = 0;
    std::set<uint32_t> seen;
    std::vector<NodeId> stack{k_.root};
    while (!stack.empty()) {
      const Node& n = g_.node(stack.back());
      stack.pop_back();
      for (const Edge& e : n.inputs) {
        const NodeId s = plan_.canon(e.source);
        if (!seen.insert(s.value).second) continue;
        const bool stored = plan_.materialized[s.value];
        const std::optional<int64_t> m = shareable(s, e.view, stored, elements);
        if (m && total + *m <= shared_budget_) {
          shared_values_.emplace(s.value, *m);
          total += *m;
        } else if (!stored) {
          stack.push_back(s);
        }
      }
    }
    if (shared_values_.empty()) return;
    filling_shared_ = true;
    for (const auto& [s, m] : shared_values_) {
      const std::string name = "lum_s" + std::to_string(s);
      os_ << "  __shared__ float " << name << "[" << m << "];\n"
          << "  for (int lum_j = threadIdx.x; lum_j < " << m << "; lum_j += blockDim.x) {\n";
      const std::string v =
          value(NodeId{s}, split_counter("lum_j", g_.node(NodeId{s}).shape, "    "), "    ");
      os_ << "    " << name << "[lum_j] = " << v << ";\n  }\n";
    }
    os_ << "  __syncthreads();\n";
    filling_shared_ = false;
  }

  // The elements of value `s` if the kernel should hold it in shared memory where `view`
  // reads it: read broadcast, a float of at most kMaxSharedValues elements that the
  // kernel's `elements` repeat at least kMinRepeats times (or a symbolic number of
  // times), stored or computed from a stored value (one computed from constants alone is
  // folded by the compiler).
  std::optional<int64_t> shareable(NodeId s, const View& view, bool stored,
                                   const Expr& elements) const {
    const Node& n = g_.node(s);
    if (!view.repeats() || runtime::compute_type(n.dtype) != "float" ||
        (stored ? n.quant != kPlainStorage : !reads_memory(s)))
      return std::nullopt;
    const std::optional<int64_t> m = product(n.shape).as_const();
    if (!m || *m < 1 || *m > kMaxSharedValues) return std::nullopt;
    if (const std::optional<int64_t> e = elements.as_const(); e && *e < kMinRepeats * *m)
      return std::nullopt;
    return m;
  }

  // Whether fused value `s` reads a stored value.
  bool reads_memory(NodeId s) const {
    std::set<uint32_t> seen;
    std::vector<NodeId> stack{s};
    while (!stack.empty()) {
      const Node& n = g_.node(stack.back());
      stack.pop_back();
      for (const Edge& e : n.inputs) {
        const NodeId in = plan_.canon(e.source);
        if (plan_.materialized[in.value]) return true;
        if (seen.insert(in.value).second) stack.push_back(in);
      }
    }
    return false;
  }

  std::optional<std::string> precomputed(NodeId n) override {
    if (filling_shared_ || shared_values_.count(n.value) == 0) return std::nullopt;
    return "lum_s" + std::to_string(n.value);
  }

  static constexpr int64_t kMinRepeats = 8;
  std::map<uint32_t, int64_t> shared_values_;  // node -> its elements
  int64_t shared_budget_ = kMaxSharedValues;
  bool filling_shared_ = false;  // while write_shared_values fills them

  // A preloaded input's holder of kMapElements elements.
  std::string preloaded_vec(uint32_t n) const {
    return "lum_vec<" + input_type(read_index(NodeId{n})) + ", " + std::to_string(kMapElements) +
           ">";
  }
  // The preloaded inputs' element holders, filled one element at a time.
  void declare_preloaded(const std::string& indent) {
    for (const auto& [n, buffer] : preloaded_)
      os_ << indent << preloaded_vec(n) << " lum_v" << n << ";\n";
  }

  // In write_map: a whole plain input read at the output's own element is preloaded.
  std::optional<std::string> held(NodeId n, const Expr& flat) override {
    if (!own_element_) return std::nullopt;
    const Node& node = g_.node(n);
    if (node.quant != kPlainStorage || !(within(flat - *own_element_) == Expr(0)) ||
        !(product(node.shape) == own_numel_))
      return std::nullopt;
    preloaded_.try_emplace(n.value, read_buffer(n));
    return runtime::load_expr(node.dtype, "lum_v" + std::to_string(n.value) + ".v[lum_u]");
  }

  // Four measured best on an H100 for the 8-op chain over 256M f32: 0.832 ms (89% of
  // copy) against 0.97 at one and 0.86 at eight (bench/results/cuda.md).
  static constexpr int kMapElements = 4;
  // Vectors a thread loads before computing any, a block's width apart (a block's loads
  // one contiguous stretch), in a grid that takes every element in one pass
  // (bench/results/cuda.md, 2026-12-04): on an H200 the 8-op chain over 256M f32 took
  // 0.552-0.557 ms against 0.572-0.575 at one vector in a grid of 16 blocks an SM; bf16
  // GELU and SwiGLU gained too, and 32 bytes a thread (four bf16 vectors) did no better.
  static constexpr int kMapVectors = 2;
  // Bytes (read and written) past which an elementwise kernel's vectors take the
  // evict-first path: well beyond the L2 of any GPU it runs on (50 MB on an H100), where
  // keeping them would only push out what the next kernels read. 0.80 -> 0.776 ms on the
  // 8-op chain over 256M f32 (bench/results/cuda.md).
  static constexpr int64_t kStreamBytes = int64_t{256} << 20;
  bool parted_ = false;              // part_rows
  std::optional<Expr> own_element_;  // while write_map renders its body
  Expr own_numel_;
  std::map<uint32_t, std::string> preloaded_;  // input node -> its buffer

  void write_copy(const Node& root, Expr& threads) {
    threads = product(root.shape);
    open_loop(threads, "");
    const std::string d =
        operand(root.inputs[0], split_counter("lum_o", root.shape, "    "), "    ");
    os_ << "    out[lum_o] = " << store_expr(root.dtype, d) << ";\n  }\n";
  }

  // A reduction across rows (a bias's gradient, [tokens, features] summed over the
  // tokens): a block takes kColumns adjacent outputs, a lane each in every group of
  // kColumns lanes, so a warp's load is whole 32-byte sectors of f32; its 256 / kColumns
  // slices stride over the reduced axis, and their partials are combined through
  // shuffles within a warp, then through shared memory across the block's warps, in a
  // fixed order. A warp an output instead read one element a sector, 7x slower than the
  // copy rate on GPT-2's bias gradients.
  static constexpr int kColumns = 8;

  void write_column_reduce(const Node& root, Expr& threads) {
    const Edge& e = root.inputs[0];
    const auto axis = static_cast<size_t>(root.axis);
    const Expr len = e.view.shape()[axis];
    const Expr outputs = product(root.shape);
    note_vars(outputs);
    constexpr int slices = kMaxBlock / kColumns, warps = kMaxBlock / 32;
    threads = (outputs + Expr(kColumns - 1)) / Expr(kColumns) * Expr(kMaxBlock);
    const std::string t = compute_type(root.dtype);
    os_ << "  __shared__ " << t << " lum_cols[" << warps << "][" << kColumns << "];\n"
        << "  const int64_t lum_n = " << outputs.to_c() << ";\n"
        << "  const int64_t lum_groups = (lum_n + " << kColumns - 1 << ") / " << kColumns << ";\n"
        << "  const int lum_col = threadIdx.x % " << kColumns << ", lum_slice = threadIdx.x / "
        << kColumns << ";\n"
        << "  for (int64_t lum_g = blockIdx.x; lum_g < lum_groups; lum_g += gridDim.x) {\n"
        << "    const int64_t lum_o = lum_g * " << kColumns << " + lum_col;\n"
        << "    " << t << " acc = " << runtime::reduction_identity(root.op, root.dtype) << ";\n"
        << "    if (lum_o < lum_n) {\n";
    std::vector<Expr> in_idx = split_counter("lum_o", root.shape, "      ");
    in_idx.insert(in_idx.begin() + static_cast<std::ptrdiff_t>(axis), counter("lum_r", len));
    os_ << "      for (int64_t lum_r = lum_slice; lum_r < " << len.to_c() << "; lum_r += " << slices
        << ") {\n";
    const std::string v = operand(e, in_idx, "        ");
    os_ << "        acc = " << reduction_step(root, "acc", v) << ";\n      }\n    }\n";
    // The warp's slices of each column (lanes kColumns apart), then the warps'.
    os_ << "    for (int lum_s = 16; lum_s >= " << kColumns << "; lum_s >>= 1)\n"
        << "      acc = " << reduction_step(root, "acc", "__shfl_xor_sync(0xffffffffu, acc, lum_s)")
        << ";\n"
        << "    if ((threadIdx.x & 31) < " << kColumns
        << ") lum_cols[threadIdx.x >> 5][lum_col] = acc;\n"
        << "    __syncthreads();\n"
        << "    if (threadIdx.x < " << kColumns << " && lum_o < lum_n) {\n"
        << "      for (int lum_w = 1; lum_w < " << warps << "; ++lum_w)\n"
        << "        acc = " << reduction_step(root, "acc", "lum_cols[lum_w][lum_col]") << ";\n"
        << "      out[lum_o] = " << store_expr(root.dtype, "acc") << ";\n    }\n"
        << "    __syncthreads();  // lum_cols is rewritten by the next group\n  }\n";
  }

  // A reduction alone over a few long rows (a tensor's total, a loss): each row dealt out
  // to `gridDim.x / rows` parts, a block each (the launch's grid is a whole number of them
  // a row), whose threads stride over the row several loads at a time. A part's result
  // goes to its slot in the scratch memory (codegen.hpp), and the last part of the row to
  // arrive, counted by an atomic, combines the row's slots in their order: the same result
  // whichever arrives last. It sets the count back to 0 for the next launch. (A warp a
  // row, as write_reduce gives, reads a vocabulary's logits on one SM.)
  void write_parted_reduce(const Node& root, Expr& threads) {
    const Edge& e = root.inputs[0];
    const auto axis = static_cast<size_t>(root.axis);
    const Expr len = e.view.shape()[axis];
    const Expr rows = product(root.shape);
    note_vars(len);
    note_vars(rows);
    threads = rows;
    const std::string t = compute_type(root.dtype);
    const std::string identity = runtime::reduction_identity(root.op, root.dtype);
    os_ << "  __shared__ " << t << " lum_part[" << kMaxBlock / 32 << "];\n"
        << "  __shared__ bool lum_last;\n"
        << "  const int64_t lum_parts = gridDim.x / (" << rows.to_c() << ");\n"
        << "  const int64_t lum_o = blockIdx.x / lum_parts, lum_q = blockIdx.x % lum_parts;\n"
        << "  " << t << "* lum_slots = (" << t << "*)lum_scratch + lum_o * lum_parts;\n"
        << "  unsigned* lum_count = (unsigned*)(lum_scratch + " << kPartSlots * 8 << ") + lum_o;\n"
        << "  " << t << " acc = " << identity << ";\n";
    std::vector<Expr> in_idx = split_counter("lum_o", root.shape, "  ");
    in_idx.insert(in_idx.begin() + static_cast<std::ptrdiff_t>(axis), counter("lum_r", len));
    os_ << "#pragma unroll 4\n"
        << "  for (int64_t lum_r = lum_q * blockDim.x + threadIdx.x; lum_r < " << len.to_c()
        << "; lum_r += lum_parts * blockDim.x) {\n";
    const std::string v = operand(e, in_idx, "    ");
    os_ << "    acc = " << reduction_step(root, "acc", v) << ";\n  }\n";
    os_ << block_combine(root, "lum_part", "(int)blockDim.x", "  ");
    os_ << "  if (threadIdx.x == 0) {\n"
        << "    lum_slots[lum_q] = acc;\n"
        << "    __threadfence();  // the slot is seen before the count\n"
        << "    lum_last = atomicAdd(lum_count, 1u) == (unsigned)(lum_parts - 1);\n"
        << "  }\n"
        << "  __syncthreads();\n"
        << "  if (!lum_last) return;\n"
        << "  acc = " << identity << ";\n"
        << "  for (int64_t lum_s = threadIdx.x; lum_s < lum_parts; lum_s += blockDim.x)\n"
        << "    acc = " << reduction_step(root, "acc", "((volatile " + t + "*)lum_slots)[lum_s]")
        << ";\n";
    os_ << block_combine(root, "lum_part", "(int)blockDim.x", "  ");
    os_ << "  if (threadIdx.x == 0) {\n"
        << "    out[lum_o] = " << store_expr(root.dtype, "acc") << ";\n"
        << "    *lum_count = 0;\n"
        << "  }\n";
  }

  // One warp per output element: lanes stride over the reduced axis, then combine
  // through shuffles. Every lane of a warp takes the same trips round the outer loop.
  // Rows of a few elements (a pooling window) take a thread each instead: a warp would
  // leave most of its lanes idle.
  static constexpr int64_t kShortRow = 16;

  void write_reduce(const Node& root, Expr& threads) {
    const Edge& e = root.inputs[0];
    const auto axis = static_cast<size_t>(root.axis);
    const Expr len = e.view.shape()[axis];
    note_vars(len);
    const Expr outputs = product(root.shape);
    const std::optional<int64_t> n = len.as_const();
    const bool by_thread = n && *n <= kShortRow;
    if (!by_thread && reduces_across_rows(e, axis)) {
      write_column_reduce(root, threads);
      return;
    }
    threads = by_thread ? outputs : outputs * 32;
    open_loop(outputs, by_thread ? "" : " >> 5");
    std::vector<Expr> in_idx = split_counter("lum_o", root.shape, "    ");
    in_idx.insert(in_idx.begin() + static_cast<std::ptrdiff_t>(axis), counter("lum_r", len));
    const std::string t = compute_type(root.dtype);
    os_ << "    " << t << " acc = " << runtime::reduction_identity(root.op, root.dtype) << ";\n";
    if (by_thread)
      os_ << "    for (int64_t lum_r = 0; lum_r < " << *n << "; ++lum_r) {\n";
    else
      os_ << "    for (int64_t lum_r = threadIdx.x & 31; lum_r < " << len.to_c()
          << "; lum_r += 32) {\n";
    const std::string v = operand(e, in_idx, "      ");
    os_ << "      acc = " << reduction_step(root, "acc", v) << ";\n    }\n";
    if (by_thread) {
      os_ << "    out[lum_o] = " << store_expr(root.dtype, "acc") << ";\n  }\n";
      return;
    }
    os_ << warp_combine(root, "    ");
    os_ << "    if ((threadIdx.x & 31) == 0) out[lum_o] = " << store_expr(root.dtype, "acc")
        << ";\n  }\n";
  }
};

// The rows of a reduction kernel: one output per row of `len` elements along `axis`.
struct Rows {
  std::vector<Expr> shape;  // the reduction's output shape: one element per row
  size_t axis = 0;
  Expr len;

  /// The shape of the rows' elements: `shape` with `len` along `axis`.
  std::vector<Expr> elements() const {
    std::vector<Expr> full = shape;
    full.insert(full.begin() + static_cast<std::ptrdiff_t>(axis), len);
    return full;
  }
};

std::optional<Rows> rows_of(const Graph& g, const compiler::Kernel& k) {
  const Node& n = g.node(k.root);
  if (n.op != Op::SumReduce && n.op != Op::MaxReduce) return std::nullopt;
  const auto axis = static_cast<size_t>(n.axis);
  return Rows{n.shape, axis, n.inputs[0].view.shape()[axis]};
}

// Whether kernel k can join a row group over `rows`: a reduction of the same rows, or an
// elementwise kernel whose elements are exactly those rows' elements (it closes the group).
enum class RowRole { None, Reduce, Map };
RowRole row_role(const Graph& g, const compiler::Kernel& k, const Rows& rows) {
  const Node& n = g.node(k.root);
  if (auto r = rows_of(g, k))
    return r->shape == rows.shape && r->axis == rows.axis && r->len == rows.len ? RowRole::Reduce
                                                                                : RowRole::None;
  if (n.op == Op::Custom || n.op == Op::Scatter) return RowRole::None;
  return n.shape == rows.elements() ? RowRole::Map : RowRole::None;
}

// Where a row group keeps the inputs its members read at their own row element. Where
// a thread takes a few unrolled steps of adjacent elements along a contiguous row, in
// registers: each thread loads its own pieces once a row (lum_rc<node>[step]), as
// stored, with no shared memory and no barrier. Otherwise, where the row's length is
// known and the inputs fit, in shared memory (lum_c<node>[lum_r]), copied in before
// the members. A row-invariant input read at the row element (a norm's weight and
// bias) is loaded in pieces once a block, before its first row (lum_wv<node>[step]),
// where the registers allow (else RowInRegisters: read from memory where used).
enum class RowCache { Registers, RowInRegisters, Shared, None };
// Rows a row group spreads over a cluster of blocks each (codegen.hpp): a grid of a
// cluster a row stays within one wave, and each thread of a row's cluster takes eight
// elements or more.
bool few_long_rows(const Rows& rows) {
  const std::optional<int64_t> len = rows.len.as_const();
  const std::optional<int64_t> count = product(rows.shape).as_const();
  return len && count && *count <= kFewRows && *len >= kLongRow;
}
// Whether reduction kernel `k` over `rows` deals each out to many blocks (codegen.hpp).
// A length known only at run time may be short: the launch then gives a row one block, a
// few microseconds slower than a warp at worst. Rows stored as columns (reduces_across_rows)
// only where at most kFewRows: each part's warp reads one element a row's stride apart,
// and more rows than that would waste most of each sector (across rows, more outputs keep
// more blocks of write_column_reduce busy).
bool parted_rows(const Graph& g, const compiler::Kernel& k, const Rows& rows) {
  const std::optional<int64_t> len = rows.len.as_const();
  const std::optional<int64_t> count = product(rows.shape).as_const();
  const int64_t most =
      reduces_across_rows(g.node(k.root).inputs[0], rows.axis) ? kFewRows : kPartedRows;
  return count && *count <= most && (!len || *len >= kLongRow);
}
// At most kRegisterSteps pieces of a row a thread, and kMaxRegisterBytes of them in all
// (64 registers a thread).
constexpr int64_t kRegisterSteps = 8, kMaxRegisterBytes = 256;
// A launch may ask for 48 KiB of shared memory in all without opting in; the group's
// reduction scratch (lum_part_*, 640 bytes) takes its share of that.
constexpr int64_t kMaxRowCacheBytes = (48 << 10) - 1024;

// An input the group's members read at their own row element, held in shared memory.
struct CachedRead {
  std::string buffer;  // the parameter it is loaded from
  DType dtype;
};

// The C type of a piece of n adjacent elements of a value stored as `dtype`.
std::string piece_type(DType dtype, int n) {
  return "lum_vec<" + runtime::storage_type(dtype) + ", " + std::to_string(n) + ">";
}

// One member of a row group (see write_row_group), written for the row `lum_row`. A
// reduction combines over the block and leaves its value, rounded as stored, in
// lum_held_<member> for the members after it; reads of an earlier member's output use
// that variable, which is only right at the same row: a read elsewhere marks the group
// as not row-local.
class RowMemberWriter : public runtime::ElementWriter {
 public:
  RowMemberWriter(const Graph& g, const compiler::KernelPlan& plan, const compiler::Kernel& k,
                  size_t member, const Rows& rows, bool cache, int steps, int adjacent,
                  std::optional<int64_t> block, bool spread,
                  const std::map<uint32_t, std::string>& held,
                  std::map<uint32_t, CachedRead>& cached, std::map<uint32_t, CachedRead>* invariant)
      : ElementWriter(g, plan, k),
        member_(member),
        rows_(rows),
        cache_(cache),
        steps_(steps),
        adjacent_(adjacent),
        block_(block),
        spread_(spread),
        held_(held),
        cached_(cached),
        invariant_(invariant) {
    read_prefix_ = prefix() + "in";
    loose_f32_ = stores_half(g, k);
  }

  std::string write() {
    const Node& root = g_.node(k_.root);
    os_ << "    {\n      int64_t* err = lum_err + " << 3 * member_ << "; (void)err;\n";
    std::vector<Expr> idx = open_row("      ");
    if (root.op == Op::SumReduce || root.op == Op::MaxReduce) {
      const std::string t = compute_type(root.dtype);
      const std::string part = t == "float"    ? "lum_part_f"
                               : t == "double" ? "lum_part_d"
                                               : "lum_part_i";
      os_ << "      const int64_t lum_o = lum_row;\n";
      os_ << "      " << t << " acc = " << runtime::reduction_identity(root.op, root.dtype)
          << ";\n";
      element_loop([&] {
        const std::string v = operand(root.inputs[0], idx, "          ");
        os_ << "          acc = " << reduction_step(root, "acc", v) << ";\n";
      });
      os_ << block_combine(root, part, block(), "      ");
      if (spread_) {  // the blocks' results, met through each block's one slot
        const std::string slot = "lum_cpart_" + part.substr(part.size() - 1);
        os_ << "      if (threadIdx.x == 0) " << slot << " = acc;\n"
            << "      lum_cluster_sync();\n"
            << "      acc = lum_cluster_read(&" << slot << ", 0);\n"
            << "      for (int lum_q = 1; lum_q < LUM_ROW_SPREAD; ++lum_q)\n"
            << "        acc = "
            << reduction_step(root, "acc", "lum_cluster_read(&" + slot + ", lum_q)") << ";\n"
            << "      lum_cluster_sync();  // the slots are rewritten by the next reduction\n";
      }
      const std::string stored = store_expr(root.dtype, "acc");
      os_ << "      " << held_name(member_) << " = " << runtime::load_expr(root.dtype, stored)
          << ";\n";
      os_ << "      if (threadIdx.x == 0" << (spread_ ? " && lum_crank == 0" : "") << ") "
          << prefix() << "out[lum_row] = " << stored << ";\n";
    } else {
      const Expr o = within(runtime::flatten(idx, root.shape));
      note_vars(o);
      // Adjacent elements of a row the output stores whole: one vector store for them.
      const bool whole = adjacent_ > 1 && o == row_element_;
      element_loop(
          [&] {
            os_ << "          const int64_t lum_o = " << o.to_c() << ";\n";
            const std::string v = value(k_.root, idx, "          ");
            if (whole)
              os_ << "          lum_ov.v[lum_u] = " << store_expr(root.dtype, v) << ";\n";
            else
              os_ << "          " << prefix() << "out[lum_o] = " << store_expr(root.dtype, v)
                  << ";\n";
          },
          whole ? std::optional<std::string>(output_type()) : std::nullopt);
    }
    os_ << "    }\n";
    return os_.str();
  }

  // Loads the cached inputs into shared memory, as stored, before the members. A row
  // that is contiguous (the reduced axis innermost) and a whole number of 16-byte pieces
  // is copied in those pieces where its buffer is aligned to them (every row then is):
  // a bf16 row element by element costs eight loads and stores per piece. The pieces a
  // thread copies are not the elements it reads later, and the last row's readers must
  // be done: barriers on both sides of that copy.
  std::string write_cache_loads() {
    os_ << "    {\n";
    open_row("      ");
    const std::optional<int64_t> len = rows_.len.as_const();
    const bool contiguous = rows_.axis == rows_.shape.size() && len;
    for (const auto& [node, c] : cached_) {
      const int64_t bytes = len ? *len * static_cast<int64_t>(dtype_size(c.dtype)) : 0;
      const std::string element = "lum_c" + std::to_string(node) + "[lum_r] = " + c.buffer + "[" +
                                  row_element_.to_c() + "];\n";
      if (!contiguous || bytes % 16 != 0) {
        os_ << loop_head("      ") << "          " << element << loop_tail("      ");
        continue;
      }
      const Expr start = within(row_element_.substitute("lum_r", Expr(0)));
      os_ << "      if ((reinterpret_cast<uint64_t>(" << c.buffer << ") & 15) == 0) {\n"
          << "        __syncthreads();\n"
          << "        const uint4* lum_src = reinterpret_cast<const uint4*>(" << c.buffer << " + "
          << start.to_c() << ");\n"
          << "        uint4* lum_dst = reinterpret_cast<uint4*>(lum_c" << node << ");\n"
          << strided_loop("        ", "int", "lum_p", 1, Expr(bytes / 16))
          << "          lum_dst[lum_p] = lum_src[lum_p];\n        }\n"
          << "        __syncthreads();\n"
          << "      } else {\n"
          << loop_head("        ") << "            " << element << loop_tail("        ")
          << "      }\n";
    }
    os_ << "    }\n";
    return os_.str();
  }

  // Loads this thread's pieces of the row of each cached input into registers
  // (lum_rc<node>, declared before).
  std::string write_register_loads() {
    os_ << "    {\n";
    open_row("      ");
    const Expr start = within(row_element_.substitute("lum_r", Expr(0)));
    for (const auto& [node, c] : cached_)
      fill_registers("lum_rc" + std::to_string(node), c, start, "      ");
    os_ << "    }\n";
    return os_.str();
  }

  // Declares and loads this thread's pieces of each row-invariant input, before the rows.
  std::string write_invariant_loads() {
    for (const auto& [node, c] : *invariant_) {
      const std::string name = "lum_wv" + std::to_string(node);
      os_ << "  " << piece_type(c.dtype, adjacent_) << " " << name << "[" << steps_ << "];\n";
      fill_registers(name, c, Expr(0), "  ");
    }
    return os_.str();
  }

  std::string parameters() const {
    std::string p = output_type() + "* __restrict__ " + prefix() + "out";
    for (size_t i = 0; i < k_.reads.size(); ++i)
      p += ", const " + input_type(i) + "* __restrict__ " + read_prefix_ + std::to_string(i + 1);
    return p;
  }

  bool reads_other_rows() const { return stray_; }

  static std::string held_name(size_t member) { return "lum_held_" + std::to_string(member); }

 protected:
  std::optional<std::string> held(NodeId n, const Expr& flat) override {
    if (const auto it = held_.find(n.value); it != held_.end()) {
      if (!(within(flat - row_flat_) == Expr(0)) && !(within(flat - row_nested_) == Expr(0)))
        stray_ = true;
      return it->second;
    }
    // An input read at this thread's own element of the row, whole (so every row
    // element is in bounds, even where this read is guarded): from the registers or the
    // shared-memory copy; one read at the row element alone, [len] (the same for every
    // row), from the registers loaded before the rows.
    const Node& node = g_.node(n);
    if (!cache_ || node.quant != kPlainStorage) return std::nullopt;
    const std::string id = std::to_string(n.value);
    if (invariant_ && steps_ > 0 && within(flat - lum_r_) == Expr(0) &&
        product(node.shape) == rows_.len) {
      invariant_->try_emplace(n.value, CachedRead{read_buffer(n), node.dtype});
      return runtime::load_expr(node.dtype, "lum_wv" + id + "[lum_k].v[lum_u]");
    }
    if (!(within(flat - row_element_) == Expr(0)) ||
        !(product(node.shape) == product(rows_.elements())))
      return std::nullopt;
    cached_.try_emplace(n.value, CachedRead{read_buffer(n), node.dtype});
    if (steps_ > 0) return runtime::load_expr(node.dtype, "lum_rc" + id + "[lum_k].v[lum_u]");
    if (adjacent_ > 1) {
      read_adjacent_.insert(n.value);
      return runtime::load_expr(node.dtype, "lum_cv" + std::to_string(n.value) + ".v[lum_u]");
    }
    return runtime::load_expr(node.dtype, "lum_c" + std::to_string(n.value) + "[lum_r]");
  }

 private:
  std::string prefix() const { return "m" + std::to_string(member_) + "_"; }

  // The row's counters, then the element index with lum_r along the axis.
  std::vector<Expr> open_row(const std::string& indent) {
    note_vars(product(rows_.shape));
    note_vars(rows_.len);
    std::vector<Expr> idx = split_counter("lum_row", rows_.shape, indent);
    // Also as a sum of each counter times its row-major stride, the form a view's index
    // takes: the simplifier does not distribute flatten's nested products, and a 3-d row
    // shape's two forms did not compare equal (Qwen3's query norm, [kv heads, group, seq]).
    row_nested_ = within(runtime::flatten(idx, rows_.shape));
    Expr stride = 1;
    row_flat_ = 0;
    for (size_t d = rows_.shape.size(); d-- > 0;) {
      row_flat_ = row_flat_ + idx[d] * stride;
      stride = stride * rows_.shape[d];
    }
    row_flat_ = within(row_flat_);
    lum_r_ = counter("lum_r", rows_.len);
    idx.insert(idx.begin() + static_cast<std::ptrdiff_t>(rows_.axis), lum_r_);
    row_element_ = within(runtime::flatten(idx, rows_.elements()));
    note_vars(row_element_);
    return idx;
  }

  // The loop over this thread's elements of the row around the statements `write` puts
  // in os_, with those that do not vary along the row hoisted before it. With
  // adjacent_ > 1 a thread takes that many adjacent elements a step (lum_u counts them):
  // each cached read is one vector load from shared memory (lum_cv<node>), and where
  // `stored` names the output's type the body fills the vector lum_ov, stored whole.
  template <class Write>
  void element_loop(Write write, const std::optional<std::string>& stored = std::nullopt) {
    const std::string before = os_.str();
    os_.str("");
    hoist_invariants("      ", {"lum_r", "lum_o", "lum_u", "lum_r0"});
    write();
    const std::string body = os_.str();
    os_.str("");
    os_ << before << take_hoisted();
    if (adjacent_ == 1) {
      os_ << loop_head("      ") << body << loop_tail("      ");
      return;
    }
    const std::string n = std::to_string(adjacent_);
    os_ << strided_loop("      ", "int", "lum_r0", adjacent_, rows_.len);
    for (uint32_t c : read_adjacent_)
      os_ << "        const auto lum_cv" << c << " = lum_load_vec<" << n << ">(lum_c" << c
          << " + lum_r0);\n";
    const std::string vec = stored ? "lum_vec<" + *stored + ", " + n + ">" : "";
    if (stored) os_ << "        " << vec << " lum_ov;\n";
    os_ << "#pragma unroll\n        for (int lum_u = 0; lum_u < " << n << "; ++lum_u) {\n"
        << "          const int lum_r = lum_r0 + lum_u;\n"
        << body << "        }\n";
    if (stored) {
      const Expr start = within(row_element_.substitute("lum_r", Expr(0)));
      os_ << "        lum_store_vec(" << prefix() << "out + " << start.to_c()
          << " + lum_r0, lum_ov);\n";
    }
    os_ << "      }\n";
    read_adjacent_.clear();
  }

  // Statements filling `array` (a piece of adjacent_ elements a step) with this thread's
  // pieces of c's buffer from element `start` on: whole vectors where the buffer is
  // aligned to them (then every piece is: rows are whole pieces long), else element by
  // element.
  void fill_registers(const std::string& array, const CachedRead& c, const Expr& start,
                      const std::string& indent) {
    const std::string n = std::to_string(adjacent_);
    const std::string from = "(" + c.buffer + " + " + start.to_c() + ")", in = indent + "  ";
    os_ << indent << "if (lum_aligned<" << n << ">(" << c.buffer << ")) {\n"
        << strided_loop(in, "int", "lum_r0", adjacent_, rows_.len) << in << "  " << array
        << "[lum_k] = lum_load_vec<" << n << ">(" << from << " + lum_r0);\n"
        << in << "}\n"
        << indent << "} else {\n"
        << strided_loop(in, "int", "lum_r0", adjacent_, rows_.len) << in << "#pragma unroll\n"
        << in << "  for (int lum_u = 0; lum_u < " << n << "; ++lum_u)\n"
        << in << "    " << array << "[lum_k].v[lum_u] = " << from << "[lum_r0 + lum_u];\n"
        << in << "}\n"
        << indent << "}\n";
  }

  // for each of this thread's elements lum_r of the row (a 32-bit counter where a known
  // length allows: fewer instructions a step)
  std::string loop_head(const std::string& indent) const {
    const std::optional<int64_t> len = rows_.len.as_const();
    const char* type = len && *len < (int64_t{1} << 31) ? "int" : "int64_t";
    return strided_loop(indent, type, "lum_r", 1, rows_.len) + indent + "  {\n";
  }
  static std::string loop_tail(const std::string& indent) {
    return indent + "  }\n" + indent + "}\n";
  }

  // Threads a block: a constant where the launch's is known (the row's length is), which
  // lets the compiler unroll a thread's few steps along the row and have all their loads
  // in flight at once instead of one round trip to memory a step (a decoding step's
  // RMSNorm of one 2048-wide row went from 4.8 us to 3.2).
  std::string block() const { return block_ ? std::to_string(*block_) : "(int)blockDim.x"; }
  // The head of a thread's loop along the row, through the opening brace: `var` (of
  // `type`) from threadIdx.x * `per` by block * `per` while below `end`. With the block and
  // `end` known and a few steps to a thread, their number is a constant and the loop
  // unrolled (the bound checked where the steps do not come out even).
  // Spread over a cluster, the cluster's threads take the row as one block would, this
  // block's after those of the blocks of lower rank.
  std::string strided_loop(const std::string& indent, const std::string& type,
                           const std::string& var, int64_t per, const Expr& end) const {
    const std::string thread =
        spread_ ? "(threadIdx.x + lum_crank * " + block() + ")" : "threadIdx.x";
    const std::string first = per == 1 ? thread : thread + " * " + std::to_string(per);
    const std::optional<int64_t> n = end.as_const();
    if (block_ && n && !spread_) {
      const int64_t stride = *block_ * per, steps = (*n + stride - 1) / stride;
      if (steps <= kUnrolledSteps) {
        std::string s = indent + "#pragma unroll\n" + indent + "for (int lum_k = 0; lum_k < " +
                        std::to_string(steps) + "; ++lum_k) {\n" + indent + "  const " + type +
                        " " + var + " = " + first + " + lum_k * " + std::to_string(stride) + ";\n";
        if (*n % stride != 0)
          s += indent + "  if (" + var + " >= " + std::to_string(*n) + ") break;\n";
        return s;
      }
    }
    return indent + "for (" + type + " " + var + " = " + first + "; " + var + " < " + end.to_c() +
           "; " + var + " += " + block() + (spread_ ? " * LUM_ROW_SPREAD" : "") +
           (per == 1 ? "" : " * " + std::to_string(per)) + ") {\n";
  }
  static constexpr int64_t kUnrolledSteps = 16;

  size_t member_;
  const Rows& rows_;
  bool cache_;
  int steps_;                         // the row's pieces a thread holds in registers, or 0
  int adjacent_;                      // elements a thread takes a step (element_loop)
  std::optional<int64_t> block_;
  bool spread_;                       // the row over a cluster of blocks (write_row_group)
  std::set<uint32_t> read_adjacent_;  // cached reads of the loop being written
  const std::map<uint32_t, std::string>& held_;
  std::map<uint32_t, CachedRead>& cached_;
  std::map<uint32_t, CachedRead>* invariant_;  // row-invariant reads held, or none held
  Expr row_flat_, row_nested_, row_element_, lum_r_;
  bool stray_ = false;
};

struct RowGroup {
  std::string params, body;
  std::set<std::string> vars;
  int64_t shared_bytes = 0;  // the row cache
  int adjacent = 1;          // row elements a thread takes a step
  bool spread = false;       // each row over a cluster of blocks
};

// Kernels first..last (a chain of reductions over the same rows, perhaps closed by an
// elementwise kernel over their elements: softmax, RMSNorm, LayerNorm) as one function
// in which a block takes one row through every member in turn: the reductions' results
// pass through registers, and the row's inputs through registers or shared memory
// (RowCache) where the row's length is known and they fit; otherwise the members after
// the first read the row from cache. Nothing when a member reads an earlier one's result
// at another row.
std::optional<RowGroup> write_row_group(const Graph& g, const compiler::KernelPlan& plan,
                                        size_t first, size_t last, const Rows& rows,
                                        RowCache cache = RowCache::Registers) {
  RowGroup out;
  const std::optional<int64_t> len = rows.len.as_const();
  if (!len || *len <= 0) cache = RowCache::None;
  // Few rows, each longer than one block reads quickly (one block of one SM pulls a
  // few tens of GB/s: a greedy decode's argmax over 128256 logits took 37.5 us): each
  // row over a cluster of blocks, which read it straight from memory (no row cache).
  out.spread = few_long_rows(rows);
  if (out.spread) cache = RowCache::None;
  // With the row cached, contiguous and a whole number of 16-byte pieces of the widest
  // value the members read or write element by element (not the reductions' results, one
  // a row), a thread takes one such piece of adjacent elements a step: a quarter to an
  // eighth of the loads, and vector stores.
  out.adjacent = 1;
  if (cache != RowCache::None && rows.axis == rows.shape.size()) {
    std::set<uint32_t> reduced;
    for (size_t k = first; k <= last; ++k)
      if (rows_of(g, plan.kernels[k])) reduced.insert(plan.kernels[k].root.value);
    size_t widest = 1;
    for (size_t k = first; k <= last; ++k) {
      const compiler::Kernel& kn = plan.kernels[k];
      if (!reduced.count(kn.root.value))
        widest = std::max(widest, dtype_size(g.node(kn.root).dtype));
      for (NodeId r : kn.reads)
        if (!reduced.count(r.value)) widest = std::max(widest, dtype_size(g.node(r).dtype));
    }
    const int n = static_cast<int>(16 / std::min<size_t>(widest, 16));
    if (*len % n == 0) out.adjacent = n;
  }
  std::optional<int64_t> block;
  if (len) block = row_block(*len / out.adjacent);
  int steps = 0;
  const bool registers = cache == RowCache::Registers || cache == RowCache::RowInRegisters;
  if (registers && out.adjacent > 1) {
    const int64_t stride = *block * out.adjacent, s = (*len + stride - 1) / stride;
    if (s <= kRegisterSteps) steps = static_cast<int>(s);
  }
  std::map<uint32_t, std::string> held;
  std::map<uint32_t, CachedRead> cached, invariant;
  std::string members, declared;
  for (size_t k = first; k <= last; ++k) {
    const compiler::Kernel& kn = plan.kernels[k];
    RowMemberWriter w(g, plan, kn, k - first, rows, cache != RowCache::None, steps, out.adjacent,
                      block, out.spread, held, cached,
                      cache == RowCache::Registers ? &invariant : nullptr);
    members += w.write();
    if (w.reads_other_rows()) return std::nullopt;
    out.params += w.parameters() + ", ";
    out.vars.insert(w.vars().begin(), w.vars().end());
    const Node& root = g.node(kn.root);
    if (root.op == Op::SumReduce || root.op == Op::MaxReduce) {
      held[kn.root.value] = RowMemberWriter::held_name(k - first);
      declared += "    " + compute_type(root.dtype) + " " + held[kn.root.value] + ";\n";
    }
  }
  // (Each writer below emits one part of the loads into a stream of its own.)
  auto loads = [&] {
    return RowMemberWriter(g, plan, plan.kernels[first], 0, rows, true, steps, out.adjacent, block,
                           out.spread, held, cached, &invariant);
  };
  std::string before_rows;
  if (steps > 0) {
    int64_t bytes = 0;
    for (const auto* reads : {&cached, &invariant})
      for (const auto& [node, c] : *reads)
        bytes += steps * out.adjacent * static_cast<int64_t>(dtype_size(c.dtype));
    if (bytes > kMaxRegisterBytes)
      return write_row_group(g, plan, first, last, rows,
                             invariant.empty() ? RowCache::Shared : RowCache::RowInRegisters);
    for (const auto& [node, c] : cached)
      declared += "    " + piece_type(c.dtype, out.adjacent) + " lum_rc" + std::to_string(node) +
                  "[" + std::to_string(steps) + "];\n";
    if (!cached.empty()) declared += loads().write_register_loads();
    before_rows = loads().write_invariant_loads();
  } else if (!cached.empty()) {
    for (const auto& [node, c] : cached) {
      declared += "    " + runtime::storage_type(c.dtype) + "* lum_c" + std::to_string(node) +
                  " = (" + runtime::storage_type(c.dtype) + "*)(lum_row_cache + " +
                  std::to_string(out.shared_bytes) + ");\n";
      out.shared_bytes += (*len * static_cast<int64_t>(dtype_size(c.dtype)) + 15) / 16 * 16;
    }
    if (out.shared_bytes > kMaxRowCacheBytes)
      return write_row_group(g, plan, first, last, rows, RowCache::None);
    declared += loads().write_cache_loads();
  }
  out.params += "int64_t* lum_err, const LumDims* __restrict__ lum_dims";
  out.body =
      "  extern __shared__ __align__(16) unsigned char lum_row_cache[];\n"
      "  __shared__ float lum_part_f[32];\n  __shared__ double lum_part_d[32];\n"
      "  __shared__ int64_t lum_part_i[32];\n"
      "  (void)lum_part_f; (void)lum_part_d; (void)lum_part_i;\n" +
      std::string(out.spread ? "  __shared__ float lum_cpart_f;\n  __shared__ double lum_cpart_d;\n"
                               "  __shared__ int64_t lum_cpart_i;\n"
                               "  (void)lum_cpart_f; (void)lum_cpart_d; (void)lum_cpart_i;\n"
                               "  const int lum_crank = blockIdx.x % LUM_ROW_SPREAD;\n"
                             : "") +
      before_rows + "  const int64_t lum_rows = " + product(rows.shape).to_c() + ";\n" +
      std::string(out.spread
                      ? "  for (int64_t lum_row = blockIdx.x / LUM_ROW_SPREAD; lum_row < lum_rows; "
                        "lum_row += gridDim.x / LUM_ROW_SPREAD) {\n"
                      : "  for (int64_t lum_row = blockIdx.x; lum_row < lum_rows; lum_row += "
                        "gridDim.x) {\n") +
      declared + members + "  }\n";
  return out;
}

// The elementwise kernels first.. (up to kMapGroupMembers) that one function can run: each
// reads no value of those before it. Their number.
size_t map_group_size(const Graph& g, const compiler::KernelPlan& plan, size_t first) {
  std::set<uint32_t> roots;
  size_t last = first;
  for (; last < plan.kernels.size() && last - first < kMapGroupMembers; ++last) {
    const compiler::Kernel& kn = plan.kernels[last];
    if (!elementwise(g, kn)) break;
    const bool reads_member = std::any_of(kn.reads.begin(), kn.reads.end(), [&](NodeId r) {
      return roots.count(plan.canon(r).value) > 0;
    });
    if (reads_member) break;
    roots.insert(plan.canon(kn.root).value);
  }
  return last - first;
}

struct MapGroup {
  std::string params, body;
  std::set<std::string> vars;
  std::vector<Expr> member_threads;
};

// Elementwise kernels first..last (map_group_size) as one function: blocks are dealt out
// to the members in order (KernelLaunch::member_threads says how many each), and each
// member's blocks run its own grid-stride loop, with blockIdx.x and gridDim.x counted
// within its share.
MapGroup write_map_group(const Graph& g, const compiler::KernelPlan& plan, size_t first,
                         size_t last) {
  MapGroup out;
  out.body = "  int64_t lum_bx = blockIdx.x;\n";
  int64_t shared_left = kMaxSharedValues;  // the members' arrays all take the function's
  for (size_t k = first; k <= last; ++k) {
    KernelWriter w(g, plan, plan.kernels[k]);
    w.limit_shared_values(shared_left);
    Expr threads;
    std::string body = w.write(threads);
    shared_left -= w.shared_values_held();
    for (const auto& [from, to] :
         {std::pair<std::string, std::string>{"blockIdx.x", "lum_bx"}, {"gridDim.x", "lum_gx"}})
      for (size_t at = body.find(from); at != std::string::npos; at = body.find(from, at))
        body.replace(at, from.size(), to);
    const std::string prefix = "m" + std::to_string(k - first) + "_";
    out.params += w.member_parameters(prefix) + ", ";
    out.vars.insert(w.vars().begin(), w.vars().end());
    out.member_threads.push_back(threads);
    const std::string cap = std::to_string(kMapGroupMemberBlocks);
    out.body += "  {\n    int64_t lum_gx = (" + threads.to_c() +
                " + blockDim.x - 1) / blockDim.x;\n"
                "    lum_gx = lum_gx < 1 ? 1 : lum_gx > " +
                cap + " ? " + cap +
                " : lum_gx;\n"
                "    if (lum_bx < lum_gx) {\n" +
                w.member_aliases(prefix, k - first) + body + "      return;\n    }\n" +
                "    lum_bx -= lum_gx;\n  }\n";
  }
  out.params += "int64_t* lum_err, const LumDims* __restrict__ lum_dims";
  return out;
}

}  // namespace

bool elementwise(const Graph& g, const compiler::Kernel& k) {
  const Op op = g.node(k.root).op;
  return op != Op::Custom && op != Op::Scatter && op != Op::SumReduce && op != Op::MaxReduce;
}

CudaSource generate_cuda_source(const Graph& g, const compiler::KernelPlan& plan, bool map_groups,
                                size_t max_parts) {
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
    if (const std::optional<Rows> rows = rows_of(g, kn)) {
      // The longest chain of kernels after k that a block can take row by row with it.
      std::optional<RowGroup> group;
      size_t last = k;
      for (size_t j = k + 1; j < plan.kernels.size(); ++j) {
        const RowRole role = row_role(g, plan.kernels[j], *rows);
        if (role == RowRole::None) break;
        std::optional<RowGroup> longer = write_row_group(g, plan, k, j, *rows);
        if (!longer) break;
        group = std::move(longer);
        last = j;
        if (role == RowRole::Map) break;
      }
      if (group) {
        for (size_t j = k; j < last; ++j)
          out.launches[j].shape = KernelShape::InGroup, out.launches[j].launched_at = last;
        KernelLaunch& l = out.launches[last];
        l.shape = KernelShape::Rows;
        l.group_begin = k;
        l.threads = product(rows->shape);
        l.row_threads = rows->len / Expr(group->adjacent);
        l.shared_bytes = group->shared_bytes;
        l.spread = group->spread;
        bodies[last].params = std::move(group->params);
        bodies[last].main = std::move(group->body);
        vars.insert(group->vars.begin(), group->vars.end());
        k = last;
        continue;
      }
    }
    if (const size_t n = map_groups && elementwise(g, kn) ? map_group_size(g, plan, k) : 0; n > 1) {
      const size_t last = k + n - 1;
      MapGroup group = write_map_group(g, plan, k, last);
      for (size_t j = k; j < last; ++j)
        out.launches[j].shape = KernelShape::InGroup, out.launches[j].launched_at = last;
      KernelLaunch& l = out.launches[last];
      l.shape = KernelShape::Maps;
      l.group_begin = k;
      l.member_threads = std::move(group.member_threads);
      bodies[last].params = std::move(group.params);
      bodies[last].main = std::move(group.body);
      vars.insert(group.vars.begin(), group.vars.end());
      k = last;
      continue;
    }
    launch.shape = root.op == Op::Scatter                                 ? KernelShape::Scatter
                   : root.op == Op::SumReduce || root.op == Op::MaxReduce ? KernelShape::Reduce
                                                                          : KernelShape::Map;
    // A fresh writer per function: each declares its own temporaries.
    KernelWriter w(g, plan, kn);
    if (const std::optional<Rows> rows = rows_of(g, kn); rows && parted_rows(g, kn, *rows)) {
      w.part_rows();
      launch.parted = true;
      launch.row_length = rows->len;
    }
    bodies[k].main = "  (void)err;\n" + w.write(launch.threads);
    vars.insert(w.vars().begin(), w.vars().end());
    if (launch.shape == KernelShape::Scatter) {
      KernelWriter s(g, plan, kn);
      bodies[k].scatter = "  (void)err;\n" + s.write_scatter();
      vars.insert(s.vars().begin(), s.vars().end());
    }
    bodies[k].params = w.parameters();
  }
  out.dims.assign(vars.begin(), vars.end());
  std::ostringstream header;
  header << cuda_prelude() << runtime::scalar_prelude() << device_expr_prelude() << "\n"
         << "struct LumDims { int64_t v[" << std::max<size_t>(out.dims.size(), 1) << "]; };\n\n";
  std::string dims_decl;
  for (size_t i = 0; i < out.dims.size(); ++i)
    dims_decl += "  const int64_t " + out.dims[i] + " = lum_dims->v[" + std::to_string(i) +
                 "]; (void)" + out.dims[i] + ";\n";
  // A transformer's layers make the same kernels over and over, on other buffers: each
  // distinct function is compiled once and launched for all of them.
  // Each slot is a kernel's function and any Scatter pass of it, which go to one part.
  std::map<std::string, std::pair<std::string, size_t>> function_of;  // text after the name ->
                                                                      // its name and slot
  std::vector<std::string> functions;                                 // by slot
  std::vector<size_t> slot_of(plan.kernels.size(), 0), scatter_slot_of(plan.kernels.size(), 0);
  // (`cluster`: the function's cluster shape, for rows spread over clusters.)
  auto emit = [&](const std::string& name, const std::string& params, const std::string& body,
                  size_t slot, bool cluster = false) {
    const std::string rest =
        "(" + params + ") {\n  lum_after_prior_grids();\n" + dims_decl + body + "}\n\n";
    const auto [it, fresh] = function_of.emplace(rest, std::pair{name, slot});
    if (fresh) {
      if (slot == functions.size()) functions.emplace_back();
      functions[slot] += "extern \"C\" __global__ void __launch_bounds__(" +
                         std::to_string(kMaxBlock) + ") " + (cluster ? "LUM_ROW_CLUSTER " : "") +
                         name + rest;
    }
    return it->second;
  };
  for (size_t k = 0; k < plan.kernels.size(); ++k) {
    if (bodies[k].main.empty()) continue;
    const std::string name = "lum_kernel_" + std::to_string(k);
    const auto [function, slot] =
        emit(name, bodies[k].params, bodies[k].main, functions.size(), out.launches[k].spread);
    out.launches[k].function = function;
    slot_of[k] = slot;
    if (!bodies[k].scatter.empty())
      std::tie(out.launches[k].scatter_function, scatter_slot_of[k]) =
          emit(name + "_scatter", bodies[k].params, bodies[k].scatter, slot);
  }
  const size_t parts =
      std::clamp<size_t>(functions.size() / kFunctionsAPart, 1, std::max<size_t>(max_parts, 1));
  out.code = header.str();
  out.parts.assign(parts, header.str());
  for (size_t f = 0; f < functions.size(); ++f) {
    out.code += functions[f];
    out.parts[f % parts] += functions[f];
  }
  for (size_t k = 0; k < plan.kernels.size(); ++k) {
    out.launches[k].part = slot_of[k] % parts;
    out.launches[k].scatter_part = scatter_slot_of[k] % parts;
  }
  return out;
}

}  // namespace luminal::cudagen

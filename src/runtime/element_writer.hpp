// What every code-generating backend shares: rendering a planned kernel's value at one
// output element as C statements. Fused producers are evaluated inline at the index
// their consumer's view maps to (so permutes, broadcasts, slices and padding cost only
// index math), materialised ones are loaded from their buffers, and each value is
// rounded or wrapped as the reference interpreter stores it. A backend derives from
// ElementWriter and writes the loops around it (OpenMP loops on the CPU, grid-stride
// threads on CUDA); the helpers the statements call (lum_h2f, lum_wrap_add, ...) come
// from scalar_prelude() plus the few each backend defines for itself.
#pragma once

#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "luminal/compiler/plan.hpp"
#include "luminal/expr.hpp"

namespace luminal::runtime {

/// The C type a value of dtype `t` is computed in: float, double or int64_t.
std::string compute_type(DType t);
/// The C type one element of dtype `t` is stored as.
std::string storage_type(DType t);
/// A stored element converted to its compute type.
std::string load_expr(DType t, const std::string& element);
/// A compute value converted to its storage type (integers wrap, as the reference does).
std::string store_expr(DType t, const std::string& v);
/// A literal of dtype `t` (NaN and infinities through the prelude's lum_u2f / lum_u2d).
std::string literal(double v, DType t);
/// The value a SumReduce or MaxReduce of dtype `t` starts from: 0, or the lowest value
/// (-inf for floats).
std::string reduction_identity(Op op, DType t);
/// Reduction `r`'s partial `acc` combined with `v`, as C (NaN wins a max, as in PyTorch).
std::string reduction_step(const Node& r, const std::string& acc, const std::string& v);
/// Row-major flat index of a multi-index in `shape`.
Expr flatten(const std::vector<Expr>& idx, const std::vector<Expr>& shape);
/// The last dim of `shape` not of size 1 (adjacent flat indices step along it), or none.
std::optional<size_t> innermost_dim(const std::vector<Expr>& shape);

/// Scalar helpers both backends' kernels call, written in the C subset that g++ and
/// NVRTC share. It expects each backend to have defined, before it: LUM_FN (how a helper
/// is declared), lum_f2u / lum_u2f / lum_u2d (bit casts), lum_fail (record an error) and
/// the integer types int64_t, uint32_t, uint16_t, uint8_t, int8_t, int32_t, uint64_t.
/// A backend that defines LUM_NATIVE_HALF brings its own lum_h2f and lum_f2h, one that
/// defines LUM_NATIVE_BF16 its own lum_bf2f and lum_f2bf (round to nearest even; any NaN
/// stays a NaN).
std::string_view scalar_prelude();

class ElementWriter {
 public:
  ElementWriter(const Graph& g, const compiler::KernelPlan& plan, const compiler::Kernel& k);
  virtual ~ElementWriter() = default;

  /// Symbolic dims the kernel's code mentions (its dims parameters).
  const std::set<std::string>& vars() const { return vars_; }

 protected:
  /// A loop counter named `name` over [0, size), with its range recorded.
  Expr counter(const std::string& name, Expr size);
  /// Splits the flat counter `flat` (a C variable) into one counter per dim of `shape`,
  /// declared where it is called; dims of size 1 get index 0. The counters carry their
  /// ranges, so index math over them simplifies without divisions. `step`, where given,
  /// is added to the innermost counter: the caller knows `flat` + `step` stays within that
  /// dim (`flat` a multiple of a number that divides the dim, `step` below it).
  std::vector<Expr> split_counter(const std::string& flat, const std::vector<Expr>& shape,
                                  const std::string& indent, const std::string& step = "");
  /// `e` simplified over the ranges of the loop counters in scope.
  Expr within(Expr e) const { return simplify_within(e, ranges_); }
  /// Records the symbolic dims `e` mentions.
  void note_vars(Expr e);
  /// Emits statements computing node `n` at multi-index `idx`; returns a C expression.
  /// Within one call from the backend (and what it calls in turn), a node is computed
  /// once per index: a value read twice (erf's pieces) is bound once and named again.
  std::string value(NodeId n, const std::vector<Expr>& idx, const std::string& indent);
  /// The value an edge supplies at the consumer's logical index, padding reading zero.
  std::string operand(const Edge& e, const std::vector<Expr>& idx, const std::string& indent);
  /// From here on, a value computed from nothing that varies along the loop a backend is
  /// about to open (no memory read, none of the identifiers `varying`, no value that
  /// does) is written to a separate stream at `indent`: the backend emits
  /// take_hoisted() before that loop, so a row's constants (a norm's 1/sqrt of its mean
  /// square) are computed once per row rather than once per element.
  void hoist_invariants(const std::string& indent, std::set<std::string> varying);
  /// The statements hoisted since hoist_invariants; hoisting stops.
  std::string take_hoisted();
  /// A Scatter's sources written in order into `out` (later writes win, as in the
  /// reference), one at a time; `lum_n` (the output's size) must be declared before it.
  void write_ordered_scatter(const Node& root);
  /// The C element types of the output buffer and of read i (0-based); block-stored
  /// inputs are bytes.
  std::string output_type() const;
  std::string input_type(size_t i) const;
  /// A stored value the kernel already holds in a variable, at flat element `flat`
  /// (simplified over the loop counters): the C expression to use instead of a load, or
  /// nothing to load it from its buffer. A backend that computes several kernels in one
  /// function overrides it.
  virtual std::optional<std::string> held(NodeId /*n*/, const Expr& /*flat*/) {
    return std::nullopt;
  }
  /// A value, stored or fused, that the kernel computed for all its elements before its
  /// loop: the C array holding them in row-major order, read at the flat element instead
  /// of computing or loading it; nothing to do as usual.
  virtual std::optional<std::string> precomputed(NodeId /*n*/) { return std::nullopt; }
  /// Which of the kernel's reads stored value `n` is (0-based), and the C name of its
  /// buffer.
  size_t read_index(NodeId n) const { return slot_.at(n.value) - 1; }
  std::string read_buffer(NodeId n) const {
    return read_prefix_ + std::to_string(slot_.at(n.value));
  }

  const Graph& g_;
  const compiler::KernelPlan& plan_;
  const compiler::Kernel& k_;
  std::ostringstream os_;
  std::string read_prefix_ = "in";  // read i's buffer is read_prefix_ + i (1-based)
  /// The kernel's f32 steps may each be off by an f32 unit or two, which the half
  /// precision rounding of what it stores hides (all but at its ties): an f32 sum of an
  /// f32 product is one fused multiply-add (fmaf, the product's own rounding skipped),
  /// 1 / x and 2^x are the hardware's approximations (lum_approx_recipf,
  /// lum_approx_exp2f, which a backend that turns this on defines). For kernels whose
  /// stored value is half precision: in a bf16 GELU, erf's polynomial takes a step an
  /// instruction and its reciprocal and exponential one each.
  bool loose_f32_ = false;

 private:
  std::vector<Expr> narrow(const View& view, std::vector<Expr> idx, const std::string& indent);
  std::string fresh() { return "t" + std::to_string(next_++); }
  std::string load(NodeId n, Expr flat);
  std::string element_of(const std::string& array, const Expr& flat);  // (precomputed)
  std::string rounded(NodeId n, DType t, const std::string& v) const;
  std::string cast(NodeId n, const Edge& e, const std::string& v, DType to);
  std::string gather(const Node& node, const std::vector<Expr>& idx, const std::string& indent);
  std::string nested_reduction(NodeId n, const std::vector<Expr>& idx, const std::string& indent);

  bool invariant(const std::string& expr) const;
  std::string compute(NodeId n, const std::vector<Expr>& idx, const std::string& indent);

  // What value() has bound in the current call from the backend, by node and index; a
  // block the statements open (a padded read's guard) forgets what was bound inside it
  // when it closes (Scope).
  class Scope {
   public:
    explicit Scope(ElementWriter& w) : w_(w), mark_(w.bound_order_.size()) {}
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    ElementWriter& w_;
    size_t mark_;
  };
  // Counts value()/operand() calls in progress: the outermost starts afresh.
  class Call {
   public:
    explicit Call(ElementWriter& w);
    ~Call() { --w_.depth_; }
    Call(const Call&) = delete;
    Call& operator=(const Call&) = delete;

   private:
    ElementWriter& w_;
  };
  std::map<std::string, std::string> bound_;
  std::vector<std::string> bound_order_;
  // The f32 products bound so far (loose_f32_): their factors, by name.
  std::map<std::string, std::pair<std::string, std::string>> products_;
  int depth_ = 0;

  std::map<uint32_t, size_t> slot_;
  // Hoisting (hoist_invariants): where invariant statements go, what varies, and the
  // temporaries known not to.
  std::ostringstream hoisted_;
  std::string hoist_indent_;
  std::set<std::string> varying_, invariant_temps_;
  bool hoisting_ = false;
  std::set<std::string> vars_;
  VarRanges ranges_;                      // of the loop counters in scope
  std::map<std::string, Expr> counters_;  // by name
  int next_ = 0;
};

}  // namespace luminal::runtime

// E-class analyses (egg's make / merge / modify) through one interface, plus the two
// the compiler uses: constant folding and (dtype, shape) typing.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "luminal/egraph/egraph.hpp"

namespace luminal::eg {

class Analysis {
 public:
  virtual ~Analysis() = default;
  /// Data for a new class `c` whose only node is `node`.
  virtual void make(const EGraph& g, ClassId c, uint32_t node) = 0;
  /// Joins the data of `from` into `into` (both canonical before the union); returns
  /// true if `into`'s data changed.
  virtual bool merge(ClassId into, ClassId from) = 0;
  /// Recomputes `node`'s contribution (its children's data changed) into class `c`;
  /// returns true if `c`'s data changed.
  virtual bool remake(const EGraph& g, ClassId c, uint32_t node) = 0;
  /// Runs after `c`'s data was made or changed; may add nodes and merge.
  virtual void modify(EGraph& /*g*/, ClassId /*c*/) {}
};

/// Stores one `Data` per class; subclasses say how to compute and join.
template <class Data>
class TypedAnalysis : public Analysis {
 public:
  /// The data of a canonical class.
  const Data& data(ClassId c) const { return data_.at(c.v); }

  void make(const EGraph& g, ClassId c, uint32_t node) override {
    if (data_.size() <= c.v) data_.resize(c.v + 1);
    data_[c.v] = compute(g, node);
  }
  bool merge(ClassId into, ClassId from) override { return join(data_[into.v], data_[from.v]); }
  bool remake(const EGraph& g, ClassId c, uint32_t node) override {
    return join(data_[c.v], compute(g, node));
  }

 protected:
  virtual Data compute(const EGraph& g, uint32_t node) = 0;
  /// Joins `from` into `into`; returns true if `into` changed.
  virtual bool join(Data& into, const Data& from) = 0;

 private:
  std::vector<Data> data_;
};

/// Several analyses side by side.
class AnalysisSet final : public Analysis {
 public:
  /// Adds an analysis and returns it for typed access.
  template <class A>
  A* add(std::unique_ptr<A> a) {
    A* raw = a.get();
    parts_.push_back(std::move(a));
    return raw;
  }
  void make(const EGraph& g, ClassId c, uint32_t node) override;
  bool merge(ClassId into, ClassId from) override;
  bool remake(const EGraph& g, ClassId c, uint32_t node) override;
  void modify(EGraph& g, ClassId c) override;

 private:
  std::vector<std::unique_ptr<Analysis>> parts_;
};

/// Tracks the constant value of a class. `const_op` nodes carry their value as their
/// first attribute; ops with a fold function fold when every child is constant; a
/// class that becomes constant gains a `const_op` node. Two different constants in one
/// class mean an unsound rewrite: InternalError.
class ConstantFolding final : public TypedAnalysis<std::optional<double>> {
 public:
  using Fold = std::function<std::optional<double>(std::span<const double>)>;
  explicit ConstantFolding(Symbol const_op) : const_op_(const_op) {}
  void set_fold(Symbol op, Fold f) { folds_[op.v] = std::move(f); }
  /// Add, Mul, Sub, Div, Neg, Recip, Max, Min over doubles.
  static std::unique_ptr<ConstantFolding> arithmetic(Symbol const_op);
  void modify(EGraph& g, ClassId c) override;

 protected:
  std::optional<double> compute(const EGraph& g, uint32_t node) override;
  bool join(std::optional<double>& into, const std::optional<double>& from) override;

 private:
  Symbol const_op_;
  std::unordered_map<uint32_t, Fold> folds_;
};

/// A class's element type and shape.
struct TypeInfo {
  bool known = false;
  DType dtype = DType::F32;
  std::vector<Expr> shape;
  bool operator==(const TypeInfo&) const = default;
};

/// Infers (dtype, shape) from an op, its attributes and its children's types; merging
/// two classes of different known types is an unsound rewrite: InternalError.
class TypeAnalysis final : public TypedAnalysis<TypeInfo> {
 public:
  using Infer =
      std::function<TypeInfo(Symbol op, AttrList attrs, std::span<const TypeInfo> children)>;
  explicit TypeAnalysis(Infer infer) : infer_(std::move(infer)) {}

 protected:
  TypeInfo compute(const EGraph& g, uint32_t node) override;
  bool join(TypeInfo& into, const TypeInfo& from) override;

 private:
  Infer infer_;
};

}  // namespace luminal::eg

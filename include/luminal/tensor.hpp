// Tensor: a lazy handle (graph, node, view). Compute methods append nodes; movement
// methods (permute, expand, slice, pad, flip, most reshapes) only change the view.
#pragma once

#include <string>
#include <vector>

#include "luminal/buffer.hpp"
#include "luminal/graph.hpp"
#include "luminal/view.hpp"

namespace luminal {

class Tensor {
 public:
  Tensor() = default;
  Tensor(Graph* graph, NodeId id, View view, DType dtype)
      : graph_(graph), id_(id), view_(std::move(view)), dtype_(dtype) {}

  Graph& graph() const;
  NodeId id() const { return id_; }
  const View& view() const { return view_; }
  DType dtype() const { return dtype_; }
  const std::vector<Expr>& shape() const { return view_.shape(); }
  size_t rank() const { return view_.rank(); }
  /// Size of one dimension (negative axes count from the end).
  Expr dim(int axis) const;
  Expr numel() const { return view_.numel(); }

  // --- primitive compute ----------------------------------------------------------
  Tensor log2() const;
  Tensor exp2() const;
  Tensor sin() const;
  Tensor sqrt() const;
  Tensor recip() const;
  Tensor cast(DType to) const;
  /// Materialises the view into a fresh row-major buffer (no-op if already one).
  Tensor contiguous() const;
  /// Sum / max over one axis, which is removed from the shape.
  Tensor sum_reduce(int axis) const;
  Tensor max_reduce(int axis) const;
  /// out[j] = flat(this)[indices[j]]; the result has the indices' shape.
  Tensor gather(const Tensor& indices) const;
  /// A copy of this with flat positions indices[j] set to src[j].
  Tensor scatter(const Tensor& indices, const Tensor& src) const;

  // --- movement (views) -----------------------------------------------------------
  Tensor permute(const std::vector<int>& axes) const;
  /// Inserts a broadcast dimension of `size` at `axis`.
  Tensor expand(int axis, Expr size) const;
  Tensor broadcast_to(const std::vector<Expr>& shape) const;
  /// Copies first (Contiguous) only when the view cannot express the new shape.
  Tensor reshape(const std::vector<Expr>& shape) const;
  Tensor slice(int axis, Expr start, Expr end) const;
  Tensor pad(int axis, Expr before, Expr after) const;
  Tensor flip(int axis) const;

  // --- data -----------------------------------------------------------------------
  /// Supplies an input's data, converting to its dtype; the size must match the shape
  /// (checked at execute, when symbolic dims are bound).
  template <class T>
  Tensor& set(const std::vector<T>& values) {
    return set_buffer(Buffer::from(values));
  }
  Tensor& set_buffer(Buffer data);
  /// Marks this tensor to be read back after execute.
  Tensor& retrieve();
  /// Keeps this node through optimisation and its value after execute.
  Tensor& keep();
  /// The computed value, materialised through this tensor's view.
  Buffer data() const;
  std::vector<float> to_f32() const { return data().to_f32(); }
  std::vector<int64_t> to_i64() const { return data().to_i64(); }

 private:
  Tensor unary(Op op, DType out) const;
  Tensor reduce(Op op, int axis) const;
  friend Tensor binary(Op op, const Tensor& a, const Tensor& b);

  Graph* graph_ = nullptr;
  NodeId id_;
  View view_;
  DType dtype_ = DType::F32;
};

/// Builds a binary primitive, broadcasting both sides to a common shape.
Tensor binary(Op op, const Tensor& a, const Tensor& b);
Tensor operator+(const Tensor& a, const Tensor& b);
Tensor operator*(const Tensor& a, const Tensor& b);
/// Truncated remainder (C fmod / %), the primitive Mod.
Tensor operator%(const Tensor& a, const Tensor& b);
/// Elementwise a < b as bool.
Tensor less_than(const Tensor& a, const Tensor& b);
/// Scalar forms: the scalar becomes a constant of the tensor's dtype.
Tensor operator+(const Tensor& a, double b);
Tensor operator+(double a, const Tensor& b);
Tensor operator*(const Tensor& a, double b);
Tensor operator*(double a, const Tensor& b);

}  // namespace luminal

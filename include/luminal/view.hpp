// View (the ShapeTracker): how a consumer reads a producer's buffer.
//
// A view maps a logical index (i_0, ..., i_{r-1}) to the physical element
//   offset + sum_d i_d * stride_d
// and marks it valid when every dimension's index lies in its mask [lo_d, hi_d);
// invalid (padded) elements read as zero. Dims, strides, offset and masks are symbolic
// (Expr), so permute, expand, slice, pad, flip and most reshapes only edit metadata.
// A reshape that cannot be expressed this way returns nullopt: the caller copies
// (Contiguous) first.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "luminal/buffer.hpp"
#include "luminal/expr.hpp"

namespace luminal {

/// A view with every symbol bound: plain integers, for interpreters and runtimes.
struct ConcreteView {
  std::vector<int64_t> dims, strides, mask_lo, mask_hi;
  int64_t offset = 0;
  int64_t numel() const;
  /// Whether some element is padding (outside its dim's mask).
  bool has_mask() const;
  /// Row-major over its dims and unpadded: its elements are one run of memory from
  /// `offset`, in order.
  bool is_dense() const;
  /// Smallest and largest physical index of a valid element (nullopt if none is valid).
  std::optional<std::pair<int64_t, int64_t>> physical_range() const;
};

/// Copies the elements a view selects from `src` into a row-major buffer of the same
/// dtype; masked elements read as zero. Throws if the view reaches outside `src`.
Buffer read_view(const Buffer& src, const ConcreteView& view);

/// Resolves a possibly negative axis against a rank; throws naming `op` if out of range.
size_t normalize_axis(int64_t axis, size_t rank, const char* op);

class View {
 public:
  /// A rank-0 (scalar) view.
  View() = default;
  /// Row-major strides, offset 0, no masks.
  static View contiguous(const std::vector<Expr>& shape);
  /// A view made of its parts (each of the vectors one entry a dim), for passes that work
  /// out strides themselves (shard).
  static View from_parts(std::vector<Expr> dims, std::vector<Expr> strides, Expr offset,
                         std::vector<Expr> mask_lo, std::vector<Expr> mask_hi);

  size_t rank() const { return dims_.size(); }
  const std::vector<Expr>& shape() const { return dims_; }
  const std::vector<Expr>& strides() const { return strides_; }
  Expr offset() const { return offset_; }
  Expr mask_lo(size_t d) const { return mask_lo_[d]; }
  Expr mask_hi(size_t d) const { return mask_hi_[d]; }
  /// True when dimension d has a mask narrower than the dimension.
  bool is_masked(size_t d) const;
  bool has_mask() const;
  Expr numel() const { return product(dims_); }
  /// Row-major over its own shape (a dim of size 1 at any stride: an unsqueeze), offset
  /// 0, unmasked: reading it is a plain copy.
  bool is_contiguous() const;
  /// Whether it reads some element more than once: a dim of size other than 1 at stride 0
  /// (a broadcast).
  bool repeats() const;

  View permute(const std::vector<int>& axes) const;
  /// Inserts a new dimension of size `size` and stride 0 at `axis` (0..rank).
  View expand_dim(int axis, Expr size) const;
  /// PyTorch broadcasting: align on the right, size-1 dims stretch, new dims lead.
  View broadcast_to(const std::vector<Expr>& shape) const;
  /// nullopt when the new shape cannot be addressed without a copy.
  std::optional<View> reshape(const std::vector<Expr>& shape) const;
  /// Keeps indices [start, end) of `axis`.
  View slice(int axis, Expr start, Expr end) const;
  /// Adds `before` and `after` zero-valued elements around `axis`.
  View pad(int axis, Expr before, Expr after) const;
  /// Reverses `axis`.
  View flip(int axis) const;
  /// Sliding windows (torch.Tensor.unfold): `axis` becomes the window count
  /// (len - dilation*(size-1) - 1) / step + 1 and a new last dimension of `size`
  /// walks one window. Windows overlap in memory; nullopt if `axis` is masked.
  std::optional<View> unfold(int axis, Expr size, Expr step, Expr dilation = 1) const;

  /// Physical offset of a logical multi-index.
  Expr index(const std::vector<Expr>& idx) const;
  /// 1 where the logical multi-index is inside every mask, else 0.
  Expr valid(const std::vector<Expr>& idx) const;
  /// Splits a row-major flat logical index into a multi-index.
  std::vector<Expr> unflatten(Expr flat) const;
  Expr index(Expr flat) const { return index(unflatten(flat)); }
  Expr valid(Expr flat) const { return valid(unflatten(flat)); }

  /// The view with variables replaced (e.g. a symbolic dim fixed to a value).
  View substitute(const std::vector<std::pair<std::string, Expr>>& map) const;
  ConcreteView resolve(const Bindings& b) const;
  /// resolve() into `out`, reusing its storage.
  void resolve_into(const Bindings& b, ConcreteView& out) const;
  std::string to_string() const;
  bool operator==(const View&) const = default;

 private:
  std::vector<Expr> dims_, strides_, mask_lo_, mask_hi_;
  Expr offset_;
};

/// The broadcast of two shapes (PyTorch rules); throws naming `op` and both shapes.
std::vector<Expr> broadcast_shapes(const std::vector<Expr>& a, const std::vector<Expr>& b,
                                   const char* op);

}  // namespace luminal

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
  /// The graph, or nullptr for an empty handle.
  Graph* graph_ptr() const { return graph_; }
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

  // --- movement (views; a copy only where a view cannot express it) ------------------
  Tensor permute(const std::vector<int>& axes) const;
  Tensor transpose(int a, int b) const;
  /// Inserts a broadcast dimension of `size` at `axis`.
  Tensor expand(int axis, Expr size) const;
  Tensor broadcast_to(const std::vector<Expr>& shape) const;
  /// One entry may be -1 (inferred). Copies (Contiguous) only when the view cannot
  /// express the new shape.
  Tensor reshape(const std::vector<Expr>& shape) const;
  Tensor flatten(int start = 0, int end = -1) const;
  Tensor unsqueeze(int axis) const;
  /// Removes `axis`, which must have size 1.
  Tensor squeeze(int axis) const;
  /// Removes every dimension of constant size 1.
  Tensor squeeze() const;
  Tensor slice(int axis, Expr start, Expr end) const;
  Tensor narrow(int axis, Expr start, Expr length) const {
    return slice(axis, start, start + length);
  }
  /// Adds `before` / `after` elements of `value` around `axis`.
  Tensor pad(int axis, Expr before, Expr after, double value = 0.0) const;
  Tensor flip(int axis) const;
  /// Sliding windows along `axis` (see View::unfold); copies first if `axis` is padded.
  Tensor unfold(int axis, Expr size, Expr step = 1, Expr dilation = 1) const;
  /// Tiles the tensor `times[d]` times along each dimension (torch.Tensor.repeat).
  Tensor repeat(const std::vector<Expr>& times) const;
  /// Rotates by `shift` positions along `axis` (torch.roll).
  Tensor roll(int64_t shift, int axis) const;
  std::vector<Tensor> split(Expr size, int axis) const;
  std::vector<Tensor> chunk(int64_t chunks, int axis) const;
  /// Rows `indices` (i32/i64, 1-D) along `axis` (torch.index_select).
  Tensor index_select(int axis, const Tensor& indices) const;
  /// out[..i..] = this[..indices[..i..]..] along `axis` (torch.gather / take_along_axis).
  Tensor gather_axis(int axis, const Tensor& indices) const;
  /// A copy with this[..indices[..i..]..] = src[..i..] along `axis` (torch.scatter).
  Tensor scatter_axis(int axis, const Tensor& indices, const Tensor& src) const;
  /// Lower / upper triangle of the last two dims, diagonal offset k (torch.tril/triu).
  Tensor tril(int64_t k = 0) const;
  Tensor triu(int64_t k = 0) const;
  /// The diagonal of the last two dims with offset k (torch.diagonal(dim1=-2, dim2=-1)).
  Tensor diagonal(int64_t k = 0) const;

  // --- elementwise composites ----------------------------------------------------
  Tensor operator-() const;
  Tensor abs() const;
  Tensor sign() const;
  Tensor square() const;
  Tensor rsqrt() const;
  Tensor exp() const;
  Tensor log() const;
  Tensor cos() const;
  Tensor relu() const;
  Tensor leaky_relu(double slope = 0.01) const;
  Tensor sigmoid() const;
  Tensor tanh() const;
  Tensor silu() const;
  /// GELU with the exact erf form.
  Tensor gelu() const;
  /// GELU with the tanh approximation.
  Tensor gelu_tanh() const;
  Tensor erf() const;
  Tensor softplus(double beta = 1.0, double threshold = 20.0) const;
  Tensor clamp(double lo, double hi) const;
  Tensor floor() const;
  Tensor ceil() const;
  /// Rounds half to even, as torch.round.
  Tensor round() const;
  Tensor pow(double exponent) const;
  Tensor pow(const Tensor& exponent) const;
  Tensor maximum(const Tensor& other) const;
  Tensor minimum(const Tensor& other) const;
  Tensor logical_not() const;
  /// A constant of this tensor's dtype and shape.
  Tensor full_like(double value) const;
  Tensor zeros_like() const { return full_like(0.0); }
  Tensor ones_like() const { return full_like(1.0); }

  // --- reductions (empty axes = all; negative axes count from the end) -----------------
  Tensor sum(const std::vector<int>& axes = {}, bool keepdim = false) const;
  Tensor max(const std::vector<int>& axes = {}, bool keepdim = false) const;
  Tensor min(const std::vector<int>& axes = {}, bool keepdim = false) const;
  Tensor mean(const std::vector<int>& axes = {}, bool keepdim = false) const;
  Tensor prod(const std::vector<int>& axes = {}, bool keepdim = false) const;
  /// Variance with Bessel's `correction` (1 = unbiased, as torch.var's default).
  Tensor var(const std::vector<int>& axes = {}, int64_t correction = 1, bool keepdim = false) const;
  Tensor std(const std::vector<int>& axes = {}, int64_t correction = 1, bool keepdim = false) const;
  /// Index (i64) of the first maximum / minimum along `axis`.
  Tensor argmax(int axis, bool keepdim = false) const;
  Tensor argmin(int axis, bool keepdim = false) const;
  /// The number of elements over `axes` as a scalar of `dtype` (symbolic dims allowed).
  Tensor count(const std::vector<int>& axes, DType dtype) const;

  // --- normalisation and probability --------------------------------------------------
  Tensor softmax(int axis = -1) const;
  Tensor log_softmax(int axis = -1) const;
  /// (x - mean) / sqrt(var + eps) over `axes` (no affine part; multiply and add after).
  Tensor layer_norm(const std::vector<int>& axes = {-1}, double eps = 1e-5) const;
  /// x / sqrt(mean(x^2) + eps) over `axes`.
  Tensor rms_norm(const std::vector<int>& axes = {-1}, double eps = 1e-6) const;
  /// x - mean(x) over `axes`.
  Tensor mean_norm(const std::vector<int>& axes = {-1}) const;
  /// x / sqrt(biased var(x) + eps) over `axes` (scales to unit deviation, no centering).
  Tensor std_norm(const std::vector<int>& axes = {-1}, double eps = 1e-5) const;
  /// x / max(||x||_p, eps) along `axis` (torch.nn.functional.normalize).
  Tensor normalize(double p = 2.0, int axis = -1, double eps = 1e-12) const;

  // --- cumulative -----------------------------------------------------------------
  Tensor cumsum(int axis) const;
  Tensor cumprod(int axis) const;
  Tensor cummax(int axis) const;

  // --- linear algebra -------------------------------------------------------------
  /// torch.matmul: 1-D and N-D operands, batch dims broadcast.
  Tensor matmul(const Tensor& other) const;
  Tensor dot(const Tensor& other) const;
  Tensor outer(const Tensor& other) const;

  // --- debugging ------------------------------------------------------------------
  /// Prints `label`, the shape and the values after every execute.
  Tensor& print(std::string label);
  /// After every execute, compares with a raw little-endian file of this dtype and
  /// reports the worst mismatches; raises luminal::Error beyond the tolerances.
  Tensor& diff(std::string path, double atol = 1e-5, double rtol = 1e-4);

  // --- data -----------------------------------------------------------------------
  /// Supplies an input's data, converting to its dtype; the size must match the shape
  /// (checked at execute, when symbolic dims are bound).
  template <class T>
  Tensor& set(const std::vector<T>& values) {
    return set_buffer(Buffer::from(values));
  }
  Tensor& set_buffer(Buffer data);
  /// Sets an f32 input from raw ggml blocks, kept compressed (Graph::set_quantized_data).
  Tensor& set_quantized(uint32_t ggml_type, Buffer raw);
  /// Supplies an input's data where it lies on a GPU (luminal::to_cuda, cuda_borrow): a
  /// GPU backend reads it there; dtype and size are checked at execute.
  Tensor& set_device(DeviceData data);
  /// Marks this tensor to be read back after execute.
  Tensor& retrieve();
  /// Marks this tensor to be left on the GPU after execute by a backend that runs on one
  /// (Graph::keep_on_device); data() still copies it to the host when asked.
  Tensor& keep_on_device();
  /// Has the next run write this output into memory of the caller's on the GPU
  /// (cuda_borrow), of its dtype and element count, without a copy (Graph::write_into).
  Tensor& write_into(DeviceData dest);
  /// The value where it lies on a GPU, or nullptr (host data, or none).
  const DeviceData* device_data() const;
  /// Keeps this node through optimisation and its value after execute.
  Tensor& keep();
  /// The computed value, materialised through this tensor's view.
  Buffer data() const;
  std::vector<float> to_f32() const { return data().to_f32(); }
  std::vector<int64_t> to_i64() const { return data().to_i64(); }

 private:
  /// This tensor's node, checked to be an input seen whole (`what` names the caller).
  const Node& settable_input(const char* what) const;
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
/// A scalar constant of `like`'s dtype in `like`'s graph (broadcasts in binary ops).
Tensor scalar_like(const Tensor& like, double value);

// Arithmetic with PyTorch broadcasting. A double operand becomes a constant of the
// tensor's dtype. `/` on integer tensors is true division in f32, as in PyTorch.
Tensor operator+(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a, const Tensor& b);
Tensor operator*(const Tensor& a, const Tensor& b);
Tensor operator/(const Tensor& a, const Tensor& b);
/// Python-style remainder (sign of the divisor), as torch.remainder and `%`.
Tensor operator%(const Tensor& a, const Tensor& b);
/// Truncated remainder (sign of the dividend): the primitive Mod, as torch.fmod.
Tensor fmod(const Tensor& a, const Tensor& b);
#define LUM_SCALAR_BINARY(op)                    \
  Tensor operator op(const Tensor& a, double b); \
  Tensor operator op(double a, const Tensor& b);
LUM_SCALAR_BINARY(+)
LUM_SCALAR_BINARY(-)
LUM_SCALAR_BINARY(*)
LUM_SCALAR_BINARY(/)
LUM_SCALAR_BINARY(%)
#undef LUM_SCALAR_BINARY

// Comparisons and logic yield bool tensors.
Tensor less_than(const Tensor& a, const Tensor& b);
Tensor lt(const Tensor& a, const Tensor& b);
Tensor le(const Tensor& a, const Tensor& b);
Tensor gt(const Tensor& a, const Tensor& b);
Tensor ge(const Tensor& a, const Tensor& b);
Tensor eq(const Tensor& a, const Tensor& b);
Tensor ne(const Tensor& a, const Tensor& b);
Tensor lt(const Tensor& a, double b);
Tensor le(const Tensor& a, double b);
Tensor gt(const Tensor& a, double b);
Tensor ge(const Tensor& a, double b);
Tensor eq(const Tensor& a, double b);
Tensor ne(const Tensor& a, double b);
Tensor logical_and(const Tensor& a, const Tensor& b);
Tensor logical_or(const Tensor& a, const Tensor& b);
/// cond ? a : b elementwise (cond bool), broadcasting all three.
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);
Tensor where(const Tensor& cond, const Tensor& a, double b);
Tensor where(const Tensor& cond, double a, const Tensor& b);

/// Joins tensors along an existing / a new axis.
Tensor concat(const std::vector<Tensor>& parts, int axis);
/// concat({base, rows}, 0) as one op that backends can run in place on a donated `base`
/// (see AppendRowsOp): for state that grows every run, such as a KV cache.
Tensor append_rows(const Tensor& base, const Tensor& rows);
/// Positions (i32) of the k largest values along the last axis, largest first, the lower
/// position first among equal values, NaN last (see TopKOp): [..., k].
Tensor top_k(const Tensor& x, int64_t k);
/// The chosen experts' products, reading only their weights (see ExpertMatMulOp):
/// x [T, 1 or S, K], experts [E, N, K], ids [T, S] (i32/i64) -> [T, S, N] in x's dtype,
/// out[t, s] = experts[ids[t, s]] x[t, s or 0].
Tensor expert_matmul(const Tensor& x, const Tensor& experts, const Tensor& ids);
/// The same for several stacks [E, N_i, K] over the same rows and ids, as one op: their
/// outputs side by side, [T, S, N_0 + N_1 + ...].
Tensor expert_matmul(const Tensor& x, const std::vector<Tensor>& stacks, const Tensor& ids);
Tensor stack(const std::vector<Tensor>& parts, int axis);

/// Convolutions over [N, C, L] / [N, C, H, W] with weights [O, C/groups, k...], via
/// unfold + matmul. `bias` may be an empty Tensor.
struct ConvOptions {
  int64_t stride = 1, padding = 0, dilation = 1, groups = 1;
};
Tensor conv1d(const Tensor& x, const Tensor& weight, const Tensor& bias = {}, ConvOptions o = {});
Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias = {}, ConvOptions o = {});
/// Over [N, C, D, H, W] (a video's frames, a scan's slices), weight [O, C / groups, kd, kh, kw].
Tensor conv3d(const Tensor& x, const Tensor& weight, const Tensor& bias = {}, ConvOptions o = {});
/// Pooling over the last one / two / three dims; stride defaults to the kernel size.
struct PoolOptions {
  int64_t kernel = 2, stride = 0, padding = 0;
};
Tensor max_pool1d(const Tensor& x, PoolOptions o);
Tensor max_pool2d(const Tensor& x, PoolOptions o);
Tensor max_pool3d(const Tensor& x, PoolOptions o);
/// Average pooling counts padded zeros, as torch's count_include_pad=True.
Tensor avg_pool1d(const Tensor& x, PoolOptions o);
Tensor avg_pool2d(const Tensor& x, PoolOptions o);
Tensor avg_pool3d(const Tensor& x, PoolOptions o);

}  // namespace luminal

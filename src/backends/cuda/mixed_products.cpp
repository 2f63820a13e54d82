// Products of f32 activations with a half-precision operand (see mixed_products.hpp).
#include "backends/cuda/mixed_products.hpp"

#include <optional>

#include "luminal/quant.hpp"

namespace luminal::cudagen {

void* MixedProducts::scratch(size_t bytes) {
  return grown(device_, scratch_, bytes);
}

std::optional<DType> half_weight_type(uint32_t format) {
  if (format == static_cast<uint32_t>(GgmlType::F16)) return DType::F16;
  if (format == static_cast<uint32_t>(GgmlType::BF16)) return DType::BF16;
  return std::nullopt;
}

namespace {

// The [N, K] weight view w as the product's [batch..., M, K, N] operand beside x: the
// same matrix for every batch and row, written into `operand` (a kept view: a decoding
// step's products allocate nothing). False where either view is not one read here.
bool weight_operand(const ConcreteView& x, const ConcreteView& w, ConcreteView& operand) {
  const size_t rank = x.dims.size();
  if (rank < 3 || w.dims.size() != 2 || x.has_mask() || w.has_mask()) return false;
  operand = x;
  operand.strides.assign(rank, 0);
  operand.strides[rank - 2] = w.strides[1];
  operand.strides[rank - 1] = w.strides[0];
  // N, unmasked: w's rows (x's view may be another product's, of another N).
  operand.dims[rank - 1] = w.dims[0];
  operand.mask_lo[rank - 1] = 0;
  operand.mask_hi[rank - 1] = w.dims[0];
  operand.offset = w.offset;
  return true;
}

}  // namespace

bool MixedProducts::qmatmul_shared(uint32_t format, const ConcreteView& x, const void* x_data,
                                   const std::vector<GemvMatrix>& weights) {
  const std::optional<DType> w_type = half_weight_type(format);
  if (!w_type) return false;
  std::vector<GemvMatrix>& operands = shared_operands_;
  operands.resize(weights.size());
  for (size_t i = 0; i < weights.size(); ++i) {
    if (!weight_operand(x, weights[i].view, operands[i].view)) return false;
    operands[i].data = weights[i].data, operands[i].out = weights[i].out;
  }
  return gemv_.run_shared(x, x_data, DType::F32, operands, *w_type);
}

bool MixedProducts::qmatmul(uint32_t format, const ConcreteView& x, const void* x_data,
                            const ConcreteView& w, const void* w_data, void* y,
                            const float* residual) {
  const std::optional<DType> half = half_weight_type(format);
  ConcreteView& w_operand = w_operand_;
  if (!half || !weight_operand(x, w, w_operand)) return false;
  const DType w_type = *half;
  if (gemv_.run(x, x_data, DType::F32, w_operand, w_data, w_type, y, residual)) return true;
  // Several rows: x (read once along its broadcast N) rounded into a dense array.
  const ConcreteView rows = unbroadcast(x);
  void* rounded = scratch(static_cast<size_t>(rows.numel()) * dtype_size(w_type));
  if (!copy_.run_converted(rows, x_data, DType::F32, w_type, rounded) ||
      !gemm_.run(packed(x), rounded, w_operand, w_data, w_type, y, DType::F32))
    return false;
  if (residual)  // (y has x's elements less its K)
    copy_.add(static_cast<float*>(y), residual, x.numel() / x.dims[x.dims.size() - 2]);
  return true;
}

bool MixedProducts::matmul(const ConcreteView& a, const void* a_data, const ConcreteView& b,
                           const void* b_data, DType b_type, void* c) {
  if (b_type != DType::F16 && b_type != DType::BF16) return false;
  if (gemv_.run(a, a_data, DType::F32, b, b_data, b_type, c)) return true;
  const ConcreteView values = unbroadcast(b);
  void* widened = scratch(static_cast<size_t>(values.numel()) * sizeof(float));
  return copy_.run_converted(values, b_data, b_type, DType::F32, widened) &&
         gemm_.run(a, a_data, packed(b), widened, DType::F32, c, DType::F32);
}

}  // namespace luminal::cudagen

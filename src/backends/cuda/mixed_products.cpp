// Products of f32 activations with a half-precision operand (see mixed_products.hpp).
#include "backends/cuda/mixed_products.hpp"

#include "luminal/quant.hpp"

namespace luminal::cudagen {

void* MixedProducts::scratch(size_t bytes) {
  return grown(device_, scratch_, bytes);
}

bool MixedProducts::qmatmul(uint32_t format, const ConcreteView& x, const void* x_data,
                            const ConcreteView& w, const void* w_data, void* y) {
  DType w_type;
  if (format == static_cast<uint32_t>(GgmlType::F16))
    w_type = DType::F16;
  else if (format == static_cast<uint32_t>(GgmlType::BF16))
    w_type = DType::BF16;
  else
    return false;
  const size_t rank = x.dims.size();
  if (rank < 3 || w.dims.size() != 2 || x.has_mask() || w.has_mask()) return false;
  // W as the product's [batch..., M, K, N] operand: the same matrix for every batch and row.
  ConcreteView w_operand = x;
  w_operand.strides.assign(rank, 0);
  w_operand.strides[rank - 2] = w.strides[1];
  w_operand.strides[rank - 1] = w.strides[0];
  w_operand.offset = w.offset;
  if (gemv_.run(x, x_data, DType::F32, w_operand, w_data, w_type, y)) return true;
  // Several rows: x (read once along its broadcast N) rounded into a dense array.
  const ConcreteView rows = unbroadcast(x);
  void* rounded = scratch(static_cast<size_t>(rows.numel()) * dtype_size(w_type));
  return copy_.run_converted(rows, x_data, DType::F32, w_type, rounded) &&
         gemm_.run(packed(x), rounded, w_operand, w_data, w_type, y, DType::F32);
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

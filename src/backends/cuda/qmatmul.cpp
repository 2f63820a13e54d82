// QMatMul on the GPU (see qmatmul.hpp).
#include "backends/cuda/qmatmul.hpp"

#include "luminal/quant.hpp"

namespace luminal::cudagen {
namespace {

ConcreteView unmasked(std::vector<int64_t> dims, std::vector<int64_t> strides, int64_t offset) {
  ConcreteView v;
  v.mask_lo.assign(dims.size(), 0);
  v.mask_hi = dims;
  v.dims = std::move(dims);
  v.strides = std::move(strides);
  v.offset = offset;
  return v;
}

}  // namespace

bool QuantizedProduct::run(uint32_t format, const ConcreteView& x, const void* x_data,
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
  std::vector<int64_t> w_strides(rank, 0);
  w_strides[rank - 2] = w.strides[1];
  w_strides[rank - 1] = w.strides[0];
  const ConcreteView w_operand = unmasked(x.dims, w_strides, w.offset);
  if (gemv_.run(x, x_data, DType::F32, w_operand, w_data, w_type, y)) return true;

  // Several rows: x ([batch..., M, K], without the broadcast N) rounded into a dense array.
  std::vector<int64_t> rows_dims(x.dims.begin(), x.dims.end() - 1);
  std::vector<int64_t> rows_strides(x.strides.begin(), x.strides.end() - 1);
  const ConcreteView rows = unmasked(rows_dims, rows_strides, x.offset);
  const auto bytes = static_cast<size_t>(rows.numel()) * dtype_size(w_type);
  if (rounded_.bytes() < bytes) {
    device_.synchronize();  // the old buffer may still be read by a queued product
    rounded_ = DeviceBuffer(bytes);
  }
  if (!copy_.run_rounded(rows, static_cast<const float*>(x_data), w_type, rounded_.data()))
    return false;
  std::vector<int64_t> dense(rank, 0);  // the rounded rows as an operand, broadcast along N
  for (size_t d = rank - 1, step = 1; d-- > 0;) {
    dense[d] = static_cast<int64_t>(step);
    step *= static_cast<size_t>(x.dims[d]);
  }
  return gemm_.run(unmasked(x.dims, dense, 0), rounded_.data(), w_operand, w_data, w_type, y,
                   DType::F32);
}

}  // namespace luminal::cudagen

// The Attention kernel on the CPU (compiler/attention_op.hpp): scores, masked softmax and
// the value product in one pass (private to src/backends/cpu).
#pragma once

#include <cstdint>

#include "luminal/dtype.hpp"
#include "luminal/view.hpp"

namespace luminal::cpugen {

/// The AttentionOp's operands as views over their raw buffers: q and k [batch..., M, D, T]
/// (q f32, broadcast along T; k broadcast along M), v [batch..., M, T, Dv], mask
/// [batch..., M, T] of bool bytes; k and v are f32 or f16 (`k_type`, `v_type`). Writes the
/// row-major [batch..., M, Dv] result. Returns false, writing nothing, where keys or values
/// are not contiguous along D or Dv: the caller then runs the op's reference semantics.
bool attention(const ConcreteView& q, const float* q_data, const ConcreteView& k,
               const void* k_data, DType k_type, const ConcreteView& v, const void* v_data,
               DType v_type, const ConcreteView& mask, const uint8_t* mask_data, double scale,
               float* out);

}  // namespace luminal::cpugen

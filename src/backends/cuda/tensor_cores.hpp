// Device helpers for kernels on sm_80's tensor cores (private to src/backends/cuda):
// asynchronous 16-byte copies into it (cp.async: lum_cp16,
// lum_cp_commit, lum_cp_wait), matrix loads from it, m16n8k16 products of f16 or bf16
// with f32 accumulators, and two floats rounded into one register of halves. Source
// text for the kernels that use them (attention, window products) to put after the
// prelude.
#pragma once

#include <string_view>

namespace luminal::cudagen {

std::string_view tensor_core_source();

}  // namespace luminal::cudagen

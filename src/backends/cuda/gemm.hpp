// Matrix products through cuBLASLt (private to src/backends/cuda): the MatMul kernel's
// [batch..., M, K, N] operand views mapped onto cuBLASLt's column-major, strided-batch
// layouts, with f32 accumulation for every input type. Each new shape's algorithm is
// searched (runtime/search.hpp) among the heuristic's first few, on the call's own
// operands, where the product is large enough for the choice to matter.
#pragma once

#include <cublasLt.h>

#include <map>
#include <string>

#include "backends/cuda/device.hpp"
#include "luminal/dtype.hpp"
#include "luminal/view.hpp"
#include "runtime/search.hpp"

namespace luminal::cudagen {

/// What a product adds to its output as it stores it, values of the output's type:
/// `bias`, N values added to every row of every batch (cuBLASLt's bias epilogue), and
/// `c`, a [batch..., M, N] view over `c_data` added element by element (beta = 1).
struct GemmAddends {
  const void* bias = nullptr;
  const ConcreteView* c = nullptr;
  const void* c_data = nullptr;
};

class Gemm {
 public:
  /// Searches new shapes' algorithms with `searcher` (the executable's).
  Gemm(const Device& device, runtime::Searcher& searcher);
  ~Gemm();
  Gemm(const Gemm&) = delete;
  Gemm& operator=(const Gemm&) = delete;

  /// c[batch..., M, N] (contiguous, of `c_type`) = sum over K of a * b, where `a` and `b`
  /// are MatMul operand views over device buffers of `dtype` (f32, f16 or bf16; c of the
  /// same type, or f32 over half operands). False when the views are not strided matrices
  /// cuBLASLt can read (padding, no unit stride along either matrix dim): the caller
  /// computes the product another way. `add`'s matrix, where given, is one `reads_addend`
  /// accepts (or the output itself, added in place).
  bool run(const ConcreteView& a, const void* a_data, const ConcreteView& b, const void* b_data,
           DType dtype, void* c_data, DType c_type, const GemmAddends& add = {});
  /// Whether `run` reads `c` as an addend where it lies: a strided matrix, unit stride
  /// along N, rows apart, unpadded. Another is copied into the output first.
  static bool reads_addend(const ConcreteView& c);

 private:
  struct Plan;
  // Times the heuristic's algorithms for `plan` on the call's first matrices and keeps
  // the fastest correct one.
  void search(Plan& plan, const std::vector<cublasLtMatmulHeuristicResult_t>& algos,
              const std::string& signature, const void* pa, const void* pb, const void* pr,
              void* pc, size_t c_bytes, DType c_type);

  const Device& device_;
  cublasLtHandle_t handle_ = nullptr;
  DeviceBuffer workspace_;
  std::map<std::string, Plan*> plans_;  // by the call's shapes, strides, types, alignments
  runtime::Searcher& searcher_;
};

}  // namespace luminal::cudagen

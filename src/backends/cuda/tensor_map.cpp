// Tensor maps encoded through the driver (see tensor_map.hpp).
#include "backends/cuda/tensor_map.hpp"

#include <cuda.h>
#include <cuda_runtime_api.h>

namespace luminal::cudagen {
namespace {

using EncodeTiled = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*,
                                 const cuuint64_t*, const cuuint64_t*, const cuuint32_t*,
                                 const cuuint32_t*, CUtensorMapInterleave, CUtensorMapSwizzle,
                                 CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

EncodeTiled encoder() {
  static const EncodeTiled fn = [] {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult found{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault,
                                         &found) != cudaSuccess ||
        found != cudaDriverEntryPointSuccess)
      return EncodeTiled{nullptr};
    return reinterpret_cast<EncodeTiled>(f);
  }();
  return fn;
}

}  // namespace

bool encode_swizzled_map(TensorMap& map, const void* base, const std::vector<uint64_t>& dims,
                         const std::vector<uint64_t>& strides, const std::vector<uint32_t>& box) {
  static_assert(sizeof(TensorMap) == sizeof(CUtensorMap));
  const EncodeTiled encode = encoder();
  const size_t rank = dims.size();
  if (!encode || rank < 1 || rank > 5 || strides.size() + 1 != rank || box.size() != rank)
    return false;
  cuuint64_t byte_strides[4] = {};
  for (size_t i = 0; i + 1 < rank; ++i) byte_strides[i] = strides[i] * 2;
  const cuuint32_t unit[5] = {1, 1, 1, 1, 1};
  return encode(reinterpret_cast<CUtensorMap*>(&map), CU_TENSOR_MAP_DATA_TYPE_UINT16,
                static_cast<cuuint32_t>(rank), const_cast<void*>(base), dims.data(), byte_strides,
                box.data(), unit, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

}  // namespace luminal::cudagen

// The tensor-core helpers' source (see tensor_cores.hpp).
#include "backends/cuda/tensor_cores.hpp"

namespace luminal::cudagen {
namespace {

constexpr const char* kSource = R"TC(
#if __CUDA_ARCH__ >= 800
// 16 bytes from global to shared memory (its own address) without registers; zeros where
// `bytes` is 0. The copies since the last commit make one group; wait<N> returns once at
// most N groups are still on their way.
LUM_FN void lum_cp16(uint32_t dst, const void* src, int bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(bytes));
}
LUM_FN void lum_cp_commit() { asm volatile("cp.async.commit_group;"); }
template <int N> LUM_FN void lum_cp_wait() { asm volatile("cp.async.wait_group %0;" ::"n"(N)); }
// A 16 x 16 operand (four 8 x 8 matrices) from shared memory, each lane naming one row.
// (Addresses are shared memory's own, 32 bits.)
LUM_FN void lum_ldsm(uint32_t (&r)[4], uint32_t at) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(at));
}
LUM_FN void lum_ldsm_t(uint32_t (&r)[4], uint32_t at) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(at));
}
// c += a b for a 16 x 16 A (row-major fragments) and a 16 x 8 B of bf16 or f16.
template <bool kBf16>
LUM_FN void lum_mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  if constexpr (kBf16)
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  else
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
// Two floats rounded into one register (the first in the low half).
template <bool kBf16> LUM_FN uint32_t lum_pack_half2(float lo, float hi) {
  uint32_t r;
  if constexpr (kBf16) asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  else asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}
#endif
)TC";

}  // namespace

std::string_view tensor_core_source() {
  return kSource;
}

}  // namespace luminal::cudagen

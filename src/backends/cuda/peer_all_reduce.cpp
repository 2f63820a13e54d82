#include "backends/cuda/peer_all_reduce.hpp"

#include <unistd.h>

#include <cstring>

#include "backends/cuda/codegen.hpp"
#include "luminal/error.hpp"

namespace luminal::cudagen {
namespace {

constexpr int kBlocks = 32, kThreads = 512;
constexpr size_t kFlagBytes = 4096;  // kBlocks x kMostRanks flags, rounded up
static_assert(kBlocks * PeerAllReduce::kMostRanks * sizeof(unsigned) <= kFlagBytes);

constexpr const char* kSource = R"PEERAR(
#define LUM_AR_MOST_RANKS 8
#define LUM_AR_FLAG_BYTES 4096

// Each rank's exchange memory as this rank reaches it (its own included), by rank.
struct LumArPeers {
  unsigned char* base[LUM_AR_MOST_RANKS];
};

// Values move as 16-byte units: 4 f32 or 8 f16/bf16. Type: 0 f32, 1 f16, 2 bf16.
template <int Type>
LUM_FN void lum_ar_add(float (&acc)[8], uint4 u) {
  const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    if (Type == 0) {
      acc[i] += __uint_as_float(w[i]);
    } else {
      const uint16_t lo = (uint16_t)(w[i] & 0xffffu), hi = (uint16_t)(w[i] >> 16);
      acc[2 * i] += Type == 1 ? lum_h2f(lo) : lum_bf2f(lo);
      acc[2 * i + 1] += Type == 1 ? lum_h2f(hi) : lum_bf2f(hi);
    }
  }
}
template <int Type>
LUM_FN uint4 lum_ar_pack(const float (&acc)[8]) {
  uint32_t w[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    if (Type == 0) {
      w[i] = __float_as_uint(acc[i]);
    } else {
      const uint16_t lo = Type == 1 ? lum_f2h(acc[2 * i]) : lum_f2bf(acc[2 * i]);
      const uint16_t hi = Type == 1 ? lum_f2h(acc[2 * i + 1]) : lum_f2bf(acc[2 * i + 1]);
      w[i] = (uint32_t)lo | ((uint32_t)hi << 16);
    }
  }
  return make_uint4(w[0], w[1], w[2], w[3]);
}

// Unit u of `bytes` at p; where the values are not whole aligned units, byte by byte, the
// bytes past the end zero (they sum to zero and are never stored).
LUM_FN uint4 lum_ar_load(const unsigned char* p, long long u, long long bytes, bool whole) {
  if (whole) return ((const uint4*)p)[u];
  uint32_t w[4] = {0, 0, 0, 0};
  for (int i = 0; i < 16 && 16 * u + i < bytes; ++i) w[i / 4] |= (uint32_t)p[16 * u + i] << (8 * (i % 4));
  return make_uint4(w[0], w[1], w[2], w[3]);
}
LUM_FN void lum_ar_store(unsigned char* p, long long u, long long bytes, bool whole, uint4 v) {
  if (whole) {
    ((uint4*)p)[u] = v;
    return;
  }
  const uint32_t w[4] = {v.x, v.y, v.z, v.w};
  for (int i = 0; i < 16 && 16 * u + i < bytes; ++i) p[16 * u + i] = (unsigned char)(w[i / 4] >> (8 * (i % 4)));
}

template <int Type>
LUM_FN void lum_ar_one_shot(const unsigned char* src, unsigned char* dst, long long bytes,
                            const LumArPeers& peers, int rank, int size, unsigned* calls,
                            long long slot_bytes) {
  __shared__ unsigned call_s;
  const int b = blockIdx.x;
  if (threadIdx.x == 0) call_s = calls[b] + 1;
  __syncthreads();
  const unsigned call = call_s;
  const long long units = (bytes + 15) / 16;
  const bool whole = bytes % 16 == 0 && (unsigned long long)src % 16 == 0 &&
                     (unsigned long long)dst % 16 == 0;
  const long long first = (long long)b * blockDim.x + threadIdx.x,
                  step = (long long)gridDim.x * blockDim.x;
  // Receive buffers by [parity][source rank].
  const long long mine_at = LUM_AR_FLAG_BYTES + (long long)((call & 1) * size + rank) * slot_bytes;
  for (long long u = first; u < units; u += step) {
    const uint4 v = lum_ar_load(src, u, bytes, whole);
    for (int p = 0; p < size; ++p)
      if (p != rank) ((uint4*)(peers.base[p] + mine_at))[u] = v;
  }
  __threadfence_system();
  __syncthreads();
  const int peer = threadIdx.x;
  if (peer < size && peer != rank) {
    unsigned* theirs = (unsigned*)peers.base[peer] + b * LUM_AR_MOST_RANKS + rank;
    asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(theirs), "r"(call) : "memory");
    const unsigned* ours = (const unsigned*)peers.base[rank] + b * LUM_AR_MOST_RANKS + peer;
    unsigned seen;
    do {
      asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(seen) : "l"(ours) : "memory");
    } while ((int)(seen - call) < 0);
  }
  __syncthreads();
  // In rank order, so every rank adds the same values in the same order.
  const unsigned char* received =
      peers.base[rank] + LUM_AR_FLAG_BYTES + (long long)((call & 1) * size) * slot_bytes;
  for (long long u = first; u < units; u += step) {
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int p = 0; p < size; ++p)
      lum_ar_add<Type>(acc, p == rank ? lum_ar_load(src, u, bytes, whole)
                                      : __ldcg((const uint4*)(received + p * slot_bytes) + u));
    lum_ar_store(dst, u, bytes, whole, lum_ar_pack<Type>(acc));
  }
  if (threadIdx.x == 0) calls[b] = call;
}

#define LUM_AR_KERNEL(name, type)                                                           \
  extern "C" __global__ void __launch_bounds__(512)                                         \
      name(const unsigned char* src, unsigned char* dst, long long bytes, LumArPeers peers, \
           int rank, int size, unsigned* calls, long long slot_bytes) {                     \
    lum_after_prior_grids();                                                                \
    lum_ar_one_shot<type>(src, dst, bytes, peers, rank, size, calls, slot_bytes);           \
  }
LUM_AR_KERNEL(lum_all_reduce_peers_f32, 0)
LUM_AR_KERNEL(lum_all_reduce_peers_f16, 1)
LUM_AR_KERNEL(lum_all_reduce_peers_bf16, 2)
)PEERAR";

struct LumArPeers {
  void* base[PeerAllReduce::kMostRanks];
};

// What a rank tells the others when they connect.
struct Card {
  pid_t pid;
  int device;
  cudaIpcMemHandle_t handle;
};

// A rank's verdict, of one length on every rank: "" where it reaches every peer.
constexpr size_t kVerdictBytes = 160;

std::string verdict(std::string problem) {
  problem.resize(kVerdictBytes, '\0');
  return problem;
}

}  // namespace

std::string peer_all_reduce_source() {
  return std::string(cuda_prelude()) + kSource;
}

std::unique_ptr<PeerAllReduce> PeerAllReduce::connect(int rank, int size, int device,
                                                      const Gather& gather, std::string* why) {
  std::unique_ptr<PeerAllReduce> me(new PeerAllReduce(rank, size));
  std::string problem;
  Card card{getpid(), device, {}};
  if (size > kMostRanks) {
    problem = "more than " + std::to_string(kMostRanks) + " ranks";
  } else {
    check(cudaSetDevice(device), "cudaSetDevice");
    me->exchange_ = DeviceBuffer(kFlagBytes + 2 * static_cast<size_t>(size) * kMostBytes);
    me->calls_ = DeviceBuffer(kBlocks * sizeof(unsigned));
    check(cudaMemset(me->exchange_.data(), 0, me->exchange_.bytes()), "cudaMemset");
    check(cudaMemset(me->calls_.data(), 0, me->calls_.bytes()), "cudaMemset");
    check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");  // zero before a peer writes
    const cudaError_t e = cudaIpcGetMemHandle(&card.handle, me->exchange_.data());
    if (e != cudaSuccess) {
      problem = std::string("its memory cannot be shared: ") + cudaGetErrorString(e);
      cudaGetLastError();
    }
  }
  const std::vector<std::string> cards =
      gather(std::string(reinterpret_cast<const char*>(&card), sizeof card));
  me->peers_.assign(static_cast<size_t>(size), nullptr);
  me->peers_[static_cast<size_t>(rank)] = me->exchange_.data();
  for (int p = 0; p < size && problem.empty(); ++p) {
    if (p == rank) continue;
    Card theirs;
    std::memcpy(&theirs, cards[static_cast<size_t>(p)].data(), sizeof theirs);
    if (theirs.pid == card.pid) {
      problem = "ranks share a process";
      break;
    }
    int reach = 1;
    if (theirs.device != device) cudaDeviceCanAccessPeer(&reach, device, theirs.device);
    if (!reach) {
      problem = "GPU " + std::to_string(device) + " cannot reach GPU " +
                std::to_string(theirs.device) + "'s memory";
      break;
    }
    void* mapped = nullptr;
    const cudaError_t e =
        cudaIpcOpenMemHandle(&mapped, theirs.handle, cudaIpcMemLazyEnablePeerAccess);
    if (e != cudaSuccess) {
      problem = "cannot map rank " + std::to_string(p) + "'s memory: " + cudaGetErrorString(e);
      cudaGetLastError();
      break;
    }
    me->opened_.push_back(mapped);
    me->peers_[static_cast<size_t>(p)] = mapped;
  }
  const std::vector<std::string> verdicts = gather(verdict(problem));
  for (int r = 0; r < size; ++r) {
    const std::string& v = verdicts[static_cast<size_t>(r)];
    if (v[0] == '\0') continue;
    if (why) *why = "rank " + std::to_string(r) + ": " + std::string(v.c_str());
    return nullptr;
  }
  int major = 0, minor = 0;
  check(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device),
        "reading the GPU");
  check(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device),
        "reading the GPU");
  me->module_ = std::make_unique<Module>(
      compile_cubin(peer_all_reduce_source(), "sm_" + std::to_string(10 * major + minor)).code);
  return me;
}

PeerAllReduce::~PeerAllReduce() {
  for (void* p : opened_) cudaIpcCloseMemHandle(p);
}

bool PeerAllReduce::takes(size_t count, DType dtype) const {
  return (dtype == DType::F32 || dtype == DType::F16 || dtype == DType::BF16) &&
         count * dtype_size(dtype) <= kMostBytes;
}

void PeerAllReduce::run(const void* src, void* dst, size_t count, DType dtype,
                        cudaStream_t stream) const {
  const char* name = dtype == DType::F32   ? "lum_all_reduce_peers_f32"
                     : dtype == DType::F16 ? "lum_all_reduce_peers_f16"
                                           : "lum_all_reduce_peers_bf16";
  long long bytes = static_cast<long long>(count * dtype_size(dtype)),
            slot_bytes = static_cast<long long>(kMostBytes);
  LumArPeers peers{};
  for (int r = 0; r < size_; ++r) peers.base[r] = peers_[static_cast<size_t>(r)];
  int rank = rank_, size = size_;
  void* calls = calls_.data();
  void* args[] = {&src, &dst, &bytes, &peers, &rank, &size, &calls, &slot_bytes};
  check(cudaLaunchKernel(module_->kernel(name), dim3(kBlocks), dim3(kThreads), args, 0, stream),
        "launching an all-reduce over peer memory");
}

}  // namespace luminal::cudagen

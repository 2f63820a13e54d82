// Ranks on GPUs through NCCL. The library is opened when a run first needs it, not linked:
// a program that never runs on several GPUs needs no NCCL (217 MB) to start, and one that
// does finds the copy the machine has (the toolkit's, or PyTorch's nvidia-nccl wheel on
// LD_LIBRARY_PATH).
#include <dlfcn.h>

#include <cstdio>
#include <cstring>

#include "backends/cuda/device.hpp"
#include "backends/cuda/peer_all_reduce.hpp"
#include "luminal/collective.hpp"
#include "luminal/cuda.hpp"
#include "luminal/error.hpp"
#include "runtime/env.hpp"

#if __has_include(<nccl.h>)
#include <nccl.h>
#define LUMINAL_HAS_NCCL 1
#endif

namespace luminal {

#ifdef LUMINAL_HAS_NCCL
namespace {

// The entry points luminal calls, from the shared library.
struct Nccl {
  ncclResult_t (*get_unique_id)(ncclUniqueId*);
  ncclResult_t (*comm_init_rank)(ncclComm_t*, int, ncclUniqueId, int);
  ncclResult_t (*all_reduce)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t,
                             cudaStream_t);
  ncclResult_t (*all_gather)(const void*, void*, size_t, ncclDataType_t, ncclComm_t, cudaStream_t);
  ncclResult_t (*group_start)();
  ncclResult_t (*group_end)();
  ncclResult_t (*comm_destroy)(ncclComm_t);
  const char* (*error_string)(ncclResult_t);

  void check(ncclResult_t r, const char* what) const {
    LUM_CHECK(r == ncclSuccess) << "NCCL: " << what << ": " << error_string(r);
  }
};

const Nccl& nccl() {
  static const Nccl lib = [] {
    void* h = dlopen("libnccl.so.2", RTLD_NOW | RTLD_GLOBAL);
    LUM_CHECK(h) << "several GPUs need NCCL, and libnccl.so.2 was not found (" << dlerror()
                 << "): install NCCL, or put the directory holding it on LD_LIBRARY_PATH";
    const auto entry = [&](const char* name) {
      void* f = dlsym(h, name);
      LUM_CHECK(f) << "libnccl.so.2 lacks " << name << " (NCCL 2.12 or newer is needed)";
      return f;
    };
    Nccl n{};
    n.get_unique_id = reinterpret_cast<decltype(n.get_unique_id)>(entry("ncclGetUniqueId"));
    n.comm_init_rank = reinterpret_cast<decltype(n.comm_init_rank)>(entry("ncclCommInitRank"));
    n.all_reduce = reinterpret_cast<decltype(n.all_reduce)>(entry("ncclAllReduce"));
    n.all_gather = reinterpret_cast<decltype(n.all_gather)>(entry("ncclAllGather"));
    n.group_start = reinterpret_cast<decltype(n.group_start)>(entry("ncclGroupStart"));
    n.group_end = reinterpret_cast<decltype(n.group_end)>(entry("ncclGroupEnd"));
    n.comm_destroy = reinterpret_cast<decltype(n.comm_destroy)>(entry("ncclCommDestroy"));
    n.error_string = reinterpret_cast<decltype(n.error_string)>(entry("ncclGetErrorString"));
    return n;
  }();
  return lib;
}

std::optional<ncclDataType_t> nccl_type(DType t) {
  switch (t) {
    case DType::F32:
      return ncclFloat32;
    case DType::F16:
      return ncclFloat16;
    case DType::BF16:
      return ncclBfloat16;
    case DType::I32:
      return ncclInt32;
    case DType::I64:
      return ncclInt64;
    case DType::I8:
      return ncclInt8;
    case DType::U8:
      return ncclUint8;
    default:
      return std::nullopt;
  }
}

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(const ncclUniqueId& id, int rank, int size, int device)
      : rank_(rank), size_(size), device_(device) {
    cudagen::check(cudaSetDevice(device), "cudaSetDevice");
    nccl().check(nccl().comm_init_rank(&comm_, size, id, rank), "joining the ranks");
    // A single GPU has no peers; LUMINAL_CUDA_ALL_REDUCE=nccl keeps every exchange in NCCL
    // (set alike on every rank: the ranks must agree on each exchange's way).
    if (size > 1 && !runtime::env_has("LUMINAL_CUDA_ALL_REDUCE", "nccl")) {
      const auto gather = [this](const std::string& mine) {
        Buffer one(DType::U8, mine.size()), all(DType::U8, mine.size() * size_);
        std::memcpy(one.data(), mine.data(), mine.size());
        all_gather(one, all);
        std::vector<std::string> every;
        for (int r = 0; r < size_; ++r)
          every.emplace_back(static_cast<const char*>(all.data()) + r * mine.size(), mine.size());
        return every;
      };
      peers_ = cudagen::PeerAllReduce::connect(rank, size, device, gather, &no_peers_);
    }
    if (runtime::env_has("LUMINAL_LOG", "info") && rank == 0)
      std::fprintf(stderr, "luminal: %d ranks joined: %s\n", size, transport().c_str());
  }
  ~NcclCommunicator() override {
    peers_.reset();
    nccl().comm_destroy(comm_);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string transport() const override {
    std::string t = "NCCL";
    if (peers_)
      t += "; all-reduces of at most " + std::to_string(cudagen::PeerAllReduce::kMostBytes / 1024) +
           " KB over peer memory";
    else if (!no_peers_.empty())
      t += " (not over peer memory: " + no_peers_ + ")";
    return t;
  }

  bool on_device(DType dtype) const override { return nccl_type(dtype).has_value(); }
  void all_reduce_on_device(const void* src, void* dst, size_t count, DType dtype,
                            void* stream) override {
    if (peers_ && peers_->takes(count, dtype)) {
      peers_->run(src, dst, count, dtype, static_cast<cudaStream_t>(stream));
      return;
    }
    nccl_all_reduce(src, dst, count, dtype, stream);
  }

  // A bucket's parts (large: data-parallel gradients) as one NCCL group.
  void all_reduce_parts_on_device(std::span<const DevicePart> parts, DType dtype,
                                  void* stream) override {
    nccl().check(nccl().group_start(), "starting a group");
    try {
      for (const DevicePart& p : parts) nccl_all_reduce(p.src, p.dst, p.count, dtype, stream);
    } catch (...) {
      nccl().group_end();
      throw;
    }
    nccl().check(nccl().group_end(), "a group of all-reduces");
  }

  void nccl_all_reduce(const void* src, void* dst, size_t count, DType dtype, void* stream) {
    const std::optional<ncclDataType_t> type = nccl_type(dtype);
    LUM_CHECK(type) << "NCCL cannot sum " << dtype_name(dtype) << " values";
    nccl().check(nccl().all_reduce(src, dst, count, *type, ncclSum, comm_,
                                   static_cast<cudaStream_t>(stream)),
                 "all-reduce");
  }

  void all_gather_on_device(const void* src, void* dst, size_t count, DType dtype,
                            void* stream) override {
    const std::optional<ncclDataType_t> type = nccl_type(dtype);
    LUM_CHECK(type) << "NCCL cannot gather " << dtype_name(dtype) << " values";
    nccl().check(
        nccl().all_gather(src, dst, count, *type, comm_, static_cast<cudaStream_t>(stream)),
        "all-gather");
  }

  // Host data (a token every rank must agree on): through the GPU and back, in a buffer
  // kept for the next.
  void all_reduce(Buffer& data) override {
    void* on_gpu = scratch(data.bytes());
    cudagen::check(cudaMemcpy(on_gpu, data.data(), data.bytes(), cudaMemcpyHostToDevice),
                   "copying an all-reduce's values to the GPU");
    all_reduce_on_device(on_gpu, on_gpu, data.numel(), data.dtype(), nullptr);
    cudagen::check(cudaMemcpy(data.data(), on_gpu, data.bytes(), cudaMemcpyDeviceToHost),
                   "copying an all-reduce's sums back");
  }
  void all_gather(const Buffer& mine, Buffer& all) override {
    LUM_CHECK(all.bytes() == mine.bytes() * static_cast<size_t>(size_) &&
              all.dtype() == mine.dtype())
        << "all_gather: the output is not " << size_ << " times the input";
    auto* on_gpu = static_cast<char*>(scratch(all.bytes() + mine.bytes()));
    cudagen::check(cudaMemcpy(on_gpu, mine.data(), mine.bytes(), cudaMemcpyHostToDevice),
                   "copying an all-gather's values to the GPU");
    all_gather_on_device(on_gpu, on_gpu + mine.bytes(), mine.numel(), mine.dtype(), nullptr);
    cudagen::check(
        cudaMemcpy(all.data(), on_gpu + mine.bytes(), all.bytes(), cudaMemcpyDeviceToHost),
        "copying an all-gather's values back");
  }

 private:
  int rank_, size_, device_;
  ncclComm_t comm_ = nullptr;
  cudagen::DeviceBuffer scratch_;
  std::unique_ptr<cudagen::PeerAllReduce> peers_;  // small all-reduces, where they reach
  std::string no_peers_;                           // why not, where they cannot

  // Device memory for host collectives, kept for the next.
  void* scratch(size_t bytes) {
    cudagen::check(cudaSetDevice(device_), "cudaSetDevice");
    if (scratch_.bytes() < bytes) scratch_ = cudagen::DeviceBuffer(bytes);
    return scratch_.data();
  }
};

}  // namespace

std::string nccl_unique_id() {
  ncclUniqueId id;
  nccl().check(nccl().get_unique_id(&id), "making a group id");
  std::string hex;
  for (unsigned char c : id.internal) {
    char b[3];
    std::snprintf(b, sizeof b, "%02x", c);
    hex += b;
  }
  return hex;
}

std::shared_ptr<Communicator> nccl_communicator(const std::string& id, int rank, int size,
                                                int device) {
  ncclUniqueId raw;
  LUM_CHECK(id.size() == 2 * sizeof raw.internal)
      << "nccl_communicator: the group id has " << id.size() << " hex digits, not "
      << 2 * sizeof raw.internal;
  for (size_t i = 0; i < sizeof raw.internal; ++i) {
    unsigned v = 0;
    LUM_CHECK(std::sscanf(id.c_str() + 2 * i, "%2x", &v) == 1)
        << "nccl_communicator: the group id is not hexadecimal";
    raw.internal[i] = static_cast<char>(v);
  }
  LUM_CHECK(size >= 1 && rank >= 0 && rank < size)
      << "nccl_communicator: rank " << rank << " of " << size;
  return std::make_shared<NcclCommunicator>(raw, rank, size, device);
}

#else  // a toolkit without nccl.h

namespace {
constexpr const char* kNoNccl =
    "this build of luminal has no NCCL support (nccl.h was not found at build time)";
}

std::string nccl_unique_id() {
  LUM_FAIL() << kNoNccl;
}

std::shared_ptr<Communicator> nccl_communicator(const std::string&, int, int, int) {
  LUM_FAIL() << kNoNccl;
}

#endif

}  // namespace luminal

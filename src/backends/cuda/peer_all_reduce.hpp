// The all-reduce of a few kilobytes over peer memory (private to src/backends/cuda): what a
// tensor-parallel decode step exchanges twice a layer. NCCL's kernels take 15-30 us for
// 8 KB, most of it latency, so on several GPUs a step paid more for its exchanges than
// the weights it no longer streamed. Here one kernel does it: each rank writes its values
// into every peer's receive buffer (over NVLink), raises a flag there, waits for every
// peer's flag, and sums the parts in rank order, so every rank gets the same bits.
//
// The protocol: the kernel always runs kBlocks blocks, and element i is always handled by
// the same block, so block b of every rank exchanges the same elements each call. Each
// block counts its calls (the same count on every rank) and flags the peers with it;
// receive buffers alternate by the count's parity. A rank in call k has seen every peer's
// flag of call k - 1, so every peer has finished reading call k - 2's buffers, the ones
// call k writes again. The calls of a communicator are ordered on the device (the backend
// queues one after another, as NCCL also needs).
#pragma once

#include <cuda_runtime_api.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backends/cuda/device.hpp"
#include "backends/cuda/nvrtc.hpp"
#include "luminal/dtype.hpp"

namespace luminal::cudagen {

class PeerAllReduce {
 public:
  /// Every rank's `mine`, in rank order; a collective call every rank makes.
  using Gather = std::function<std::vector<std::string>(const std::string& mine)>;
  /// The most bytes a rank's values may take on this path (larger exchanges are
  /// bandwidth-bound, where NCCL's ring is the better way).
  static constexpr size_t kMostBytes = 512 * 1024;
  static constexpr int kMostRanks = 8;

  /// Every rank's receive memory mapped into every other's; a collective call. nullptr,
  /// with `why` set, on every rank where some rank cannot reach another's memory (no peer
  /// access between two of the GPUs, ranks sharing a process, more than kMostRanks).
  static std::unique_ptr<PeerAllReduce> connect(int rank, int size, int device,
                                                const Gather& gather, std::string* why);
  ~PeerAllReduce();
  PeerAllReduce(const PeerAllReduce&) = delete;
  PeerAllReduce& operator=(const PeerAllReduce&) = delete;

  /// Whether `count` values of `dtype` go this way; the same answer on every rank.
  bool takes(size_t count, DType dtype) const;
  /// `dst` (may be `src`) = the sum over the ranks of `src`, queued on `stream`.
  void run(const void* src, void* dst, size_t count, DType dtype, cudaStream_t stream) const;

 private:
  PeerAllReduce(int rank, int size) : rank_(rank), size_(size) {}
  int rank_, size_;
  DeviceBuffer exchange_;      // flags, then the receive buffers; peers write here
  DeviceBuffer calls_;         // each block's count of calls (this rank's alone)
  std::vector<void*> peers_;   // by rank: its exchange memory mapped here (own: ours)
  std::vector<void*> opened_;  // the mappings to close
  std::unique_ptr<Module> module_;
};

/// The kernels' CUDA source (CI compiles it for sm_90).
std::string peer_all_reduce_source();

}  // namespace luminal::cudagen

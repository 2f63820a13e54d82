// Collectives: the ranks of a parallel run (one process or thread each, usually one GPU
// each) exchanging values inside their graphs. A graph node sums a value over the ranks
// (all_reduce) or gathers every rank's (all_gather); a Communicator says how the ranks
// reach each other: local_group for threads of this process (tests, CPU runs),
// nccl_communicator (cuda.hpp) for GPUs.
#pragma once

#include <chrono>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "luminal/buffer.hpp"
#include "luminal/custom_op.hpp"
#include "luminal/tensor.hpp"

namespace luminal {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  /// What carries the exchanges, for logs and tests ("NCCL; all-reduces of at most 512 KB
  /// over peer memory").
  virtual std::string transport() const { return "threads of one process"; }
  /// Replaces `data` (host memory, the same dtype and length on every rank) by its sum over
  /// the ranks; every rank gets the same values. Blocks until all ranks have called it.
  virtual void all_reduce(Buffer& data) = 0;
  /// `all` (host memory, `size()` times `mine`'s length and of its dtype) becomes every
  /// rank's `mine` in rank order. Blocks until all ranks have called it.
  virtual void all_gather(const Buffer& mine, Buffer& all) = 0;
  /// Whether the collectives below take `dtype` in GPU memory (false: the caller goes
  /// through the host).
  virtual bool on_device(DType dtype) const {
    (void)dtype;
    return false;
  }
  /// all_reduce over `count` elements at `src` in GPU memory, written to `dst` (may equal
  /// `src`), queued on `stream` (a cudaStream_t). Only where on_device(dtype).
  virtual void all_reduce_on_device(const void* src, void* dst, size_t count, DType dtype,
                                    void* stream);
  /// all_gather of `count` elements a rank from `src` into `dst` (size() * count), in GPU
  /// memory, queued on `stream`. Only where on_device(dtype).
  virtual void all_gather_on_device(const void* src, void* dst, size_t count, DType dtype,
                                    void* stream);
  /// One part of an exchange over several buffers in GPU memory.
  struct DevicePart {
    const void* src;
    void* dst;
    size_t count;
  };
  /// all_reduce_on_device of every part, as one exchange where the communicator can (NCCL
  /// queues them as one group: one launch, not one a part). Only where on_device(dtype).
  virtual void all_reduce_parts_on_device(std::span<const DevicePart> parts, DType dtype,
                                          void* stream);
};

/// `size` ranks in this process, one Communicator each, for threads to share: sums are
/// taken in rank order in double precision, so every rank sees the same bits. A rank
/// that waits longer than `timeout` for the others, or whose peer's Communicator is
/// destroyed while it waits, raises luminal::Error instead of hanging.
std::vector<std::shared_ptr<Communicator>> local_group(
    int size, std::chrono::milliseconds timeout = std::chrono::minutes(5));

/// A graph node exchanging values among the ranks of a Communicator; the reference
/// semantics go through the communicator on the host, a GPU backend through its
/// *_on_device collectives.
class CollectiveOp : public CustomOp {
 public:
  Communicator& communicator() const { return *comm_; }
  const std::shared_ptr<Communicator>& communicator_ptr() const { return comm_; }

 protected:
  explicit CollectiveOp(std::shared_ptr<Communicator> comm) : comm_(std::move(comm)) {}
  std::shared_ptr<Communicator> comm_;
};

/// Sums its input over the ranks.
class AllReduceOp final : public CollectiveOp {
 public:
  explicit AllReduceOp(std::shared_ptr<Communicator> comm) : CollectiveOp(std::move(comm)) {}
  std::string name() const override { return "AllReduce"; }
  Buffer run(const std::vector<Buffer>& inputs, const std::vector<std::vector<int64_t>>& shapes,
             const std::vector<int64_t>& out_shape, DType out_dtype) const override;
};

/// Every rank's input, stacked in rank order: [ranks, input shape...].
class AllGatherOp final : public CollectiveOp {
 public:
  explicit AllGatherOp(std::shared_ptr<Communicator> comm) : CollectiveOp(std::move(comm)) {}
  std::string name() const override { return "AllGather"; }
  Buffer run(const std::vector<Buffer>& inputs, const std::vector<std::vector<int64_t>>& shapes,
             const std::vector<int64_t>& out_shape, DType out_dtype) const override;
};

/// Several values summed over the ranks in one exchange (a bucket of gradients): one 1-D
/// output, each input's sums flattened in turn. The inputs share a dtype.
class BucketAllReduceOp final : public CollectiveOp {
 public:
  explicit BucketAllReduceOp(std::shared_ptr<Communicator> comm) : CollectiveOp(std::move(comm)) {}
  std::string name() const override { return "BucketAllReduce"; }
  Buffer run(const std::vector<Buffer>& inputs, const std::vector<std::vector<int64_t>>& shapes,
             const std::vector<int64_t>& out_shape, DType out_dtype) const override;
};

/// `x` summed over the ranks of `comm` (every rank's graph calls it at the same point).
Tensor all_reduce(const Tensor& x, const std::shared_ptr<Communicator>& comm);
/// Every rank's `x` (each of the same shape), stacked in rank order: [ranks, x's shape...].
Tensor all_gather(const Tensor& x, const std::shared_ptr<Communicator>& comm);
/// `parts` (one dtype, one graph) summed over the ranks of `comm` in one exchange: a 1-D
/// tensor holding each part's sums, flattened, one part after another.
Tensor all_reduce_flat(const std::vector<Tensor>& parts, const std::shared_ptr<Communicator>& comm);

}  // namespace luminal

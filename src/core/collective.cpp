// Collectives: the all-reduce and all-gather graph nodes, and the in-process group of ranks.
#include "luminal/collective.hpp"

#include <condition_variable>
#include <cstring>
#include <mutex>

#include "luminal/error.hpp"
#include "luminal/graph.hpp"

namespace luminal {
namespace {

// What the ranks of a local group share: each collective is one generation; the last rank
// to arrive does it for all (every rank's buffers are alive while it waits) and starts
// the next.
enum class Collective { Sum, Gather };

struct Slot {
  Collective kind = Collective::Sum;
  const Buffer* in = nullptr;
  Buffer* out = nullptr;  // the sum: `in` itself
};

struct Group {
  std::mutex m;
  std::condition_variable cv;
  int size = 0;
  std::chrono::milliseconds timeout{};
  std::vector<Slot> slots;
  int arrived = 0;
  uint64_t generation = 0;
  std::string error;    // of the last generation, for every rank to raise
  bool broken = false;  // a rank left or gave up: no collective can complete any more
};

const char* name_of(Collective c) {
  return c == Collective::Sum ? "all_reduce" : "all_gather";
}

// Every rank's buffer is its dtype and length as rank 0's, or what differs.
std::string mismatch(const std::vector<Slot>& slots) {
  const Slot& first = slots[0];
  for (size_t r = 1; r < slots.size(); ++r) {
    const Buffer &a = *first.in, &b = *slots[r].in;
    if (slots[r].kind != first.kind)
      return "rank " + std::to_string(r) + " called " + name_of(slots[r].kind) + ", rank 0 " +
             name_of(first.kind);
    if (b.dtype() != a.dtype() || b.numel() != a.numel())
      return "rank " + std::to_string(r) + " gave " + std::to_string(b.numel()) + " " +
             std::string(dtype_name(b.dtype())) + " values, rank 0 " + std::to_string(a.numel()) +
             " " + std::string(dtype_name(a.dtype()));
  }
  return "";
}

// Sums in rank order in double precision: every rank gets the same bits.
void sum_in_place(const std::vector<Slot>& slots) {
  for (size_t i = 0; i < slots[0].in->numel(); ++i) {
    double sum = 0;
    for (const Slot& s : slots) sum += s.in->get_f64(i);
    for (const Slot& s : slots) s.out->set_f64(i, sum);
  }
}

std::string gather(const std::vector<Slot>& slots) {
  const size_t part = slots[0].in->bytes();
  for (const Slot& s : slots)
    if (s.out->dtype() != s.in->dtype() || s.out->bytes() != part * slots.size())
      return "an all_gather output is not " + std::to_string(slots.size()) +
             " times its input's length";
  for (const Slot& s : slots)
    for (size_t r = 0; r < slots.size(); ++r)
      std::memcpy(static_cast<std::byte*>(s.out->data()) + r * part, slots[r].in->data(), part);
  return "";
}

class LocalRank final : public Communicator {
 public:
  LocalRank(std::shared_ptr<Group> group, int rank) : group_(std::move(group)), rank_(rank) {}
  // A rank that leaves while others wait for it would leave them waiting forever.
  ~LocalRank() override {
    std::lock_guard lock(group_->m);
    group_->broken = true;
    group_->cv.notify_all();
  }
  int rank() const override { return rank_; }
  int size() const override { return group_->size; }
  void all_reduce(Buffer& data) override { exchange({Collective::Sum, &data, &data}); }
  void all_gather(const Buffer& mine, Buffer& all) override {
    exchange({Collective::Gather, &mine, &all});
  }

 private:
  void exchange(const Slot& mine) {
    Group& g = *group_;
    std::unique_lock lock(g.m);
    const std::string who = std::string(name_of(mine.kind)) + " on rank " + std::to_string(rank_) +
                            " of " + std::to_string(g.size) + ": ";
    LUM_CHECK(!g.broken) << who << "another rank has left the group";
    const uint64_t generation = g.generation;
    g.slots[static_cast<size_t>(rank_)] = mine;
    if (++g.arrived == g.size) {
      g.error = mismatch(g.slots);
      if (g.error.empty() && mine.kind == Collective::Sum) sum_in_place(g.slots);
      if (g.error.empty() && mine.kind == Collective::Gather) g.error = gather(g.slots);
      g.arrived = 0;
      ++g.generation;
      g.cv.notify_all();
    } else if (!g.cv.wait_for(lock, g.timeout,
                              [&] { return g.generation != generation || g.broken; })) {
      g.broken = true;
      g.cv.notify_all();
      LUM_FAIL() << who << "the other ranks did not arrive within " << g.timeout.count() << " ms";
    }
    LUM_CHECK(g.generation != generation) << who << "another rank left the group while it waited";
    LUM_CHECK(g.error.empty()) << who << g.error;
  }

  std::shared_ptr<Group> group_;
  int rank_;
};

}  // namespace

void Communicator::all_reduce_on_device(const void*, void*, size_t, DType dtype, void*) {
  LUM_FAIL() << "all_reduce: this communicator cannot sum " << dtype_name(dtype)
             << " values in GPU memory";
}

void Communicator::all_gather_on_device(const void*, void*, size_t, DType dtype, void*) {
  LUM_FAIL() << "all_gather: this communicator cannot gather " << dtype_name(dtype)
             << " values in GPU memory";
}

void Communicator::all_reduce_parts_on_device(std::span<const DevicePart> parts, DType dtype,
                                              void* stream) {
  for (const DevicePart& p : parts) all_reduce_on_device(p.src, p.dst, p.count, dtype, stream);
}

std::vector<std::shared_ptr<Communicator>> local_group(int size,
                                                       std::chrono::milliseconds timeout) {
  LUM_CHECK(size >= 1) << "local_group: " << size << " ranks";
  auto group = std::make_shared<Group>();
  group->size = size;
  group->timeout = timeout;
  group->slots.resize(static_cast<size_t>(size));
  std::vector<std::shared_ptr<Communicator>> ranks;
  for (int r = 0; r < size; ++r) ranks.push_back(std::make_shared<LocalRank>(group, r));
  return ranks;
}

Buffer AllReduceOp::run(const std::vector<Buffer>& inputs, const std::vector<std::vector<int64_t>>&,
                        const std::vector<int64_t>&, DType out_dtype) const {
  LUM_CHECK(inputs.size() == 1 && inputs[0].dtype() == out_dtype)
      << "AllReduce: expects one input of its output's dtype";
  Buffer out = inputs[0];
  comm_->all_reduce(out);
  return out;
}

Buffer AllGatherOp::run(const std::vector<Buffer>& inputs, const std::vector<std::vector<int64_t>>&,
                        const std::vector<int64_t>&, DType out_dtype) const {
  LUM_CHECK(inputs.size() == 1 && inputs[0].dtype() == out_dtype)
      << "AllGather: expects one input of its output's dtype";
  Buffer out(out_dtype, inputs[0].numel() * static_cast<size_t>(comm_->size()),
             Buffer::Uninitialized{});
  comm_->all_gather(inputs[0], out);
  return out;
}

Buffer BucketAllReduceOp::run(const std::vector<Buffer>& inputs,
                              const std::vector<std::vector<int64_t>>&,
                              const std::vector<int64_t>& out_shape, DType out_dtype) const {
  Buffer out(out_dtype, static_cast<size_t>(out_shape.at(0)), Buffer::Uninitialized{});
  size_t at = 0;
  for (const Buffer& in : inputs) {
    LUM_CHECK(in.dtype() == out_dtype && at + in.bytes() <= out.bytes())
        << "BucketAllReduce: an input does not fit its output";
    std::memcpy(static_cast<std::byte*>(out.data()) + at, in.data(), in.bytes());
    at += in.bytes();
  }
  LUM_CHECK(at == out.bytes()) << "BucketAllReduce: the inputs do not fill its output";
  comm_->all_reduce(out);
  return out;
}

namespace {

Tensor collective_node(const std::vector<Tensor>& xs, std::shared_ptr<const CustomOp> op,
                       std::vector<Expr> shape) {
  Node n;
  n.op = Op::Custom;
  n.custom = std::move(op);
  n.dtype = xs.at(0).dtype();
  n.shape = std::move(shape);
  for (const Tensor& x : xs) n.inputs.push_back(Edge{x.id(), x.view()});
  Graph& g = xs[0].graph();
  return g.tensor_of(g.add_node(std::move(n)));
}

}  // namespace

Tensor all_reduce(const Tensor& x, const std::shared_ptr<Communicator>& comm) {
  LUM_CHECK(comm) << "all_reduce: no communicator";
  return collective_node({x}, std::make_shared<AllReduceOp>(comm), x.shape());
}

Tensor all_gather(const Tensor& x, const std::shared_ptr<Communicator>& comm) {
  LUM_CHECK(comm) << "all_gather: no communicator";
  std::vector<Expr> shape = x.shape();
  shape.insert(shape.begin(), Expr(comm->size()));
  return collective_node({x}, std::make_shared<AllGatherOp>(comm), std::move(shape));
}

Tensor all_reduce_flat(const std::vector<Tensor>& parts,
                       const std::shared_ptr<Communicator>& comm) {
  LUM_CHECK(comm) << "all_reduce_flat: no communicator";
  LUM_CHECK(!parts.empty()) << "all_reduce_flat: no tensors";
  Expr total = 0;
  for (const Tensor& p : parts) {
    LUM_CHECK(&p.graph() == &parts[0].graph() && p.dtype() == parts[0].dtype())
        << "all_reduce_flat: the parts must share a graph and a dtype (" << dtype_name(p.dtype())
        << " after " << dtype_name(parts[0].dtype()) << ")";
    total = total + p.numel();
  }
  return collective_node(parts, std::make_shared<BucketAllReduceOp>(comm), {total});
}

}  // namespace luminal

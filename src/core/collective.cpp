// Collectives: the all-reduce graph node and the in-process group of ranks.
#include "luminal/collective.hpp"

#include <condition_variable>
#include <mutex>

#include "luminal/error.hpp"
#include "luminal/graph.hpp"

namespace luminal {
namespace {

// What the ranks of a local group share: each all-reduce is one generation; the last rank
// to arrive sums every rank's buffer in place and starts the next.
struct Group {
  std::mutex m;
  std::condition_variable cv;
  int size = 0;
  std::chrono::milliseconds timeout{};
  std::vector<Buffer*> arrived_data;
  int arrived = 0;
  uint64_t generation = 0;
  std::string error;    // of the last generation, for every rank to raise
  bool broken = false;  // a rank left or gave up: no sum can complete any more
};

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

  void all_reduce(Buffer& data) override {
    Group& g = *group_;
    std::unique_lock lock(g.m);
    const std::string who =
        "all_reduce on rank " + std::to_string(rank_) + " of " + std::to_string(g.size) + ": ";
    LUM_CHECK(!g.broken) << who << "another rank has left the group";
    const uint64_t generation = g.generation;
    g.arrived_data[static_cast<size_t>(rank_)] = &data;
    if (++g.arrived == g.size) {
      g.error = sum_in_place(g.arrived_data);
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

 private:
  // Sums in rank order in double precision: every rank gets the same bits. Returns what
  // is wrong where the ranks' buffers differ in dtype or length.
  static std::string sum_in_place(const std::vector<Buffer*>& data) {
    const Buffer& first = *data[0];
    for (size_t r = 1; r < data.size(); ++r)
      if (data[r]->dtype() != first.dtype() || data[r]->numel() != first.numel())
        return "rank " + std::to_string(r) + " gave " + std::to_string(data[r]->numel()) + " " +
               std::string(dtype_name(data[r]->dtype())) + " values, rank 0 " +
               std::to_string(first.numel()) + " " + std::string(dtype_name(first.dtype()));
    for (size_t i = 0; i < first.numel(); ++i) {
      double sum = 0;
      for (const Buffer* b : data) sum += b->get_f64(i);
      for (Buffer* b : data) b->set_f64(i, sum);
    }
    return "";
  }

  std::shared_ptr<Group> group_;
  int rank_;
};

}  // namespace

void Communicator::all_reduce_on_device(const void*, void*, size_t, DType dtype, void*) {
  LUM_FAIL() << "all_reduce: this communicator cannot sum " << dtype_name(dtype)
             << " values in GPU memory";
}

std::vector<std::shared_ptr<Communicator>> local_group(int size,
                                                       std::chrono::milliseconds timeout) {
  LUM_CHECK(size >= 1) << "local_group: " << size << " ranks";
  auto group = std::make_shared<Group>();
  group->size = size;
  group->timeout = timeout;
  group->arrived_data.resize(static_cast<size_t>(size));
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

Tensor all_reduce(const Tensor& x, const std::shared_ptr<Communicator>& comm) {
  LUM_CHECK(comm) << "all_reduce: no communicator";
  Node n;
  n.op = Op::Custom;
  n.custom = std::make_shared<AllReduceOp>(comm);
  n.dtype = x.dtype();
  n.shape = x.shape();
  n.inputs = {Edge{x.id(), x.view()}};
  Graph& g = x.graph();
  return g.tensor_of(g.add_node(std::move(n)));
}

}  // namespace luminal

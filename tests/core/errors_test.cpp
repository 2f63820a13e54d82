// Every kind of user error raises luminal::Error naming the op, the shapes or the axis.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>

#include "luminal/luminal.hpp"
#include "testing/expect_error.hpp"

namespace luminal {
namespace {

using testing::expect_error;

TEST(Errors, ShapeMismatch) {
  Graph cx;
  Tensor a = cx.tensor({2, 3}), b = cx.tensor({4, 3});
  expect_error([&] { a + b; }, {"Add", "[2, 3]", "[4, 3]"});
  expect_error([&] { a.reshape({5}); }, {"reshape", "[2, 3]", "[5]"});
  Tensor idx = cx.tensor({4}, DType::I32), src = cx.tensor({3});
  expect_error([&] { a.scatter(idx, src); }, {"Scatter", "[4]", "[3]"});
}

TEST(Errors, AxisOutOfRange) {
  Graph cx;
  Tensor a = cx.tensor({2, 3});
  expect_error([&] { a.sum_reduce(2); }, {"SumReduce", "axis 2", "rank 2"});
  expect_error([&] { a.max_reduce(-3); }, {"MaxReduce", "axis -3"});
  expect_error([&] { a.permute({0, 5}); }, {"permute", "axis 5"});
  expect_error([&] { a.slice(3, 0, 1); }, {"slice", "axis 3"});
  expect_error([&] { a.slice(1, 1, 7); }, {"slice", "exceeds dimension 1", "size 3"});
}

TEST(Errors, UnboundDim) {
  Graph cx;
  Tensor a = cx.named_tensor("x", {"seq", 2});
  Tensor b = (a * 2.0).retrieve();
  cx.compile(reference());
  a.set(std::vector<float>{1, 2, 3, 4});
  expect_error([&] { cx.execute(); }, {"unbound", "'seq'", "set_dim"});
  cx.set_dim("seq", 2);
  EXPECT_NO_THROW(cx.execute());
  EXPECT_EQ(b.to_f32(), (std::vector<float>{2, 4, 6, 8}));
}

TEST(Errors, DtypeMismatch) {
  Graph cx;
  Tensor a = cx.tensor({2}, DType::F32), b = cx.tensor({2}, DType::I32);
  expect_error([&] { a + b; }, {"Add", "dtype mismatch", "f32", "i32"});
  expect_error([&] { b.log2(); }, {"Log2", "floating-point", "i32"});
  expect_error([&] { a.gather(a); }, {"Gather", "indices", "f32"});
  Tensor flag = less_than(a, a);
  expect_error([&] { flag.sum_reduce(0); }, {"SumReduce", "bool"});
  expect_error([&] { flag % flag; }, {"Mod", "bool"});
}

TEST(Errors, MisuseOfGraphAndData) {
  Graph cx, other;
  Tensor a = cx.named_tensor("a", {2}), b = other.tensor({2});
  expect_error([&] { a + b; }, {"Add", "different graphs"});
  expect_error([&] { (a * 2.0).set(std::vector<float>{1, 2}); }, {"set", "not an input"});
  expect_error([&] { a.permute({0}).flip(0).set(std::vector<float>{1, 2}); }, {"set", "view"});
  Tensor out = (a * 3.0).retrieve();
  expect_error([&] { cx.execute(); }, {"not compiled"});
  expect_error([&] { cx.time_device_alone(true); }, {"time_device_alone", "not compiled"});
  cx.compile(reference());
  expect_error([&] { cx.execute(); }, {"input 'a'", "no data"});
  a.set(std::vector<float>{1, 2, 3});
  expect_error([&] { cx.execute(); }, {"input 'a'", "needs 2 elements", "got 3"});
  expect_error([&] { out.to_f32(); }, {"no value"});
  cx.tensor({1});
  expect_error([&] { cx.execute(); }, {"added after compile"});
}

// Stands in for a GPU's memory where there is none: the bytes live on the host.
class HostBackedStorage final : public DeviceStorage {
 public:
  explicit HostBackedStorage(Buffer b) : b_(std::move(b)) {}
  void* data() const override { return const_cast<void*>(b_.data()); }
  size_t capacity() const override { return b_.bytes(); }
  int device() const override { return 3; }
  void copy_to_host(void* dst, size_t bytes) const override { std::memcpy(dst, b_.data(), bytes); }

 private:
  Buffer b_;
};

// Data on a GPU given to a host backend is refused by name; read back through a tensor,
// it is copied to the host.
TEST(Errors, DataOnAGpuForAHostBackend) {
  Graph cx;
  Tensor x = cx.named_tensor("x", {3});
  (x + 1.0).retrieve();
  const std::vector<float> values = {1, 2, 3};
  x.set_device(
      DeviceData(std::make_shared<HostBackedStorage>(Buffer::from(values)), DType::F32, 3));
  EXPECT_EQ(x.to_f32(), values);
  cx.compile(reference());
  expect_error([&] { cx.execute(); }, {"input 'x'", "lives on GPU 3", "host data"});
  cx.compile(cpu());
  expect_error([&] { cx.execute(); }, {"input 'x'", "lives on GPU 3", "host data"});
  expect_error([&] { (x + 1.0).set_device(*x.device_data()); }, {"set_device", "not an input"});
  expect_error(
      [&] { DeviceData(std::make_shared<HostBackedStorage>(Buffer::from(values)), DType::F32, 4); },
      {"does not fit its storage of 12 bytes"});
}

// Memory on a GPU given for an output to be written into is refused by a host backend,
// naming the output; an input, or a view that reads its value in another order, cannot
// be given it at all.
TEST(Errors, OutputMemoryOnAGpuForAHostBackend) {
  const auto memory = [](size_t n) {
    return DeviceData(std::make_shared<HostBackedStorage>(Buffer(DType::F32, n)), DType::F32, n);
  };
  Graph cx;
  Tensor x = cx.named_tensor("x", {2, 3});
  Tensor y = (x + 1.0).retrieve();
  x.set(std::vector<float>(6, 1.0f));
  const auto refused = [&](const Backend& backend) {
    cx.compile(backend);
    y.write_into(memory(6));
    expect_error([&] { cx.execute(); }, {"output %", "write_into", "host memory"});
    expect_error([&] { cx.execute_queued(); }, {"output %", "write_into", "host memory"});
  };
  refused(reference());
  refused(cpu());
  expect_error([&] { x.write_into(memory(6)); }, {"write_into", "'x' is an input"});
  expect_error([&] { (x * 2.0).write_into(memory(6)); },
               {"write_into", "not an output when the graph was compiled"});
  expect_error([&] { y.permute({1, 0}).write_into(memory(6)); }, {"write_into", "contiguous()"});
}

TEST(Errors, OutOfRangeIndices) {
  Graph cx;
  Tensor table = cx.named_tensor("t", {3});
  Tensor idx = cx.named_tensor("i", {2}, DType::I32);
  Tensor g = table.gather(idx).retrieve();
  cx.compile(reference());
  table.set(std::vector<float>{1, 2, 3});
  idx.set(std::vector<int32_t>{0, 3});
  expect_error([&] { cx.execute(); }, {"Gather", "index 3", "out of range", "3 elements"});
  idx.set(std::vector<int32_t>{2, 0});
  cx.execute();
  EXPECT_EQ(g.to_f32(), (std::vector<float>{3, 1}));
}

TEST(Errors, InternalErrorsAreDistinct) {
  EXPECT_THROW(([] { LUM_ASSERT(1 + 1 == 3) << "math"; })(), InternalError);
  EXPECT_THROW(([] { LUM_CHECK(false) << "user"; })(), Error);
}

}  // namespace
}  // namespace luminal

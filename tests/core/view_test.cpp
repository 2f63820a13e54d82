// Views: movement ops checked against a dense reference that moves real data, plus
// the index/valid expressions, symbolic shapes and reshape-needs-copy cases.
#include <gtest/gtest.h>

#include <numeric>
#include <random>

#include "luminal/buffer.hpp"
#include "luminal/error.hpp"
#include "luminal/view.hpp"

namespace luminal {
namespace {

// A dense row-major array with straightforward movement ops: the independent model.
struct Dense {
  std::vector<int64_t> shape;
  std::vector<double> data;

  static std::vector<int64_t> unravel(int64_t flat, const std::vector<int64_t>& shape) {
    std::vector<int64_t> idx(shape.size());
    for (size_t d = shape.size(); d-- > 0;) {
      idx[d] = flat % shape[d];
      flat /= shape[d];
    }
    return idx;
  }
  static int64_t ravel(const std::vector<int64_t>& idx, const std::vector<int64_t>& shape) {
    int64_t f = 0;
    for (size_t d = 0; d < shape.size(); ++d) f = f * shape[d] + idx[d];
    return f;
  }
  int64_t numel() const {
    return std::accumulate(shape.begin(), shape.end(), int64_t{1}, std::multiplies<>());
  }
  // Builds a new array from a function of the new multi-index.
  template <class F>
  Dense remap(std::vector<int64_t> new_shape, F value_at) const {
    Dense out{std::move(new_shape), {}};
    out.data.resize(static_cast<size_t>(out.numel()));
    for (int64_t k = 0; k < out.numel(); ++k) out.data[k] = value_at(unravel(k, out.shape));
    return out;
  }
  double at(const std::vector<int64_t>& idx) const { return data[ravel(idx, shape)]; }

  Dense permute(const std::vector<int>& axes) const {
    std::vector<int64_t> s;
    for (int a : axes) s.push_back(shape[a]);
    return remap(s, [&](const std::vector<int64_t>& i) {
      std::vector<int64_t> src(shape.size());
      for (size_t d = 0; d < axes.size(); ++d) src[axes[d]] = i[d];
      return at(src);
    });
  }
  Dense slice(int axis, int64_t start, int64_t end) const {
    auto s = shape;
    s[axis] = end - start;
    return remap(s, [&](std::vector<int64_t> i) {
      i[axis] += start;
      return at(i);
    });
  }
  Dense pad(int axis, int64_t before, int64_t after) const {
    auto s = shape;
    s[axis] += before + after;
    return remap(s, [&](std::vector<int64_t> i) {
      i[axis] -= before;
      return (i[axis] < 0 || i[axis] >= shape[axis]) ? 0.0 : at(i);
    });
  }
  Dense flip(int axis) const {
    return remap(shape, [&](std::vector<int64_t> i) {
      i[axis] = shape[axis] - 1 - i[axis];
      return at(i);
    });
  }
  Dense expand(int axis, int64_t n) const {
    auto s = shape;
    s.insert(s.begin() + axis, n);
    return remap(s, [&](std::vector<int64_t> i) {
      i.erase(i.begin() + axis);
      return at(i);
    });
  }
  Dense reshape(std::vector<int64_t> s) const { return Dense{std::move(s), data}; }
};

std::vector<Expr> exprs(const std::vector<int64_t>& v) {
  return {v.begin(), v.end()};
}

// Reads through the view three ways (read_view, index/valid expressions) and compares.
void expect_matches(const Buffer& phys, const View& v, const Dense& want) {
  ASSERT_EQ(v.shape(), exprs(want.shape)) << v.to_string();
  const ConcreteView c = v.resolve(Bindings{});
  const std::vector<double> got = read_view(phys, c).to_f64();
  ASSERT_EQ(got, want.data) << v.to_string();
  const Expr flat = Expr::var("flat", 0, std::max<int64_t>(want.numel() - 1, 0));
  const Expr index = v.index(flat), valid = v.valid(flat);
  for (int64_t k = 0; k < want.numel(); ++k) {
    Bindings b{{"flat", k}};
    const double value = valid.eval(b) ? phys.get_f64(static_cast<size_t>(index.eval(b))) : 0.0;
    ASSERT_EQ(value, want.data[k]) << "flat " << k << " of " << v.to_string();
  }
}

TEST(View, Contiguous) {
  View v = View::contiguous({2, 3, 4});
  EXPECT_EQ(v.strides(), (std::vector<Expr>{12, 4, 1}));
  EXPECT_TRUE(v.is_contiguous());
  EXPECT_EQ(v.numel(), Expr(24));
  View s = View::contiguous({"s", 8});
  EXPECT_EQ(s.strides()[0], Expr(8));
  EXPECT_EQ(s.numel(), Expr("s") * 8);
  // A dim of size 1 reads one element whatever its stride (an unsqueeze's is 0); a
  // broadcast, an offset or padding is not a plain copy.
  EXPECT_TRUE(View::contiguous({2, 4}).expand_dim(1, 1).is_contiguous());
  EXPECT_FALSE(View::contiguous({2, 4}).expand_dim(1, 3).is_contiguous());
  EXPECT_FALSE(View::contiguous({2, 4}).slice(1, 1, 4).is_contiguous());
  EXPECT_FALSE(View::contiguous({2, 4}).pad(1, 0, 1).is_contiguous());
}

TEST(View, PermuteIndexExpression) {
  View v = View::contiguous({2, 3, 4}).permute({2, 0, 1});
  EXPECT_EQ(v.shape(), (std::vector<Expr>{4, 2, 3}));
  EXPECT_EQ(v.index({Expr("i"), Expr("j"), Expr("k")}), Expr("i") + Expr("j") * 12 + Expr("k") * 4);
  EXPECT_FALSE(v.is_contiguous());
}

TEST(View, RandomMovementSequencesMatchDenseModel) {
  std::mt19937 rng(5);
  auto pick = [&](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  int reshapes_without_copy = 0, copies = 0;
  for (int trial = 0; trial < 400; ++trial) {
    std::vector<int64_t> shape;
    for (int64_t r = pick(1, 4); r > 0; --r) shape.push_back(pick(1, 4));
    Dense dense{shape, {}};
    dense.data.resize(static_cast<size_t>(dense.numel()));
    std::iota(dense.data.begin(), dense.data.end(), 1.0);
    Buffer phys = Buffer::from_doubles(dense.data, DType::F64);
    View v = View::contiguous(exprs(shape));
    for (int step = 0; step < 6; ++step) {
      const int rank = static_cast<int>(dense.shape.size());
      const int axis = static_cast<int>(pick(0, rank - 1));
      switch (pick(0, 5)) {
        case 0: {
          std::vector<int> axes(rank);
          std::iota(axes.begin(), axes.end(), 0);
          std::shuffle(axes.begin(), axes.end(), rng);
          v = v.permute(axes);
          dense = dense.permute(axes);
          break;
        }
        case 1: {
          const int64_t n = dense.shape[axis];
          const int64_t s = pick(0, n), e = pick(s, n);
          v = v.slice(axis, s, e);
          dense = dense.slice(axis, s, e);
          break;
        }
        case 2: {
          const int64_t b = pick(0, 2), a = pick(0, 2);
          v = v.pad(axis, b, a);
          dense = dense.pad(axis, b, a);
          break;
        }
        case 3:
          v = v.flip(axis);
          dense = dense.flip(axis);
          break;
        case 4: {
          if (rank >= 6) break;
          const int at = static_cast<int>(pick(0, rank));
          const int64_t n = pick(1, 3);
          v = v.expand_dim(at, n);
          dense = dense.expand(at, n);
          break;
        }
        default: {
          // Reshape to a random factorisation of the element count.
          int64_t n = dense.numel();
          std::vector<int64_t> s;
          for (int64_t f = 2; f <= n && s.size() < 4;) {
            if (n % f == 0 && pick(0, 1)) {
              s.push_back(f);
              n /= f;
            } else {
              ++f;
            }
          }
          s.push_back(n);
          if (auto r = v.reshape(exprs(s))) {
            v = *r;
            ++reshapes_without_copy;
          } else {  // what Tensor::reshape does: copy, then reshape the fresh layout
            phys = read_view(phys, v.resolve(Bindings{}));
            v = View::contiguous(v.shape()).reshape(exprs(s)).value();
            ++copies;
          }
          dense = dense.reshape(s);
        }
      }
      expect_matches(phys, v, dense);
      if (testing::Test::HasFatalFailure()) return;
    }
  }
  EXPECT_GT(reshapes_without_copy, 50);
  EXPECT_GT(copies, 10);
}

TEST(View, ReshapeMergesAndSplitsWithoutCopy) {
  View v = View::contiguous({2, 3, 4});
  auto merged = v.reshape({6, 4});
  ASSERT_TRUE(merged);
  EXPECT_EQ(merged->strides(), (std::vector<Expr>{4, 1}));
  // A permuted view can still split a dimension.
  View p = v.permute({2, 0, 1});  // [4, 2, 3] strides [1, 12, 4]
  auto split = p.reshape({2, 2, 2, 3});
  ASSERT_TRUE(split);
  EXPECT_EQ(split->strides(), (std::vector<Expr>{2, 1, 12, 4}));
  // ...but merging dims that are not one strided run needs a copy.
  EXPECT_FALSE(p.reshape({8, 3}));
  EXPECT_FALSE(v.slice(2, 0, 3).reshape({18}));
  EXPECT_TRUE(v.slice(0, 0, 1).reshape({12}));
  // Broadcast dims merge with each other (stride 0) but not with real ones.
  View b = View::contiguous({3}).expand_dim(0, 4).expand_dim(0, 5);  // [5, 4, 3]
  EXPECT_TRUE(b.reshape({20, 3}));
  EXPECT_FALSE(b.reshape({5, 12}));
}

TEST(View, ReshapeKeepsPaddingOnUntouchedDims) {
  View v = View::contiguous({3, 4}).pad(1, 1, 1);  // [3, 6]
  auto r = v.reshape({3, 1, 6});
  ASSERT_TRUE(r);
  EXPECT_TRUE(r->is_masked(2));
  EXPECT_FALSE(v.reshape({18}));
}

TEST(View, ReshapeSeesOneCountWrittenTwoWays) {
  // A traced shape writes b*(p + q) multiplied out: the merge is the same run of memory.
  Expr b = "b", p = "p", q = "q";
  View v = View::contiguous({b, p + q, 32});
  auto merged = v.reshape({b * p + b * q, 32});
  ASSERT_TRUE(merged);
  EXPECT_EQ(merged->strides(), (std::vector<Expr>{32, 1}));
  const Bindings at{{"b", 2}, {"p", 3}, {"q", 4}};
  for (int64_t row = 0; row < 14; ++row)
    EXPECT_EQ(merged->index({Expr(row), Expr(5)}).eval(at), row * 32 + 5);
  EXPECT_THROW(v.reshape({b * p + q, 32}), Error);
}

TEST(View, SymbolicShapes) {
  Expr s = "s";
  View v = View::contiguous({s, 4});
  auto merged = v.reshape({s * 4});
  ASSERT_TRUE(merged);
  EXPECT_EQ(merged->strides()[0], Expr(1));
  auto split = merged->reshape({s, 2, 2});
  ASSERT_TRUE(split);
  EXPECT_EQ(split->strides(), (std::vector<Expr>{4, 2, 1}));
  auto swapped = View::contiguous({s, Expr("t")}).reshape({Expr("t"), s});
  ASSERT_TRUE(swapped);
  EXPECT_EQ(swapped->strides(), (std::vector<Expr>{s, 1}));
  // Slicing with a symbolic end and reading it back once bound.
  View sl = View::contiguous({s, 3}).slice(0, 1, s);
  EXPECT_EQ(sl.shape()[0], s - 1);
  ConcreteView c = sl.resolve(Bindings{{"s", 5}});
  EXPECT_EQ(c.dims, (std::vector<int64_t>{4, 3}));
  EXPECT_EQ(c.offset, 3);
  EXPECT_THROW(sl.resolve(Bindings{}), Error);
}

TEST(View, EightDimensions) {
  std::vector<Expr> shape{2, 1, 3, 1, 2, 2, 1, 3};
  View v = View::contiguous(shape).permute({7, 6, 5, 4, 3, 2, 1, 0}).pad(0, 1, 0).flip(2);
  EXPECT_EQ(v.rank(), 8u);
  Dense d{{2, 1, 3, 1, 2, 2, 1, 3}, {}};
  d.data.resize(72);
  std::iota(d.data.begin(), d.data.end(), 1.0);
  Buffer phys = Buffer::from_doubles(d.data, DType::F64);
  Dense want = d.permute({7, 6, 5, 4, 3, 2, 1, 0}).pad(0, 1, 0).flip(2);
  expect_matches(phys, v, want);
}

TEST(View, BroadcastRules) {
  View v = View::contiguous({3, 1});
  View b = v.broadcast_to({2, 3, 4});
  EXPECT_EQ(b.shape(), (std::vector<Expr>{2, 3, 4}));
  EXPECT_EQ(b.strides(), (std::vector<Expr>{0, 1, 0}));
  EXPECT_EQ(broadcast_shapes({3, 1}, {4}, "Add"), (std::vector<Expr>{3, 4}));
  EXPECT_EQ(broadcast_shapes({"s", 1}, {1, 5}, "Add"), (std::vector<Expr>{"s", 5}));
  EXPECT_THROW(v.broadcast_to({2, 4, 4}), Error);
  EXPECT_THROW(broadcast_shapes({3, 2}, {4, 2}, "Add"), Error);
}

TEST(View, BadArguments) {
  View v = View::contiguous({2, 3});
  EXPECT_THROW(v.permute({0}), Error);
  EXPECT_THROW(v.permute({0, 0}), Error);
  EXPECT_THROW(v.permute({0, 2}), Error);
  EXPECT_THROW(v.slice(1, 2, 4), Error);
  EXPECT_THROW(v.slice(1, 2, 1), Error);
  EXPECT_THROW(v.slice(2, 0, 1), Error);
  EXPECT_THROW(v.pad(0, -1, 0), Error);
  EXPECT_THROW(v.reshape({5}), Error);
  EXPECT_THROW(v.expand_dim(4, 2), Error);
  EXPECT_NO_THROW(v.slice(-1, 0, 1));  // negative axes count from the end
}

}  // namespace
}  // namespace luminal

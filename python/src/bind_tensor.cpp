// Tensor in Python (see bindings.hpp): PyTorch's names and broadcasting, NumPy in and out.
#include <cmath>
#include <cstdint>

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "bindings.hpp"
#include "luminal/error.hpp"
#include "luminal/graph.hpp"
#include "luminal/tensor.hpp"
#include "shapes.hpp"

namespace nb = nanobind;
using namespace nb::literals;

namespace luminal::python {
namespace {

// A Tensor made from another keeps it (and so its Graph) alive.
constexpr auto kKeep = nb::keep_alive<0, 1>();

std::vector<Expr> dims_from_args(const nb::args& args) {
  if (args.size() == 1 && !nb::isinstance<nb::int_>(args[0]) && !nb::isinstance<nb::str>(args[0]))
    return shape_of(args[0]);
  return shape_of(args);
}

std::vector<int> ints_from_args(const nb::args& args) {
  if (args.size() == 1 && !nb::isinstance<nb::int_>(args[0])) return axes_of(args[0]);
  return axes_of(args);
}

// The axes of a norm: the last one where `axis` is None.
std::vector<int> norm_axes(nb::handle axis) {
  return axis.is_none() ? std::vector<int>{-1} : axes_of(axis);
}

// The shape a tensor has with the graph's dims as bound now.
std::vector<int64_t> concrete_shape(const Tensor& t) {
  std::vector<int64_t> out;
  for (Expr d : t.shape()) out.push_back(d.eval(t.graph().dims()));
  return out;
}

}  // namespace

void bind_tensor(nb::module_& m) {
  nb::class_<Tensor> t(m, "Tensor",
                       "A lazy value of a Graph: ops on it add nodes; its data exists after "
                       "Graph.execute() for tensors marked with retrieve().");
  t.def_prop_ro(
       "shape",
       [](const Tensor& x) {
         nb::list out;
         for (Expr d : x.shape()) out.append(dim_value(d));
         return nb::tuple(out);
       },
       "The shape: ints, and symbolic dims as their names (or expressions).")
      .def_prop_ro("bound_shape", &concrete_shape,
                   "The shape with the graph's dims as bound now (Graph.set_dim): ints.")
      .def_prop_ro("dtype", &Tensor::dtype)
      .def_prop_ro("ndim", &Tensor::rank)
      .def_prop_ro(
          "node", [](const Tensor& x) { return x.id().value; },
          "The graph node whose value the tensor reads (views of one value share it).")
      .def(
          "set",
          [](Tensor& x, nb::ndarray<> a) -> Tensor& {
            if (a.device_type() == nb::device::cuda::value)
              return x.set_device(device_data_from_array(x, a, "set"));
            if (a.device_type() != nb::device::cpu::value)
              throw Error("set: arrays on this kind of device (DLPack device type " +
                          std::to_string(a.device_type()) + ") cannot be read");
            return x.set_buffer(buffer_from_array(x, a));
          },
          "array"_a, nb::rv_policy::reference,
          "Sets an input's data from an array of its shape: in host memory (NumPy, or any "
          "DLPack producer such as a CPU torch tensor, of any strides), copied and converted "
          "to its dtype; or in a GPU's memory (a contiguous CUDA torch tensor), of its dtype, "
          "read there without a copy while the array stays alive (the CUDA backend).")
      .def("keep_on_device", &Tensor::keep_on_device, nb::rv_policy::reference,
           "Marks an output to stay in the GPU's memory after execute() (read it with "
           "device_array()); on a host backend it is kept as retrieve() keeps it.")
      .def(
          "write_into",
          [](Tensor& x, nb::ndarray<> a) -> Tensor& {
            if (a.device_type() != nb::device::cuda::value)
              throw Error("write_into: the array is not in a GPU's memory (DLPack device type " +
                          std::to_string(a.device_type()) + ")");
            return x.write_into(device_data_from_array(x, a, "write_into"));
          },
          "array"_a, nb::rv_policy::reference,
          "Has the next execute() write this output into `array` (a CUDA torch tensor, of its "
          "shape and dtype, contiguous) instead of memory of luminal's: no copy. For one run; "
          "a run writing the same memory as the last is launched again as recorded. The CUDA "
          "backend only.")
      .def(
          "device_array",
          [](const Tensor& x) {
            const DeviceData* d = x.device_data();
            if (!d)
              throw Error(
                  "device_array: the tensor has no data on a GPU (mark it with "
                  "keep_on_device() and execute on the CUDA backend)");
            // The memory holds the node's elements in order; a strided view of them
            // (a transpose, a slice) would be read wrongly.
            if (!x.view().is_contiguous())
              throw Error(
                  "device_array: the tensor is a strided view of what lies on the "
                  "GPU; keep contiguous() of it on the device instead");
            return device_array(*d, concrete_shape(x));
          },
          "An output kept on the GPU after execute(), as a DLPack array over its memory "
          "(torch.from_dlpack reads it without a copy; the next execute() may overwrite it).")
      .def(
          "numpy", [](const Tensor& x) { return array_from_buffer(x.data(), concrete_shape(x)); },
          "The data of a retrieved tensor after execute(), as a NumPy array (bf16 as float32).")
      .def("retrieve", &Tensor::retrieve, nb::rv_policy::reference,
           "Marks the tensor as an output, kept after execute() for numpy().")
      .def("__repr__", [](const Tensor& x) {
        std::string s = "luminal.Tensor(shape=(";
        for (size_t i = 0; i < x.rank(); ++i) s += (i ? ", " : "") + x.shape()[i].to_string();
        return s + "), dtype=" + std::string(dtype_name(x.dtype())) + ")";
      });

  // Arithmetic with a tensor or a number on either side (PyTorch broadcasting).
#define LUM_PY_BINARY(name, rname, op)                                      \
  t.def(                                                                    \
      name, [](const Tensor& a, const Tensor& b) { return a op b; }, kKeep, \
      "a " #op " b (a tensor or a number), broadcast as in PyTorch.");      \
  t.def(                                                                    \
      name, [](const Tensor& a, double b) { return a op b; }, kKeep);       \
  t.def(                                                                    \
      rname, [](const Tensor& a, double b) { return b op a; }, kKeep);
  LUM_PY_BINARY("__add__", "__radd__", +)
  LUM_PY_BINARY("__sub__", "__rsub__", -)
  LUM_PY_BINARY("__mul__", "__rmul__", *)
  LUM_PY_BINARY("__truediv__", "__rtruediv__", /)
  LUM_PY_BINARY("__mod__", "__rmod__", %)
#undef LUM_PY_BINARY
  t.def(
      "__neg__", [](const Tensor& a) { return -a; }, kKeep);
  t.def("__matmul__", &Tensor::matmul, kKeep);
  t.def("__pow__", nb::overload_cast<double>(&Tensor::pow, nb::const_), kKeep);
#define LUM_PY_COMPARE(name, fn)                                                \
  t.def(                                                                        \
      name, [](const Tensor& a, const Tensor& b) { return fn(a, b); }, kKeep,   \
      "Elementwise " #fn " (against a tensor or a number), as a bool tensor."); \
  t.def(                                                                        \
      name, [](const Tensor& a, double b) { return fn(a, b); }, kKeep);
  LUM_PY_COMPARE("__lt__", lt)
  LUM_PY_COMPARE("__le__", le)
  LUM_PY_COMPARE("__gt__", gt)
  LUM_PY_COMPARE("__ge__", ge)
  LUM_PY_COMPARE("eq", eq)
  LUM_PY_COMPARE("ne", ne)
#undef LUM_PY_COMPARE
  // == and != elementwise as in NumPy and PyTorch, where a NaN equals nothing, itself
  // included (eq() above answers as if NaNs compared equal); so a tensor has no truth
  // value (`if x == y:` would test nothing) and hashes by identity.
  const auto ordered = [](const Tensor& x) {
    return logical_or(lt(x, INFINITY), gt(x, -INFINITY));
  };
  const auto equal = [ordered](const Tensor& a, const Tensor& b) {
    Tensor same = eq(a, b);
    if (is_float(a.dtype())) same = logical_and(same, ordered(a));
    if (is_float(b.dtype())) same = logical_and(same, ordered(b));
    return same;
  };
  const auto equal_number = [ordered](const Tensor& a, double b) {
    if (std::isnan(b)) return lt(a, a);  // (false everywhere)
    return is_float(a.dtype()) ? logical_and(eq(a, b), ordered(a)) : eq(a, b);
  };
  t.def("__eq__", equal, kKeep, "Elementwise a == b (a NaN equals nothing), as a bool tensor.");
  t.def("__eq__", equal_number, kKeep);
  t.def(
      "__ne__", [equal](const Tensor& a, const Tensor& b) { return equal(a, b).logical_not(); },
      kKeep, "Elementwise a != b (a NaN differs from everything), as a bool tensor.");
  t.def(
      "__ne__",
      [equal_number](const Tensor& a, double b) { return equal_number(a, b).logical_not(); },
      kKeep);
  t.def("__hash__", [](nb::handle self) {
    return static_cast<Py_ssize_t>(reinterpret_cast<std::uintptr_t>(self.ptr()) >> 4);
  });
  t.def("__bool__", [](const Tensor&) -> bool {
    throw nb::type_error(
        "a luminal Tensor has no truth value: it is computed lazily (select elementwise with "
        "luminal.where, or read values with numpy() after execute())");
  });

  // Elementwise hlops, no arguments.
#define LUM_PY_UNARY(name) t.def(#name, &Tensor::name, kKeep, "Elementwise " #name ".");
  LUM_PY_UNARY(exp)
  LUM_PY_UNARY(log)
  LUM_PY_UNARY(exp2)
  LUM_PY_UNARY(log2)
  LUM_PY_UNARY(sin)
  LUM_PY_UNARY(cos)
  LUM_PY_UNARY(sqrt)
  LUM_PY_UNARY(rsqrt)
  LUM_PY_UNARY(recip)
  LUM_PY_UNARY(abs)
  LUM_PY_UNARY(sign)
  LUM_PY_UNARY(square)
  LUM_PY_UNARY(relu)
  LUM_PY_UNARY(sigmoid)
  LUM_PY_UNARY(tanh)
  LUM_PY_UNARY(silu)
  LUM_PY_UNARY(gelu)
  LUM_PY_UNARY(gelu_tanh)
  LUM_PY_UNARY(erf)
  LUM_PY_UNARY(floor)
  LUM_PY_UNARY(ceil)
  LUM_PY_UNARY(round)
  LUM_PY_UNARY(logical_not)
  LUM_PY_UNARY(contiguous)
#undef LUM_PY_UNARY
  t.def("leaky_relu", &Tensor::leaky_relu, "slope"_a = 0.01, kKeep,
        "x where positive, else slope * x.")
      .def("softplus", &Tensor::softplus, "beta"_a = 1.0, "threshold"_a = 20.0, kKeep,
           "log(1 + exp(beta x)) / beta, x itself where beta x exceeds threshold (as torch).")
      .def("clamp", &Tensor::clamp, "min"_a, "max"_a, kKeep, "x limited to [min, max].")
      .def("pow", nb::overload_cast<double>(&Tensor::pow, nb::const_), "exponent"_a, kKeep)
      .def("pow", nb::overload_cast<const Tensor&>(&Tensor::pow, nb::const_), "exponent"_a, kKeep)
      .def("maximum", &Tensor::maximum, "other"_a, kKeep, "The larger of x and other, elementwise.")
      .def("minimum", &Tensor::minimum, "other"_a, kKeep,
           "The smaller of x and other, elementwise.")
      .def("cast", &Tensor::cast, "dtype"_a, kKeep,
           "The values converted to `dtype` (floats to integers truncate, as torch).");

  // Reductions over `axis` (an int, a sequence, or None for all).
#define LUM_PY_REDUCE(name)                                \
  t.def(                                                   \
      #name,                                               \
      [](const Tensor& x, nb::handle axis, bool keepdim) { \
        return x.name(axes_of(axis), keepdim);             \
      },                                                   \
      "axis"_a = nb::none(), "keepdim"_a = false, kKeep,   \
      "The " #name " over `axis` (an int, a sequence of ints, or None: all axes).");
  LUM_PY_REDUCE(sum)
  LUM_PY_REDUCE(max)
  LUM_PY_REDUCE(min)
  LUM_PY_REDUCE(mean)
  LUM_PY_REDUCE(prod)
#undef LUM_PY_REDUCE
  t.def(
       "var",
       [](const Tensor& x, nb::handle axis, int64_t correction, bool keepdim) {
         return x.var(axes_of(axis), correction, keepdim);
       },
       "axis"_a = nb::none(), "correction"_a = 1, "keepdim"_a = false, kKeep,
       "The variance over `axis` (None: all), dividing by the count less `correction`.")
      .def(
          "std",
          [](const Tensor& x, nb::handle axis, int64_t correction, bool keepdim) {
            return x.std(axes_of(axis), correction, keepdim);
          },
          "axis"_a = nb::none(), "correction"_a = 1, "keepdim"_a = false, kKeep,
          "The standard deviation over `axis` (None: all), as var's square root.")
      .def("argmax", &Tensor::argmax, "axis"_a, "keepdim"_a = false, kKeep,
           "The index of the largest value along an axis (the first of ties), as int64.")
      .def("argmin", &Tensor::argmin, "axis"_a, "keepdim"_a = false, kKeep,
           "The index of the smallest value along an axis (the first of ties), as int64.")
      .def("cumsum", &Tensor::cumsum, "axis"_a, kKeep, "Running sum along an axis.")
      .def("cumprod", &Tensor::cumprod, "axis"_a, kKeep, "Running product along an axis.")
      .def("cummax", &Tensor::cummax, "axis"_a, kKeep, "Running maximum along an axis.")
      .def(
          "mean_norm",
          [](const Tensor& x, nb::handle axis) { return x.mean_norm(norm_axes(axis)); },
          "axis"_a = nb::none(), kKeep, "x minus its mean over `axis` (the last by default).")
      .def(
          "std_norm",
          [](const Tensor& x, nb::handle axis, double eps) {
            return x.std_norm(norm_axes(axis), eps);
          },
          "axis"_a = nb::none(), "eps"_a = 1e-5, kKeep,
          "x over the square root of its biased variance plus eps over `axis` (the last by "
          "default), not centred.")
      .def("normalize", &Tensor::normalize, "p"_a = 2.0, "axis"_a = -1, "eps"_a = 1e-12, kKeep,
           "x over its p-norm along an axis (at least eps), as torch.nn.functional.normalize.")
      .def("dot", &Tensor::dot, "other"_a, kKeep, "The inner product of two vectors.")
      .def("outer", &Tensor::outer, "other"_a, kKeep, "The outer product of two vectors.")
      .def("softmax", &Tensor::softmax, "axis"_a = -1, kKeep, "Softmax along an axis.")
      .def("log_softmax", &Tensor::log_softmax, "axis"_a = -1, kKeep,
           "The logarithm of the softmax along an axis, computed stably.")
      .def(
          "layer_norm",
          [](const Tensor& x, nb::handle axis, double eps) {
            return x.layer_norm(norm_axes(axis), eps);
          },
          "axis"_a = nb::none(), "eps"_a = 1e-5, kKeep,
          "(x - mean) / sqrt(var + eps) over `axis` (the last by default), biased variance, "
          "no weight.")
      .def(
          "rms_norm",
          [](const Tensor& x, nb::handle axis, double eps) {
            return x.rms_norm(norm_axes(axis), eps);
          },
          "axis"_a = nb::none(), "eps"_a = 1e-6, kKeep,
          "x / sqrt(mean(x^2) + eps) over `axis` (the last by default), no weight.")
      .def("matmul", &Tensor::matmul, "other"_a, kKeep,
           "torch.matmul: vectors and matrices, batch dims broadcast.");

  // Shape ops.
  t.def(
       "reshape",
       [](const Tensor& x, const nb::args& shape) { return x.reshape(dims_from_args(shape)); },
       kKeep, "The same elements in a new shape (ints or dim names, as arguments or one tuple).")
      .def(
          "permute",
          [](const Tensor& x, const nb::args& axes) { return x.permute(ints_from_args(axes)); },
          kKeep, "The axes in a new order (a view).")
      .def("contiguous", &Tensor::contiguous, kKeep,
           "The same values laid out densely in row-major order (a copy where the tensor is "
           "a strided view, else itself).")
      .def("transpose", &Tensor::transpose, "dim0"_a, "dim1"_a, kKeep, "Swaps two axes (a view).")
      .def("unsqueeze", &Tensor::unsqueeze, "axis"_a, kKeep, "Inserts an axis of size 1.")
      .def(
          "squeeze",
          [](const Tensor& x, nb::handle axis) {
            return axis.is_none() ? x.squeeze() : x.squeeze(nb::cast<int>(axis));
          },
          "axis"_a = nb::none(), kKeep, "Drops an axis of size 1 (None: every such axis).")
      .def("flatten", &Tensor::flatten, "start"_a = 0, "end"_a = -1, kKeep,
           "Merges axes start..end (inclusive) into one.")
      .def(
          "slice",
          [](const Tensor& x, int axis, nb::handle start, nb::handle end) {
            return x.slice(axis, dim_of(start), dim_of(end));
          },
          "axis"_a, "start"_a, "end"_a, kKeep, "Entries start..end (exclusive) along an axis.")
      .def(
          "expand",
          [](const Tensor& x, const nb::args& shape) {
            return x.broadcast_to(dims_from_args(shape));
          },
          kKeep, "Broadcast to a shape, as torch.Tensor.expand (a view).")
      .def("flip", &Tensor::flip, "axis"_a, kKeep, "Reverses the order along an axis.")
      .def("tril", &Tensor::tril, "k"_a = 0, kKeep, "Zeroes above the k-th diagonal.")
      .def("triu", &Tensor::triu, "k"_a = 0, kKeep, "Zeroes below the k-th diagonal.")
      .def(
          "pad",
          [](const Tensor& x, int axis, nb::handle before, nb::handle after, double value) {
            return x.pad(axis, dim_of(before), dim_of(after), value);
          },
          "axis"_a, "before"_a, "after"_a, "value"_a = 0.0, kKeep,
          "`before` and `after` entries of `value` around an axis.")
      .def("roll", &Tensor::roll, "shift"_a, "axis"_a, kKeep,
           "Rotates by `shift` positions along an axis, as torch.roll.")
      .def(
          "repeat",
          [](const Tensor& x, const nb::args& times) { return x.repeat(dims_from_args(times)); },
          kKeep, "Tiles the tensor the given number of times along each axis, as torch's.")
      .def(
          "unfold",
          [](const Tensor& x, int axis, nb::handle size, nb::handle step) {
            return x.unfold(axis, dim_of(size), dim_of(step));
          },
          "axis"_a, "size"_a, "step"_a = 1, kKeep,
          "Windows of `size` every `step` along an axis, as a new last axis (torch's unfold).")
      .def(
          "split",
          [](nb::handle self, nb::handle size, int axis) {
            return tensors_kept_by(self, nb::cast<const Tensor&>(self).split(dim_of(size), axis));
          },
          "size"_a, "axis"_a = 0,
          "Pieces of `size` along an axis (the last may be shorter), as torch.split.")
      .def(
          "chunk",
          [](nb::handle self, int64_t chunks, int axis) {
            return tensors_kept_by(self, nb::cast<const Tensor&>(self).chunk(chunks, axis));
          },
          "chunks"_a, "axis"_a = 0, "At most `chunks` equal pieces along an axis, as torch.chunk.")
      .def("diagonal", &Tensor::diagonal, "k"_a = 0, kKeep,
           "The diagonal of the last two axes at offset k.")
      .def("gather_axis", &Tensor::gather_axis, "axis"_a, "indices"_a, kKeep,
           "out[..i..] = x[..indices[..i..]..] along an axis (torch.gather).")
      .def("scatter_axis", &Tensor::scatter_axis, "axis"_a, "indices"_a, "src"_a, kKeep,
           "A copy with x[..indices[..i..]..] = src[..i..] along an axis (torch.scatter).")
      .def("gather", &Tensor::gather, "indices"_a, kKeep,
           "Rows of the first axis picked by integer indices (an embedding lookup).")
      .def("index_select", &Tensor::index_select, "axis"_a, "indices"_a, kKeep,
           "Entries along `axis` picked by integer indices, as torch.index_select.");

  m.def(
      "where", [](const Tensor& c, const Tensor& a, const Tensor& b) { return where(c, a, b); },
      "cond"_a, "a"_a, "b"_a, kKeep, "cond ? a : b elementwise, broadcasting all three.");
  m.def(
      "where", [](const Tensor& c, const Tensor& a, double b) { return where(c, a, b); }, "cond"_a,
      "a"_a, "b"_a, kKeep);
  m.def(
      "where", [](const Tensor& c, double a, const Tensor& b) { return where(c, a, b); }, "cond"_a,
      "a"_a, "b"_a, kKeep);
  // Convolutions and pooling (PyTorch's conv1d/2d/3d and pools: [N, C, L] / [N, C, H, W] /
  // [N, C, D, H, W]).
  auto conv = [&m](const char* name, auto fn) {
    m.def(
        name,
        [fn](const Tensor& x, const Tensor& weight, std::optional<Tensor> bias, int64_t stride,
             int64_t padding, int64_t dilation, int64_t groups) {
          return fn(x, weight, bias ? *bias : Tensor{},
                    ConvOptions{stride, padding, dilation, groups});
        },
        "x"_a, "weight"_a, "bias"_a = nb::none(), "stride"_a = 1, "padding"_a = 0, "dilation"_a = 1,
        "groups"_a = 1, nb::keep_alive<0, 1>(),
        "A convolution as torch.nn.functional's: weight [O, C / groups, k...], bias [O] or "
        "None.");
  };
  conv("conv1d", [](const Tensor& x, const Tensor& w, const Tensor& b, ConvOptions o) {
    return conv1d(x, w, b, o);
  });
  conv("conv2d", [](const Tensor& x, const Tensor& w, const Tensor& b, ConvOptions o) {
    return conv2d(x, w, b, o);
  });
  conv("conv3d", [](const Tensor& x, const Tensor& w, const Tensor& b, ConvOptions o) {
    return conv3d(x, w, b, o);
  });
  auto pool = [&m](const char* name, Tensor (*fn)(const Tensor&, PoolOptions)) {
    m.def(
        name,
        [fn](const Tensor& x, int64_t kernel, std::optional<int64_t> stride, int64_t padding) {
          return fn(x, PoolOptions{kernel, stride.value_or(0), padding});
        },
        "x"_a, "kernel_size"_a, "stride"_a = nb::none(), "padding"_a = 0, nb::keep_alive<0, 1>(),
        "Pooling over the last dims as torch.nn.functional's (stride: the kernel size by "
        "default; average pools count padded zeros).");
  };
  pool("max_pool1d", max_pool1d);
  pool("max_pool2d", max_pool2d);
  pool("avg_pool1d", avg_pool1d);
  pool("avg_pool2d", avg_pool2d);
  pool("max_pool3d", max_pool3d);
  pool("avg_pool3d", avg_pool3d);

  m.def(
      "top_k", [](const Tensor& x, int64_t k) { return top_k(x, k); }, "x"_a, "k"_a, kKeep,
      "Positions (int32) of the k largest values along the last axis, largest first, the "
      "lower position first among equal values, NaN last (float values only).");
  m.def(
      "logical_and", [](const Tensor& a, const Tensor& b) { return logical_and(a, b); }, "a"_a,
      "b"_a, kKeep, "Elementwise and of two bool tensors.");
  m.def(
      "fmod", [](const Tensor& a, const Tensor& b) { return fmod(a, b); }, "a"_a, "b"_a, kKeep,
      "Truncated remainder (the sign of the dividend), as torch.fmod; `%` is torch.remainder's.");
  m.def(
      "logical_or", [](const Tensor& a, const Tensor& b) { return logical_or(a, b); }, "a"_a, "b"_a,
      kKeep, "Elementwise or of two bool tensors.");
  m.def(
      "concat", [](const std::vector<Tensor>& parts, int axis) { return concat(parts, axis); },
      "parts"_a, "axis"_a = 0, nb::keep_alive<0, 1>(), "Joins tensors along an existing axis.");
  m.def(
      "stack", [](const std::vector<Tensor>& parts, int axis) { return stack(parts, axis); },
      "parts"_a, "axis"_a = 0, nb::keep_alive<0, 1>(), "Joins tensors along a new axis.");
}

}  // namespace luminal::python

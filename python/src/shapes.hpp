// Conversions between Python values and luminal's: shapes (ints and dim names), axes,
// and NumPy arrays to and from Buffers.
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <vector>

#include "luminal/buffer.hpp"
#include "luminal/device_data.hpp"
#include "luminal/expr.hpp"
#include "luminal/tensor.hpp"

namespace luminal::python {

/// A shape from a Python int, str, or a sequence of them ("seq" is a symbolic dim).
std::vector<Expr> shape_of(nanobind::handle shape);
/// One dim from an int or a dim name.
Expr dim_of(nanobind::handle dim);
/// A dim as Python sees it: an int where it is a number, else its expression as text.
nanobind::object dim_value(Expr dim);
/// Axes from an int, a sequence of ints, or None (all: an empty list).
std::vector<int> axes_of(nanobind::handle axes);

/// Tensors as a Python list, each keeping `owner` (a Tensor of their graph) alive, and so
/// the graph (a list cannot be the nurse of keep_alive).
nanobind::list tensors_kept_by(nanobind::handle owner, std::vector<Tensor> tensors);

/// A host array's elements (NumPy's, or any DLPack producer's, such as a CPU torch
/// tensor; read through its strides where it is not contiguous) as a Buffer of its own
/// dtype, in row-major order, after checking its shape against `t`'s (numbers must match;
/// a symbolic dim must be bound and match).
Buffer buffer_from_array(const Tensor& t, nanobind::ndarray<> a);
/// A GPU array (a CUDA torch tensor's DLPack export) as DeviceData borrowed where it
/// lies, after the same shape check; its dtype must be `t`'s. The array stays alive while
/// luminal holds it. Errors begin with `what` (the method called).
/// A strided one is an error (it would be read as if contiguous).
DeviceData device_data_from_array(const Tensor& t, nanobind::ndarray<> a, const char* what);
/// An output kept on the GPU as a DLPack array over the same memory (no copy).
nanobind::object device_array(const DeviceData& data, const std::vector<int64_t>& shape);
/// `data` as a NumPy array of `shape` (bf16, which NumPy lacks, as float32).
nanobind::object array_from_buffer(Buffer data, const std::vector<int64_t>& shape);

}  // namespace luminal::python

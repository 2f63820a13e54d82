// Python values to luminal's and back (see shapes.hpp).
#include "shapes.hpp"

#include <nanobind/stl/string.h>

#include <cstring>
#include <string>

#include "luminal/error.hpp"
#include "luminal/graph.hpp"

namespace nb = nanobind;

namespace luminal::python {

Expr dim_of(nb::handle dim) {
  if (nb::isinstance<nb::bool_>(dim)) throw Error("a dim is an int or a name, not a bool");
  if (nb::isinstance<nb::int_>(dim)) return Expr(nb::cast<int64_t>(dim));
  if (nb::isinstance<nb::str>(dim)) return Expr(nb::cast<std::string>(dim));
  throw Error("a dim is an int or a name, not " +
              std::string(nb::str(nb::handle(dim.type())).c_str()));
}

std::vector<Expr> shape_of(nb::handle shape) {
  if (nb::isinstance<nb::int_>(shape) || nb::isinstance<nb::str>(shape)) return {dim_of(shape)};
  std::vector<Expr> out;
  for (nb::handle d : shape) out.push_back(dim_of(d));
  return out;
}

nb::object dim_value(Expr dim) {
  if (const std::optional<int64_t> v = dim.as_const()) return nb::int_(*v);
  return nb::str(dim.to_string().c_str());
}

std::vector<int> axes_of(nb::handle axes) {
  if (axes.is_none()) return {};
  if (nb::isinstance<nb::int_>(axes)) return {nb::cast<int>(axes)};
  std::vector<int> out;
  for (nb::handle a : axes) out.push_back(nb::cast<int>(a));
  return out;
}

namespace {

DType dtype_of_array(const nb::dlpack::dtype& t) {
  using nb::dlpack::dtype_code;
  const auto code = static_cast<dtype_code>(t.code);
  if (code == dtype_code::Float && t.bits == 32) return DType::F32;
  if (code == dtype_code::Float && t.bits == 64) return DType::F64;
  if (code == dtype_code::Float && t.bits == 16) return DType::F16;
  if (code == dtype_code::Bfloat && t.bits == 16) return DType::BF16;
  if (code == dtype_code::Int && t.bits == 32) return DType::I32;
  if (code == dtype_code::Int && t.bits == 64) return DType::I64;
  if (code == dtype_code::Int && t.bits == 8) return DType::I8;
  if (code == dtype_code::UInt && t.bits == 8) return DType::U8;
  if (code == dtype_code::Bool) return DType::Bool;
  throw Error("set: arrays of this element type (code " + std::to_string(t.code) + ", " +
              std::to_string(t.bits) + " bits) have no luminal dtype");
}

}  // namespace

Buffer buffer_from_array(const Tensor& t, nb::ndarray<nb::c_contig> a) {
  if (a.device_type() != nb::device::cpu::value)
    throw Error(
        "set: the array lives on a device, not in host memory; copy it to the CPU "
        "first (setting device arrays without a copy is still to come)");
  const std::vector<Expr>& shape = t.shape();
  const Bindings& dims = t.graph().dims();
  std::string want = "(", got = "(";
  for (size_t i = 0; i < shape.size(); ++i) want += (i ? ", " : "") + shape[i].to_string();
  for (size_t i = 0; i < a.ndim(); ++i) got += (i ? ", " : "") + std::to_string(a.shape(i));
  want += ")", got += ")";
  bool same = a.ndim() == shape.size();
  for (size_t i = 0; same && i < shape.size(); ++i) {
    std::optional<int64_t> n = shape[i].as_const();
    if (!n) {
      bool bound = true;
      for (const std::string& v : shape[i].variables()) bound &= dims.get(v).has_value();
      if (!bound)
        throw Error("set: the tensor's shape " + want + " has dims not bound yet; bind them with " +
                    "Graph.set_dim before setting its data");
      n = shape[i].eval(dims);
    }
    same = *n == static_cast<int64_t>(a.shape(i));
  }
  if (!same) throw Error("set: an array of shape " + got + " for a tensor of shape " + want);
  Buffer out(dtype_of_array(a.dtype()), a.size());
  if (a.size() > 0) std::memcpy(out.data(), a.data(), out.bytes());
  return out;
}

nb::object array_from_buffer(Buffer data, const std::vector<int64_t>& shape) {
  if (data.dtype() == DType::BF16) data = Buffer::from(data.to_f32());
  std::vector<size_t> dims(shape.begin(), shape.end());
  auto* owned = new Buffer(std::move(data));
  nb::capsule owner(owned, [](void* p) noexcept { delete static_cast<Buffer*>(p); });
  nb::dlpack::dtype type;
  switch (owned->dtype()) {
    case DType::F32:
      type = nb::dtype<float>();
      break;
    case DType::F64:
      type = nb::dtype<double>();
      break;
    case DType::F16:
      type = {static_cast<uint8_t>(nb::dlpack::dtype_code::Float), 16, 1};
      break;
    case DType::I32:
      type = nb::dtype<int32_t>();
      break;
    case DType::I64:
      type = nb::dtype<int64_t>();
      break;
    case DType::I8:
      type = nb::dtype<int8_t>();
      break;
    case DType::U8:
      type = nb::dtype<uint8_t>();
      break;
    case DType::Bool:
      type = nb::dtype<bool>();
      break;
    case DType::BF16:
      LUM_ASSERT(false) << "bf16 was widened above";
      break;
  }
  return nb::ndarray<nb::numpy>(owned->data(), dims.size(), dims.data(), owner, nullptr, type)
      .cast();
}

}  // namespace luminal::python

// Python values to luminal's and back (see shapes.hpp).
#include "shapes.hpp"

#include <nanobind/stl/string.h>

#include <algorithm>
#include <cstring>
#include <iterator>
#include <string>

#include "luminal/cuda.hpp"
#include "luminal/error.hpp"
#include "luminal/graph.hpp"

namespace nb = nanobind;

namespace luminal::python {

Expr dim_of(nb::handle dim) {
  if (nb::isinstance<nb::bool_>(dim))
    throw Error("a dim is an int, a name or an expression over names, not a bool");
  if (nb::isinstance<nb::int_>(dim)) return Expr(nb::cast<int64_t>(dim));
  // A name ("seq") or an expression over names ("2*seq + 1"), as Expr::to_string writes.
  if (nb::isinstance<nb::str>(dim)) return parse_expr(nb::cast<std::string>(dim));
  throw Error("a dim is an int, a name or an expression over names, not " +
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

// luminal's dtypes as DLPack element types, one table for arrays in and out.
struct ArrayType {
  DType dtype;
  nb::dlpack::dtype_code code;
  uint8_t bits;
};
constexpr ArrayType kArrayTypes[] = {{DType::F32, nb::dlpack::dtype_code::Float, 32},
                                     {DType::F64, nb::dlpack::dtype_code::Float, 64},
                                     {DType::F16, nb::dlpack::dtype_code::Float, 16},
                                     {DType::BF16, nb::dlpack::dtype_code::Bfloat, 16},
                                     {DType::I32, nb::dlpack::dtype_code::Int, 32},
                                     {DType::I64, nb::dlpack::dtype_code::Int, 64},
                                     {DType::I8, nb::dlpack::dtype_code::Int, 8},
                                     {DType::U8, nb::dlpack::dtype_code::UInt, 8},
                                     {DType::Bool, nb::dlpack::dtype_code::Bool, 8}};

DType dtype_of_array(const nb::dlpack::dtype& t) {
  for (const ArrayType& a : kArrayTypes)
    if (t.code == static_cast<uint8_t>(a.code) && (t.bits == a.bits || a.dtype == DType::Bool))
      return a.dtype;
  throw Error("set: arrays of this element type (code " + std::to_string(t.code) + ", " +
              std::to_string(t.bits) + " bits) have no luminal dtype");
}

// The DLPack element type of a luminal dtype (every dtype is in the table).
nb::dlpack::dtype dlpack_dtype(DType dtype) {
  const ArrayType* type = std::find_if(std::begin(kArrayTypes), std::end(kArrayTypes),
                                       [&](const ArrayType& a) { return a.dtype == dtype; });
  return {static_cast<uint8_t>(type->code), type->bits, 1};
}

}  // namespace

void check_array_shape(const Tensor& t, const nb::ndarray<>& a, const char* what) {
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
        throw Error(std::string(what) + ": the tensor's shape " + want +
                    " has dims not bound yet; bind them with " +
                    "Graph.set_dim before setting its data");
      n = shape[i].eval(dims);
    }
    same = *n == static_cast<int64_t>(a.shape(i));
  }
  if (!same)
    throw Error(std::string(what) + ": an array of shape " + got + " for a tensor of shape " +
                want);
}

namespace {

// Whether the array's elements lie in row-major order, one after another.
bool row_major(const nb::ndarray<>& a) {
  int64_t expected = 1;
  for (size_t i = a.ndim(); i-- > 0;) {
    if (a.shape(i) != 1 && a.stride(i) != expected) return false;
    expected *= static_cast<int64_t>(a.shape(i));
  }
  return true;
}

}  // namespace

Buffer buffer_from_array(const Tensor& t, nb::ndarray<> a) {
  check_array_shape(t, a, "set");
  Buffer out(dtype_of_array(a.dtype()), a.size());
  if (a.size() == 0) return out;
  if (row_major(a)) {
    std::memcpy(out.data(), a.data(), out.bytes());
    return out;
  }
  // A strided array (a transposed tensor, a bf16 one that NumPy cannot copy for us):
  // element by element, in row-major order.
  const size_t size = dtype_size(out.dtype()), rank = a.ndim();
  const auto* from = static_cast<const char*>(a.data());
  auto* to = static_cast<char*>(out.data());
  std::vector<size_t> at(rank, 0);
  for (size_t n = 0; n < a.size(); ++n) {
    int64_t offset = 0;
    for (size_t i = 0; i < rank; ++i) offset += static_cast<int64_t>(at[i]) * a.stride(i);
    std::memcpy(to + n * size, from + offset * static_cast<int64_t>(size), size);
    for (size_t i = rank; i-- > 0 && ++at[i] == a.shape(i);) at[i] = 0;
  }
  return out;
}

DeviceData device_data_from_array(const Tensor& t, nb::ndarray<> a, const char* what) {
  check_array_shape(t, a, what);
  if (!row_major(a))
    throw Error(std::string(what) +
                ": a strided GPU array (it is read where it lies: "
                "make it contiguous first, as torch's .contiguous())");
  const DType dtype = dtype_of_array(a.dtype());
  if (dtype != t.dtype())
    throw Error(std::string(what) + ": a device array of " + std::string(dtype_name(dtype)) +
                " for a tensor of " + std::string(dtype_name(t.dtype())) +
                " (device arrays are read where they lie, unconverted)");
  // luminal may hold the array past this call: it keeps the producer's tensor alive, and
  // lets it go under the GIL, as any Python reference.
  std::shared_ptr<void> owner(new nb::ndarray<>(a), [](void* p) {
    nb::gil_scoped_acquire gil;
    delete static_cast<nb::ndarray<>*>(p);
  });
  return cuda_borrow(a.data(), dtype, a.size(), std::move(owner), a.device_id());
}

nb::object device_array(const DeviceData& data, const std::vector<int64_t>& shape) {
  std::vector<size_t> dims(shape.begin(), shape.end());
  auto* owned = new DeviceData(data);
  nb::capsule owner(owned, [](void* p) noexcept { delete static_cast<DeviceData*>(p); });
  return nb::cast(nb::ndarray<>(owned->data(), dims.size(), dims.data(), owner, nullptr,
                                dlpack_dtype(data.dtype()), nb::device::cuda::value,
                                data.device()));
}

nb::object array_from_buffer(Buffer data, const std::vector<int64_t>& shape) {
  if (data.dtype() == DType::BF16) data = Buffer::from(data.to_f32());
  std::vector<size_t> dims(shape.begin(), shape.end());
  auto* owned = new Buffer(std::move(data));
  nb::capsule owner(owned, [](void* p) noexcept { delete static_cast<Buffer*>(p); });
  // (bf16, which NumPy lacks, was widened above.)
  return nb::ndarray<nb::numpy>(owned->data(), dims.size(), dims.data(), owner, nullptr,
                                dlpack_dtype(owned->dtype()))
      .cast();
}

nanobind::list tensors_kept_by(nanobind::handle owner, std::vector<Tensor> tensors) {
  nanobind::list out;
  for (Tensor& t : tensors) {
    nanobind::object o = nanobind::cast(std::move(t));
    nanobind::detail::keep_alive(o.ptr(), owner.ptr());
    out.append(o);
  }
  return out;
}

}  // namespace luminal::python

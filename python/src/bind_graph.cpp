// Graph in Python (see bindings.hpp).
#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/string_view.h>

#include "bindings.hpp"
#include "luminal/backend.hpp"
#include "luminal/graph.hpp"
#include "shapes.hpp"

namespace nb = nanobind;
using namespace nb::literals;

namespace luminal::python {

void bind_graph(nb::module_& m) {
  // Every Tensor keeps the Graph it belongs to alive (keep_alive on whatever makes one).
  nb::class_<Graph>(m, "Graph",
                    "A lazy tensor graph: tensors record ops; compile() turns the graph into "
                    "kernels for a backend, execute() runs them on the inputs set.")
      .def(nb::init<>())
      .def(
          "tensor",
          [](Graph& g, nb::handle shape, DType dtype, std::optional<std::string> name) {
            return name ? g.named_tensor(*name, shape_of(shape), dtype)
                        : g.tensor(shape_of(shape), dtype);
          },
          "shape"_a, "dtype"_a = DType::F32, "name"_a = nb::none(), nb::keep_alive<0, 1>(),
          "An input of `shape` (ints, or names of symbolic dims such as \"seq\"), set with "
          "Tensor.set before execute().")
      .def(
          "constant", [](Graph& g, double value, DType dtype) { return g.constant(value, dtype); },
          "value"_a, "dtype"_a = DType::F32, nb::keep_alive<0, 1>(),
          "A scalar constant (broadcasts in ops).")
      .def(
          "full",
          [](Graph& g, nb::handle shape, double value, DType dtype) {
            return g.full(shape_of(shape), value, dtype);
          },
          "shape"_a, "value"_a, "dtype"_a = DType::F32, nb::keep_alive<0, 1>(),
          "A tensor of `shape` filled with `value`.")
      .def(
          "arange",
          [](Graph& g, double start, double end, double step, DType dtype) {
            return g.arange(start, end, step, dtype);
          },
          "start"_a, "end"_a, "step"_a = 1.0, "dtype"_a = DType::F32, nb::keep_alive<0, 1>(),
          "start, start + step, ... up to (not including) end.")
      .def(
          "iota",
          [](Graph& g, std::string_view expr, nb::handle shape, DType dtype) {
            return g.iota(parse_expr(expr), shape_of(shape), dtype);
          },
          "expr"_a, "shape"_a, "dtype"_a = DType::I32, nb::keep_alive<0, 1>(),
          "A tensor of `shape` whose element at flat (row-major) index z is `expr`, an "
          "expression over z and symbolic dims, such as \"2*z + 1\" or \"seq - z\".")
      .def(
          "set_dim", [](Graph& g, std::string_view name, int64_t value) { g.set_dim(name, value); },
          "name"_a, "value"_a, "Binds a symbolic dim for the runs that follow.")
      .def(
          "compile", [](Graph& g, const Backend& backend) { g.compile(backend); }, "backend"_a,
          nb::call_guard<nb::gil_scoped_release>(),
          "Optimises the graph and compiles its kernels for `backend` (luminal.cpu(), ...).")
      .def("execute", &Graph::execute, nb::call_guard<nb::gil_scoped_release>(),
           "Runs the compiled graph on the inputs set; outputs are then read with "
           "Tensor.numpy().")
      .def(
          "execute_on_stream",
          [](Graph& g, uintptr_t stream) { g.execute_on(reinterpret_cast<void*>(stream)); },
          "stream"_a, nb::call_guard<nb::gil_scoped_release>(),
          "Runs as execute() does, in order with a CUDA stream of the caller's (its handle, "
          "such as torch.cuda.current_stream().cuda_stream): the run starts after the work "
          "queued there so far and the work queued there afterwards starts after it, the "
          "host waiting for neither. Outputs kept on the GPU are then read on that stream; "
          "on a host backend this is execute().")
      .def("__str__", &Graph::to_text, "The graph's nodes, one a line.");
}

}  // namespace luminal::python

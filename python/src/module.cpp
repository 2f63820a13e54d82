// The Python module luminal._luminal: dtypes, backends and luminal.Error here; Graph,
// Tensor and Model in bind_graph.cpp, bind_tensor.cpp and bind_models.cpp. The package
// (python/luminal) re-exports it.
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>

#include "bindings.hpp"
#include "luminal/backend.hpp"
#include "luminal/cpu.hpp"
#include "luminal/cuda.hpp"
#include "luminal/dtype.hpp"
#include "luminal/error.hpp"
#include "luminal/reference.hpp"

namespace nb = nanobind;

NB_MODULE(_luminal, m) {
  using namespace luminal;
  m.doc() =
      "luminal: a deep-learning compiler. Build a lazy tensor graph, compile it for a "
      "backend (cpu, cuda, reference), set inputs from NumPy, execute, read outputs.";
  m.attr("__version__") = LUMINAL_VERSION;
  // Every error luminal reports (bad input, a wrong shape, a missing GPU) is luminal.Error;
  // an InternalError (a broken invariant: a bug) stays apart.
  nb::exception<Error>(m, "Error", PyExc_RuntimeError);
  nb::exception<InternalError>(m, "InternalError", PyExc_RuntimeError);

  nb::enum_<DType>(m, "DType", "Element types.")
      .value("float32", DType::F32)
      .value("float16", DType::F16)
      .value("bfloat16", DType::BF16)
      .value("float64", DType::F64)
      .value("int32", DType::I32)
      .value("int64", DType::I64)
      .value("int8", DType::I8)
      .value("uint8", DType::U8)
      .value("bool", DType::Bool);
  for (const char* name :
       {"float32", "float16", "bfloat16", "float64", "int32", "int64", "int8", "uint8"})
    m.attr(name) = m.attr("DType").attr(name);
  m.attr("bool_") = m.attr("DType").attr("bool");

  nb::class_<Backend>(m, "Backend",
                      "Where a compiled graph runs: cpu(), cuda(), reference() or "
                      "cuda_program_reference().")
      .def_prop_ro("name", &Backend::name, "The backend's name (\"cpu\", \"cuda\", ...).")
      .def("__repr__", [](const Backend& b) { return "luminal." + b.name() + "()"; });
  nb::class_<CpuBackend, Backend>(m, "CpuBackend");
  nb::class_<CudaBackend, Backend>(m, "CudaBackend");
  nb::class_<ReferenceBackend, Backend>(m, "ReferenceBackend");
  nb::class_<CudaProgramReference, Backend>(m, "CudaProgramReference");
  m.def(
      "cpu", [] { return cpu(); }, "The CPU backend: fused kernels compiled to native code.");
  m.def(
      "cuda", [] { return cuda(); },
      "The CUDA backend (an NVIDIA GPU); compiling for it without one raises luminal.Error.");
  m.def(
      "reference", [] { return reference(); },
      "The reference interpreter: exact and slow, the oracle the others are tested against.");
  m.def(
      "cuda_program_reference", [] { return cuda_program_reference(); },
      "The reference interpreter running the program cuda() would compile (the CUDA "
      "backend's rewrites, each kernel by its reference semantics): checks them without a "
      "GPU; slow.");

  python::bind_graph(m);
  python::bind_tensor(m);
  python::bind_models(m);
  python::bind_train(m);
}

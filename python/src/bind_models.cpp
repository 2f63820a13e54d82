// Language models in Python (see bindings.hpp): luminal.load gives a Model over
// models::TextGenerator; the package's generate() streams its pieces (python/luminal).
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/unique_ptr.h>
#include <nanobind/stl/vector.h>

#include <memory>

#include "bindings.hpp"
#include "luminal/cpu.hpp"
#include "luminal/cuda.hpp"
#include "luminal/error.hpp"
#include "luminal/models/generate.hpp"

namespace nb = nanobind;
using namespace nb::literals;

namespace luminal::python {
namespace {

// Model text as a Python str: a token's bytes may be part of a character, or no UTF-8 at
// all (byte-fallback vocabularies), which become U+FFFD as in HF tokenizers' decode.
nb::str utf8_text(const std::string& s) {
  return nb::steal<nb::str>(
      PyUnicode_DecodeUTF8(s.data(), static_cast<Py_ssize_t>(s.size()), "replace"));
}

}  // namespace

void bind_models(nb::module_& m) {
  using models::TextGenerator;
  nb::class_<TextGenerator>(m, "Model",
                            "A language model loaded and compiled for a device (luminal.load).")
      .def_prop_ro("architecture", &TextGenerator::architecture,
                   "The architecture named in the file (\"llama\", \"qwen3\", ...).")
      .def("encode", &TextGenerator::encode, "text"_a,
           "The token ids of `text` as the model reads it (the beginning-of-sequence token "
           "first where the model adds one).")
      .def(
          "decode",
          [](const TextGenerator& g, const std::vector<int32_t>& ids) {
            return utf8_text(g.decode(ids));
          },
          "ids"_a, "The text of token ids (bytes that are not UTF-8 as U+FFFD).")
      .def(
          "greedy_ids",
          [](TextGenerator& g, const std::vector<int32_t>& prompt, int64_t steps) {
            return g.greedy_ids(prompt, steps);
          },
          "prompt_ids"_a, "steps"_a, nb::call_guard<nb::gil_scoped_release>(),
          "The ids greedy decoding picks for `steps` tokens after `prompt_ids`.")
      .def(
          "_generate",
          [](TextGenerator& g, const std::string& prompt, int64_t max_tokens, double temperature,
             int64_t top_k, double top_p, uint64_t seed, bool ignore_eos, nb::callable on_bytes) {
            models::SamplingOptions opts;
            opts.temperature = temperature, opts.top_k = top_k, opts.top_p = top_p;
            opts.seed = seed;
            nb::gil_scoped_release unlocked;
            g.generate(
                prompt, max_tokens, opts,
                [&](const std::string& piece) {
                  nb::gil_scoped_acquire locked;
                  on_bytes(nb::bytes(piece.data(), piece.size()));
                },
                ignore_eos);
          },
          "prompt"_a, "max_tokens"_a, "temperature"_a, "top_k"_a, "top_p"_a, "seed"_a,
          "ignore_eos"_a, "on_bytes"_a,
          "Generates, calling on_bytes with each piece's bytes (Model.generate streams them "
          "as text).");

  m.def(
      "_load",
      [](const std::string& path, const std::string& device, const std::string& kv_cache) {
        const DType cache = kv_cache == "f16"   ? DType::F16
                            : kv_cache == "f32" ? DType::F32
                                                : throw Error(
                                                      "load: kv_cache is \"f16\" or "
                                                      "\"f32\", not \"" +
                                                      kv_cache + "\"");
        if (device == "cpu") return std::make_unique<TextGenerator>(path, cpu(), nullptr, cache);
        if (device == "cuda") return std::make_unique<TextGenerator>(path, cuda(), nullptr, cache);
        throw Error("load: unknown device '" + device + "' (cpu or cuda)");
      },
      "path"_a, "device"_a, "kv_cache"_a, nb::call_guard<nb::gil_scoped_release>());
}

}  // namespace luminal::python

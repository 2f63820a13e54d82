// The hlops parity suite: every case in tests/fixtures/hlops/*.lfx (PyTorch goldens)
// runs on every backend present and must match within dtype tolerances.
#include <gtest/gtest.h>

#include "hlops/fixture.hpp"
#ifdef LUMINAL_HAS_CUDA
#include "testing/nvrtc_only.hpp"
#endif

namespace luminal::testing {
namespace {

const char* kFixtureFiles[] = {"binary",   "unary",      "reduce", "norm", "movement",
                               "creation", "cumulative", "linalg", "conv"};

std::string fixture_path(const std::string& name) {
  return std::string(LUMINAL_FIXTURE_DIR) + "/hlops/" + name + ".lfx";
}

// The GPU test binary (label gpu) runs the suite on the CUDA backend; the CPU one on the
// reference interpreter, the CPU backend and, where CUDA is built, its NVRTC compile and
// its program on the interpreter (its rewrites, without a GPU).
#ifdef LUMINAL_PARITY_ON_GPU
const char* const kBackends[] = {"cuda"};
#elif defined(LUMINAL_HAS_CUDA)
const char* const kBackends[] = {"reference", "cpu", "cuda_nvrtc", "cuda_program_reference"};
#else
const char* const kBackends[] = {"reference", "cpu"};
#endif

std::unique_ptr<Backend> backend_named(const std::string& name) {
  if (name == "cpu") return std::make_unique<CpuBackend>();
  if (name == "cuda") return std::make_unique<CudaBackend>();
#ifdef LUMINAL_HAS_CUDA
  if (name == "cuda_nvrtc") return std::make_unique<NvrtcOnly>();
  if (name == "cuda_program_reference") return std::make_unique<CudaProgramReference>();
#endif
  return std::make_unique<ReferenceBackend>();
}

// Every backend present runs every fixture file.
struct BackendCase {
  const char* backend;
  const char* file;
};

std::vector<BackendCase> all_cases() {
  std::vector<BackendCase> out;
  for (const char* backend : kBackends)
    for (const char* f : kFixtureFiles) out.push_back({backend, f});
  return out;
}

class Parity : public ::testing::TestWithParam<BackendCase> {};

TEST_P(Parity, MatchesPyTorch) {
  const auto cases = load_fixture(fixture_path(GetParam().file));
  ASSERT_FALSE(cases.empty());
  const std::string backend = GetParam().backend;
  std::string why;
  if (backend == "cuda" && !cuda_available(&why)) GTEST_SKIP() << "no GPU here: " << why;
  const auto errors = run_parity_cases(cases, *backend_named(backend));
  for (size_t i = 0; i < cases.size(); ++i)
    EXPECT_TRUE(errors[i].empty())
        << cases[i].name << " (" << cases[i].op << " " << cases[i].params << "): " << errors[i];
}

INSTANTIATE_TEST_SUITE_P(Hlops, Parity, ::testing::ValuesIn(all_cases()), [](const auto& info) {
  return std::string(info.param.backend) + "_" + info.param.file;
});

// Every case again in bf16 and f16 (inputs rounded), against the reference interpreter in
// that type; at least half of each file's cases take the type.
class HalfParity : public ::testing::TestWithParam<BackendCase> {};

TEST_P(HalfParity, MatchesTheReference) {
  const auto cases = load_fixture(fixture_path(GetParam().file));
  const std::string backend = GetParam().backend;
  std::string why;
  if (backend == "cuda" && !cuda_available(&why)) GTEST_SKIP() << "no GPU here: " << why;
  for (DType half : {DType::BF16, DType::F16}) {
    const auto results = run_half_variants(cases, half, *backend_named(backend));
    EXPECT_GE(2 * results.size(), cases.size()) << dtype_name(half) << ": too few cases ran";
    for (const auto& [i, error] : results)
      EXPECT_TRUE(error.empty()) << dtype_name(half) << " " << cases[i].name << " (" << cases[i].op
                                 << " " << cases[i].params << "): " << error;
  }
}

// The compiling backends over the files whose ops take float inputs (creation ops take
// none).
std::vector<BackendCase> half_cases() {
  std::vector<BackendCase> out;
  for (const BackendCase& c : all_cases())
    if (std::string(c.backend) != "reference" && std::string(c.file) != "creation")
      out.push_back(c);
  return out;
}

INSTANTIATE_TEST_SUITE_P(Hlops, HalfParity, ::testing::ValuesIn(half_cases()),
                         [](const auto& info) {
                           return std::string(info.param.backend) + "_" + info.param.file;
                         });

TEST(HlopsParity, EveryRegisteredFixtureFileExists) {
  for (const char* f : kFixtureFiles) EXPECT_NO_THROW(load_fixture(fixture_path(f))) << f;
}

}  // namespace
}  // namespace luminal::testing

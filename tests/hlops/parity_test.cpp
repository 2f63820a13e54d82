// The hlops parity suite: every case in tests/fixtures/hlops/*.lfx (PyTorch goldens)
// runs on every backend present and must match within dtype tolerances.
#include <gtest/gtest.h>

#include "hlops/fixture.hpp"

namespace luminal::testing {
namespace {

const char* kFixtureFiles[] = {"binary",   "unary",      "reduce", "norm", "movement",
                               "creation", "cumulative", "linalg", "conv"};

std::string fixture_path(const std::string& name) {
  return std::string(LUMINAL_FIXTURE_DIR) + "/hlops/" + name + ".lfx";
}

// Every backend present runs every fixture file.
struct BackendCase {
  const char* backend;
  const char* file;
};

std::vector<BackendCase> all_cases() {
  std::vector<BackendCase> out;
  for (const char* backend : {"reference", "cpu"})
    for (const char* f : kFixtureFiles) out.push_back({backend, f});
  return out;
}

class Parity : public ::testing::TestWithParam<BackendCase> {};

TEST_P(Parity, MatchesPyTorch) {
  const auto cases = load_fixture(fixture_path(GetParam().file));
  ASSERT_FALSE(cases.empty());
  const std::string backend = GetParam().backend;
  const auto errors =
      backend == "cpu" ? run_parity_cases(cases, cpu()) : run_parity_cases(cases, reference());
  for (size_t i = 0; i < cases.size(); ++i)
    EXPECT_TRUE(errors[i].empty())
        << cases[i].name << " (" << cases[i].op << " " << cases[i].params << "): " << errors[i];
}

INSTANTIATE_TEST_SUITE_P(Hlops, Parity, ::testing::ValuesIn(all_cases()), [](const auto& info) {
  return std::string(info.param.backend) + "_" + info.param.file;
});

TEST(HlopsParity, EveryRegisteredFixtureFileExists) {
  for (const char* f : kFixtureFiles) EXPECT_NO_THROW(load_fixture(fixture_path(f))) << f;
}

}  // namespace
}  // namespace luminal::testing

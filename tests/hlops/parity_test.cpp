// The hlops parity suite: every case in tests/fixtures/hlops/*.lfx (PyTorch goldens)
// runs on every backend present and must match within dtype tolerances.
#include <gtest/gtest.h>

#include "hlops/fixture.hpp"

namespace luminal::testing {
namespace {

const char* kFixtureFiles[] = {"binary", "unary",  "reduce",     "norm",  "movement",
                               "creation", "cumulative", "linalg", "conv"};

std::string fixture_path(const std::string& name) {
  return std::string(LUMINAL_FIXTURE_DIR) + "/hlops/" + name + ".lfx";
}

class ReferenceParity : public ::testing::TestWithParam<const char*> {};

TEST_P(ReferenceParity, MatchesPyTorch) {
  const auto cases = load_fixture(fixture_path(GetParam()));
  ASSERT_FALSE(cases.empty());
  for (const ParityCase& c : cases) {
    std::string error;
    try {
      error = run_parity_case(c, reference());
    } catch (const std::exception& e) {
      error = std::string("threw: ") + e.what();
    }
    EXPECT_TRUE(error.empty()) << c.name << " (" << c.op << " " << c.params << "): " << error;
  }
}

INSTANTIATE_TEST_SUITE_P(Hlops, ReferenceParity, ::testing::ValuesIn(kFixtureFiles),
                         [](const auto& info) { return std::string(info.param); });

TEST(HlopsParity, EveryRegisteredFixtureFileExists) {
  for (const char* f : kFixtureFiles) EXPECT_NO_THROW(load_fixture(fixture_path(f))) << f;
}

}  // namespace
}  // namespace luminal::testing

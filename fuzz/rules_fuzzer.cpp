// libFuzzer target for the rule-language parser: any input must parse or raise
// luminal::Error, never crash.
//   cmake -S . -B build-fuzz -DCMAKE_CXX_COMPILER=clang++ -DLUMINAL_FUZZ=ON
//   cmake --build build-fuzz --target rules_fuzzer && ./build-fuzz/fuzz/rules_fuzzer
//   -max_total_time=60
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "luminal/egraph/rules.hpp"
#include "luminal/error.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const luminal::eg::Functions fns;
  try {
    luminal::eg::parse_rules(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz",
                             fns);
  } catch (const luminal::Error&) {
  }
  return 0;
}

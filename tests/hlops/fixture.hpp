// Golden fixtures written by tools/fixtures/make_hlops.py (.lfx format, see lfx.py), and
// the parity check that runs one case on a backend.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "luminal/luminal.hpp"

namespace luminal::testing {

struct FixtureTensor {
  std::vector<int64_t> shape;
  Buffer data;
};

struct FixtureInput {
  std::string recipe;  // view steps applied to the base tensor (see apply_recipe)
  FixtureTensor base;
};

struct ParityCase {
  std::string name, op, params;
  std::vector<FixtureInput> inputs;
  FixtureTensor expected;
};

/// Reads a .lfx file; throws luminal::Error naming the file on a malformed one.
std::vector<ParityCase> load_fixture(const std::string& path);

/// "k=v;k=v" parameters with typed accessors.
class Params {
 public:
  explicit Params(const std::string& text);
  bool has(const std::string& key) const { return values_.count(key) > 0; }
  double f(const std::string& key) const;
  int64_t i(const std::string& key) const;
  std::vector<int64_t> ints(const std::string& key) const;
  const std::string& str(const std::string& key) const;

 private:
  std::map<std::string, std::string> values_;
};

/// Applies a view recipe: T, P:a,b,c, S:axis:start:end, F:axis, B:d0,d1 separated by '|'.
Tensor apply_recipe(const Tensor& t, const std::string& recipe);

/// Builds every case into one graph (so a compiling backend compiles once), runs it on
/// `backend` and compares each output with its expected tensor. Returns one message per
/// case: empty on success, else what differs.
std::vector<std::string> run_parity_cases(const std::vector<ParityCase>& cases,
                                          const Backend& backend);

/// The same cases with their f32 inputs rounded to `half` (f16 or bf16), run on `backend`
/// and compared with the reference interpreter running them in that type, at half
/// tolerances. Cases with no f32 input, or whose op refuses the type, are left out; the
/// others give (case index, message), the message empty on success.
std::vector<std::pair<size_t, std::string>> run_half_variants(const std::vector<ParityCase>& cases,
                                                              DType half, const Backend& backend);

/// The composite op the case names, applied to its (viewed) inputs.
Tensor build_op(Graph& cx, const std::string& op, const std::vector<Tensor>& in, const Params& p);

}  // namespace luminal::testing

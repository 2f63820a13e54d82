// Reading .lfx fixtures and checking one parity case.
#include "hlops/fixture.hpp"

#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>
#include <optional>
#include <sstream>

namespace luminal::testing {
namespace {

class Reader {
 public:
  Reader(std::string bytes, std::string path) : bytes_(std::move(bytes)), path_(std::move(path)) {}

  template <class T>
  T pod() {
    T v;
    take(&v, sizeof(T));
    return v;
  }
  std::string str() {
    std::string s(pod<uint32_t>(), '\0');
    take(s.data(), s.size());
    return s;
  }
  FixtureTensor tensor() {
    const auto code = pod<uint8_t>();
    LUM_CHECK(code < std::size(kAllDTypes)) << path_ << ": bad dtype code " << int(code);
    FixtureTensor t;
    const auto rank = pod<uint32_t>();
    size_t numel = 1;
    for (uint32_t d = 0; d < rank; ++d) {
      t.shape.push_back(pod<int64_t>());
      numel *= static_cast<size_t>(t.shape.back());
    }
    t.data = Buffer(kAllDTypes[code], numel);
    take(t.data.data(), t.data.bytes());
    return t;
  }
  bool done() const { return pos_ == bytes_.size(); }

 private:
  void take(void* dst, size_t n) {
    LUM_CHECK(pos_ + n <= bytes_.size()) << path_ << ": truncated at byte " << pos_;
    std::memcpy(dst, bytes_.data() + pos_, n);
    pos_ += n;
  }
  std::string bytes_, path_;
  size_t pos_ = 0;
};

std::vector<Expr> exprs(const std::vector<int64_t>& v) {
  return {v.begin(), v.end()};
}

std::vector<int> to_ints(const std::string& s) {
  std::vector<int> out;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, ',');) out.push_back(std::stoi(item));
  return out;
}

// Tolerances by dtype: fp32 about 1e-5 relative; halves 1e-2; integers and bool exact.
void tolerance(DType t, const Params& p, double& atol, double& rtol) {
  if (t == DType::F16 || t == DType::BF16) {
    atol = rtol = 1e-2;
  } else if (is_float(t)) {
    atol = 1e-5;
    rtol = 1e-5;
  } else {
    atol = rtol = 0;
  }
  if (p.has("atol")) atol = p.f("atol");
  if (p.has("rtol")) rtol = p.f("rtol");
}

}  // namespace

std::vector<ParityCase> load_fixture(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  LUM_CHECK(f) << "cannot open fixture " << path;
  Reader r(std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>()),
           path);
  char magic[4];
  for (char& c : magic) c = r.pod<char>();
  LUM_CHECK(std::string(magic, 4) == "LFX1") << path << ": not an .lfx fixture";
  std::vector<ParityCase> cases(r.pod<uint32_t>());
  for (ParityCase& c : cases) {
    c.name = r.str();
    c.op = r.str();
    c.params = r.str();
    c.inputs.resize(r.pod<uint32_t>());
    for (FixtureInput& in : c.inputs) {
      in.recipe = r.str();
      in.base = r.tensor();
    }
    c.expected = r.tensor();
  }
  LUM_CHECK(r.done()) << path << ": trailing bytes";
  return cases;
}

Params::Params(const std::string& text) {
  std::stringstream ss(text);
  for (std::string kv; std::getline(ss, kv, ';');) {
    const auto eq = kv.find('=');
    LUM_CHECK(eq != std::string::npos) << "bad parameter '" << kv << "'";
    values_[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
}

const std::string& Params::str(const std::string& key) const {
  auto it = values_.find(key);
  LUM_CHECK(it != values_.end()) << "missing parameter '" << key << "'";
  return it->second;
}
double Params::f(const std::string& key) const {
  return std::stod(str(key));
}
int64_t Params::i(const std::string& key) const {
  return std::stoll(str(key));
}
std::vector<int64_t> Params::ints(const std::string& key) const {
  std::vector<int64_t> out;
  if (!has(key)) return out;
  for (int v : to_ints(str(key))) out.push_back(v);
  return out;
}

Tensor apply_recipe(const Tensor& t, const std::string& recipe) {
  Tensor out = t;
  std::stringstream ss(recipe);
  for (std::string step; std::getline(ss, step, '|');) {
    const std::string args = step.size() > 2 ? step.substr(2) : "";
    switch (step[0]) {
      case 'T':
        out = out.transpose(-1, -2);
        break;
      case 'P':
        out = out.permute(to_ints(args));
        break;
      case 'F':
        out = out.flip(std::stoi(args));
        break;
      case 'B': {
        std::vector<Expr> shape;
        for (int d : to_ints(args)) shape.emplace_back(d);
        out = out.broadcast_to(shape);
        break;
      }
      case 'S': {
        std::vector<int> v;
        std::stringstream parts(args);
        for (std::string x; std::getline(parts, x, ':');) v.push_back(std::stoi(x));
        out = out.slice(v.at(0), v.at(1), v.at(2));
        break;
      }
      default:
        LUM_FAIL() << "unknown recipe step '" << step << "'";
    }
  }
  return out;
}

namespace {

// Compares computed values with expected ones of the same dtype, within atol + rtol |w|.
std::string compare_values(const Buffer& got, const Buffer& want, double atol, double rtol) {
  std::ostringstream err;
  if (got.dtype() != want.dtype()) {
    err << "dtype " << dtype_name(got.dtype()) << ", expected " << dtype_name(want.dtype());
    return err.str();
  }
  size_t bad = 0;
  for (size_t i = 0; i < got.numel(); ++i) {
    const double g = got.get_f64(i), w = want.get_f64(i);
    const bool both_nan = std::isnan(g) && std::isnan(w);
    const bool same_inf = std::isinf(w) && g == w;
    if (both_nan || same_inf || std::fabs(g - w) <= atol + rtol * std::fabs(w)) continue;
    if (bad++ < 4) err << "[" << i << "] got " << g << " expected " << w << "; ";
  }
  if (bad)
    err << bad << " of " << got.numel() << " elements beyond atol " << atol << " rtol " << rtol;
  return err.str();
}

// Compares one computed output with the expected tensor.
std::string compare(const Tensor& out, const ParityCase& c, const Params& params) {
  if (out.shape() != exprs(c.expected.shape))
    return "shape " + to_string(out.shape()) + ", expected " + to_string(exprs(c.expected.shape));
  double atol, rtol;
  tolerance(c.expected.data.dtype(), params, atol, rtol);
  return compare_values(out.data(), c.expected.data, atol, rtol);
}

}  // namespace

std::vector<std::string> run_parity_cases(const std::vector<ParityCase>& cases,
                                          const Backend& backend) {
  Graph cx;
  std::vector<std::string> errors(cases.size());
  std::vector<std::optional<Tensor>> outputs(cases.size());
  for (size_t i = 0; i < cases.size(); ++i) {
    const ParityCase& c = cases[i];
    try {
      std::vector<Tensor> inputs;
      for (size_t k = 0; k < c.inputs.size(); ++k) {
        const FixtureInput& in = c.inputs[k];
        Tensor base = cx.named_tensor("c" + std::to_string(i) + "_in" + std::to_string(k),
                                      exprs(in.base.shape), in.base.data.dtype());
        base.set_buffer(in.base.data);
        inputs.push_back(apply_recipe(base, in.recipe));
      }
      outputs[i] = build_op(cx, c.op, inputs, Params(c.params)).retrieve();
    } catch (const std::exception& e) {
      errors[i] = std::string("building threw: ") + e.what();
    }
  }
  cx.compile(backend);
  cx.execute();
  for (size_t i = 0; i < cases.size(); ++i)
    if (outputs[i]) errors[i] = compare(*outputs[i], cases[i], Params(cases[i].params));
  return errors;
}

std::vector<std::pair<size_t, std::string>> run_half_variants(const std::vector<ParityCase>& cases,
                                                              DType half, const Backend& backend) {
  Graph cx;
  std::vector<std::optional<Tensor>> outputs(cases.size());
  for (size_t i = 0; i < cases.size(); ++i) {
    const ParityCase& c = cases[i];
    bool rounded = false;
    std::vector<Tensor> inputs;
    for (size_t k = 0; k < c.inputs.size(); ++k) {
      const FixtureInput& in = c.inputs[k];
      Buffer data = in.base.data;
      if (data.dtype() == DType::F32) {
        data = Buffer::from_doubles(data.to_f64(), half);
        rounded = true;
      }
      Tensor base = cx.named_tensor("c" + std::to_string(i) + "_in" + std::to_string(k),
                                    exprs(in.base.shape), data.dtype());
      base.set_buffer(std::move(data));
      inputs.push_back(apply_recipe(base, in.recipe));
    }
    if (!rounded) continue;
    try {
      outputs[i] = build_op(cx, c.op, inputs, Params(c.params)).retrieve();
    } catch (const Error&) {
      // An op that refuses the type (an f32-only parameter tensor, say) is not compared.
    }
  }
  cx.compile(reference());
  cx.execute();
  std::vector<std::optional<Buffer>> want(cases.size());
  for (size_t i = 0; i < cases.size(); ++i)
    if (outputs[i]) want[i] = outputs[i]->data();
  cx.compile(backend);
  cx.execute();
  std::vector<std::pair<size_t, std::string>> out;
  for (size_t i = 0; i < cases.size(); ++i) {
    if (!want[i]) continue;
    // Both round every op to the half type; they differ by f32 against double inside an
    // op and by summation order, a unit in the last place, which later ops may magnify
    // near zero: atol scales with the output's size.
    double scale = 1;
    for (double w : want[i]->to_f64())
      if (std::isfinite(w)) scale = std::max(scale, std::fabs(w));
    const double tol = is_float(want[i]->dtype()) ? 2e-2 : 0;
    out.emplace_back(i, compare_values(outputs[i]->data(), *want[i], tol * scale, tol));
  }
  return out;
}

}  // namespace luminal::testing

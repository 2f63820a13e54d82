// Debugging helpers that act after every execute: print values, diff against a file.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <sstream>

#include "luminal/error.hpp"
#include "luminal/tensor.hpp"

namespace luminal {
namespace {

std::string shape_now(const Tensor& t) {
  std::ostringstream os;
  os << '[';
  for (size_t d = 0; d < t.rank(); ++d)
    os << (d ? ", " : "") << t.shape()[d].eval(t.graph().dims());
  os << ']';
  return os.str();
}

}  // namespace

Tensor& Tensor::print(std::string label) {
  retrieve();
  const Tensor self = *this;
  graph().add_after_run([self, label] {
    const std::vector<double> v = self.data().to_f64();
    std::ostringstream os;
    os << label << ": " << dtype_name(self.dtype()) << shape_now(self) << " [";
    const size_t shown = std::min<size_t>(v.size(), 16);
    for (size_t i = 0; i < shown; ++i) os << (i ? ", " : "") << v[i];
    os << (v.size() > shown ? ", ...]" : "]");
    std::fprintf(stderr, "%s\n", os.str().c_str());
  });
  return *this;
}

Tensor& Tensor::diff(std::string path, double atol, double rtol) {
  retrieve();
  const Tensor self = *this;
  graph().add_after_run([self, path, atol, rtol] {
    std::ifstream f(path, std::ios::binary);
    LUM_CHECK(f) << "diff: cannot open '" << path << "'";
    const std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    const Buffer got = self.data();
    LUM_CHECK(bytes.size() == got.bytes())
        << "diff: '" << path << "' holds " << bytes.size() << " bytes; the tensor has "
        << got.numel() << " " << dtype_name(got.dtype()) << " elements (" << got.bytes()
        << " bytes)";
    Buffer want(got.dtype(), got.numel());
    std::copy(bytes.begin(), bytes.end(), static_cast<char*>(want.data()));
    struct Miss {
      size_t index;
      double got, want, excess;
    };
    std::vector<Miss> misses;
    for (size_t i = 0; i < got.numel(); ++i) {
      const double g = got.get_f64(i), w = want.get_f64(i);
      const double err = std::fabs(g - w), allowed = atol + rtol * std::fabs(w);
      if (err > allowed || std::isnan(g) != std::isnan(w))
        misses.push_back({i, g, w, err - allowed});
    }
    if (misses.empty()) return;
    std::sort(misses.begin(), misses.end(),
              [](const Miss& a, const Miss& b) { return a.excess > b.excess; });
    std::ostringstream os;
    os << "diff: " << misses.size() << " of " << got.numel() << " elements differ from '" << path
       << "' beyond atol " << atol << " + rtol " << rtol << "; worst:";
    for (size_t k = 0; k < std::min<size_t>(misses.size(), 5); ++k)
      os << "\n  [" << misses[k].index << "] got " << misses[k].got << ", expected "
         << misses[k].want;
    LUM_FAIL() << os.str();
  });
  return *this;
}

}  // namespace luminal

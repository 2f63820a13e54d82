// Helpers the `luminal` commands share.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string>

namespace luminal::cli {

/// A usage error: one line on stderr, exit status 2.
[[noreturn]] inline void usage_error(const std::string& msg) {
  std::fprintf(stderr, "luminal: %s (see --help)\n", msg.c_str());
  std::exit(2);
}

/// `v` as a number, or a usage error naming `option`.
inline double number(const std::string& option, const std::string& v) {
  char* end = nullptr;
  const double d = std::strtod(v.c_str(), &end);
  if (v.empty() || *end) usage_error("option " + option + " expects a number, got '" + v + "'");
  return d;
}

/// `luminal perplexity`.
int perplexity(int argc, char** argv);

}  // namespace luminal::cli

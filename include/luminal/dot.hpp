// Graphviz helpers shared by the HLIR and e-graph dumps.
#pragma once

#include <string>
#include <string_view>

namespace luminal {

/// Escapes text for a double-quoted DOT label.
inline std::string dot_escape(std::string_view s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out;
}

}  // namespace luminal

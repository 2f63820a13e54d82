// UTF-8 helpers.
#include "models/utf8.hpp"

#include <algorithm>

namespace luminal::models {

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

size_t utf8_length(unsigned char c) {
  if (c < 0x80) return 1;
  if ((c >> 5) == 0x6) return 2;
  if ((c >> 4) == 0xE) return 3;
  if ((c >> 3) == 0x1E) return 4;
  return 0;
}

std::vector<uint32_t> decode_utf8(const std::string& s) {
  std::vector<uint32_t> out;
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    const size_t n = utf8_length(c);
    bool whole = n > 0 && i + n <= s.size();
    for (size_t k = 1; whole && k < n; ++k)
      whole = (static_cast<unsigned char>(s[i + k]) & 0xC0) == 0x80;
    if (!whole) {
      out.push_back(0xFFFD);
      ++i;
      continue;
    }
    uint32_t cp = n == 1 ? c : c & (0x7F >> n);
    for (size_t k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
    out.push_back(cp);
    i += n;
  }
  return out;
}

std::string utf8_lossy(const std::string& s) {
  std::string out;
  size_t i = 0;
  const auto cont = [&](size_t j) {
    return j < s.size() && (static_cast<unsigned char>(s[j]) & 0xC0) == 0x80;
  };
  while (i < s.size()) {
    const auto b = static_cast<unsigned char>(s[i]);
    size_t len = b < 0x80                   ? 1
                 : (b >= 0xC2 && b <= 0xDF) ? 2
                 : (b >= 0xE0 && b <= 0xEF) ? 3
                 : (b >= 0xF0 && b <= 0xF4) ? 4
                                            : 0;
    size_t ok = len ? 1 : 0;
    if (len > 1) {
      const auto b1 = i + 1 < s.size() ? static_cast<unsigned char>(s[i + 1]) : 0;
      const bool first_ok = cont(i + 1) && !(b == 0xE0 && b1 < 0xA0) && !(b == 0xED && b1 > 0x9F) &&
                            !(b == 0xF0 && b1 < 0x90) && !(b == 0xF4 && b1 > 0x8F);
      if (first_ok) {
        ok = 2;
        while (ok < len && cont(i + ok)) ++ok;
      }
    }
    if (len && ok == len) {
      out.append(s, i, len);
      i += len;
    } else {
      out += "\xEF\xBF\xBD";
      i += std::max<size_t>(ok, 1);
    }
  }
  return out;
}

}  // namespace luminal::models

// UTF-8 encoding and decoding shared by the JSON reader and the tokenizers (private to
// src/models).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace luminal::models {

/// Appends code point `cp` as UTF-8.
void append_utf8(std::string& out, uint32_t cp);
inline std::string encode_utf8(uint32_t cp) {
  std::string s;
  append_utf8(s, cp);
  return s;
}

/// Bytes in the sequence a lead byte starts: 1-4, or 0 for a byte that cannot lead.
size_t utf8_length(unsigned char lead);

/// Code points of `s`, read as llama.cpp reads a prompt: a lead byte followed by its
/// continuation bytes is a code point (surrogates and overlong forms included); a byte
/// that cannot lead, or starts a sequence cut short, becomes U+FFFD.
std::vector<uint32_t> decode_utf8(const std::string& s);

/// `s` with each maximal invalid subsequence replaced by U+FFFD, as Rust's
/// String::from_utf8_lossy (which the `tokenizers` library's decoders use).
std::string utf8_lossy(const std::string& s);

}  // namespace luminal::models

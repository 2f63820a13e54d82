// BertNormalizer, BertPreTokenizer and the WordPiece model, as the HF tokenizers library
// has them.
#include "models/bert_steps.hpp"

#include <unicode/normalizer2.h>
#include <unicode/uchar.h>

#include "luminal/error.hpp"
#include "models/utf8.hpp"

namespace luminal::models {
namespace {

bool is_whitespace(UChar32 c) {
  return c == '\t' || c == '\n' || c == '\r' || u_hasBinaryProperty(c, UCHAR_WHITE_SPACE);
}

// Rust's unicode "other" categories (Cc, Cf, Cs, Co, Cn); tab and newlines count as space.
bool is_control(UChar32 c) {
  if (c == '\t' || c == '\n' || c == '\r') return false;
  const int8_t t = u_charType(c);
  return t == U_CONTROL_CHAR || t == U_FORMAT_CHAR || t == U_SURROGATE ||
         t == U_PRIVATE_USE_CHAR || t == U_UNASSIGNED;
}

bool is_chinese(UChar32 c) {
  return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) ||
         (c >= 0x20000 && c <= 0x2A6DF) || (c >= 0x2A700 && c <= 0x2B73F) ||
         (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) ||
         (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

bool is_punctuation(UChar32 c) {
  if (c < 0x80) return std::ispunct(static_cast<int>(c)) != 0;
  const int8_t t = u_charType(c);
  return t == U_CONNECTOR_PUNCTUATION || t == U_DASH_PUNCTUATION || t == U_START_PUNCTUATION ||
         t == U_END_PUNCTUATION || t == U_INITIAL_PUNCTUATION || t == U_FINAL_PUNCTUATION ||
         t == U_OTHER_PUNCTUATION;
}

template <class F>
icu::UnicodeString map_chars(const icu::UnicodeString& u, F f) {
  icu::UnicodeString out;
  for (int32_t k = 0; k < u.length(); k = u.moveIndex32(k, 1)) f(u.char32At(k), out);
  return out;
}

}  // namespace

void bert_normalize(icu::UnicodeString& u, const BertNormalizerOptions& o) {
  if (o.clean_text)
    u = map_chars(u, [](UChar32 c, icu::UnicodeString& out) {
      if (c == 0 || c == 0xFFFD || is_control(c)) return;
      out.append(is_whitespace(c) ? UChar32{' '} : c);
    });
  if (o.handle_chinese_chars)
    u = map_chars(u, [](UChar32 c, icu::UnicodeString& out) {
      if (!is_chinese(c)) return void(out.append(c));
      out.append(UChar32{' '}).append(c).append(UChar32{' '});
    });
  if (o.strip_accents) {
    UErrorCode status = U_ZERO_ERROR;
    const icu::Normalizer2* nfd = icu::Normalizer2::getNFDInstance(status);
    LUM_CHECK(U_SUCCESS(status)) << "ICU NFD: " << u_errorName(status);
    u = map_chars(nfd->normalize(u, status), [](UChar32 c, icu::UnicodeString& out) {
      if (u_charType(c) != U_NON_SPACING_MARK) out.append(c);
    });
    LUM_CHECK(U_SUCCESS(status)) << "ICU NFD: " << u_errorName(status);
  }
  if (o.lowercase)  // character by character, as Rust's char::to_lowercase: no context
    u = map_chars(u, [](UChar32 c, icu::UnicodeString& out) {
      if (c == 0x130)  // the one full lower-case mapping longer than a character
        out.append(UChar32{'i'}).append(UChar32{0x307});
      else
        out.append(u_tolower(c));
    });
}

void bert_pre_tokenize(const icu::UnicodeString& piece, std::vector<icu::UnicodeString>& out) {
  icu::UnicodeString word;
  const auto flush = [&] {
    if (!word.isEmpty()) out.push_back(word);
    word.remove();
  };
  for (int32_t k = 0; k < piece.length(); k = piece.moveIndex32(k, 1)) {
    const UChar32 c = piece.char32At(k);
    if (u_hasBinaryProperty(c, UCHAR_WHITE_SPACE)) {
      flush();
    } else if (is_punctuation(c)) {
      flush();
      out.push_back(icu::UnicodeString(c));
    } else {
      word.append(c);
    }
  }
  flush();
}

void wordpiece_encode(const std::string& word, const std::function<int32_t(const std::string&)>& find,
                      const std::string& prefix, int64_t max_chars, int32_t unk,
                      std::vector<int32_t>& out) {
  const std::vector<uint32_t> chars = decode_utf8(word);
  const auto fail = [&] {
    LUM_CHECK(unk >= 0) << "tokenizer cannot encode '" << word << "' and has no unk_token";
    out.push_back(unk);
  };
  if (static_cast<int64_t>(chars.size()) > max_chars) return fail();
  std::vector<int32_t> pieces;
  for (size_t start = 0; start < chars.size();) {
    int32_t found = -1;
    size_t end = chars.size();
    for (; end > start; --end) {
      std::string sub = start > 0 ? prefix : "";
      for (size_t k = start; k < end; ++k) append_utf8(sub, chars[k]);
      if ((found = find(sub)) >= 0) break;
    }
    if (found < 0) return fail();
    pieces.push_back(found);
    start = end;
  }
  out.insert(out.end(), pieces.begin(), pieces.end());
}

}  // namespace luminal::models

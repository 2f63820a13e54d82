// Byte-level BPE from a Hugging Face tokenizer.json.
#include "luminal/models/bpe_tokenizer.hpp"

#include <unicode/normalizer2.h>
#include <unicode/regex.h>
#include <unicode/unistr.h>

#include <algorithm>
#include <array>
#include <fstream>
#include <iterator>
#include <limits>

#include "luminal/error.hpp"
#include "models/json.hpp"

namespace luminal::models {
namespace {

// The GPT-2 split used by a ByteLevel pre-tokenizer with use_regex.
constexpr const char* kGpt2Split =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

std::string utf8(char32_t c) {
  std::string s;
  if (c < 0x80) {
    s += static_cast<char>(c);
  } else if (c < 0x800) {
    s += static_cast<char>(0xC0 | (c >> 6));
    s += static_cast<char>(0x80 | (c & 0x3F));
  } else if (c < 0x10000) {
    s += static_cast<char>(0xE0 | (c >> 12));
    s += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (c & 0x3F));
  } else {
    s += static_cast<char>(0xF0 | (c >> 18));
    s += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
    s += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (c & 0x3F));
  }
  return s;
}

// GPT-2's reversible map from bytes to printable code points: printable Latin-1 bytes
// stand for themselves, the rest take 256, 257, ... in byte order.
std::array<char32_t, 256> byte_chars() {
  std::array<char32_t, 256> m{};
  char32_t next = 256;
  for (int b = 0; b < 256; ++b) {
    const bool printable =
        (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    m[static_cast<size_t>(b)] = printable ? static_cast<char32_t>(b) : next++;
  }
  return m;
}

// Oniguruma's \s is Unicode White_Space (with \v and U+0085); ICU's is narrower.
std::string to_icu_pattern(const std::string& p) {
  std::string out;
  for (size_t i = 0; i < p.size(); ++i) {
    if (p[i] == '\\' && i + 1 < p.size()) {
      const char c = p[++i];
      out += c == 's' ? "\\p{White_Space}" : c == 'S' ? "\\P{White_Space}" : std::string{'\\', c};
    } else {
      out += p[i];
    }
  }
  return out;
}

// Decodes UTF-8, replacing each maximal invalid subsequence with U+FFFD as Rust's
// from_utf8_lossy does.
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

const Json& member(const Json& j, const char* key, const std::string& path) {
  const Json* v = j.find(key);
  LUM_CHECK(v) << path << ": '" << key << "' is missing";
  return *v;
}

std::string type_of(const Json& j) {
  const Json* t = j.find("type");
  return t && t->is_string() ? t->string() : "";
}

}  // namespace

struct BpeTokenizer::Impl {
  std::vector<std::unique_ptr<icu::RegexPattern>> splits;  // applied in order, matches isolated
  const icu::Normalizer2* normalizer = nullptr;
  bool add_prefix_space = false;
  std::array<char32_t, 256> to_char = byte_chars();
  std::unordered_map<char32_t, unsigned char> to_byte;

  void add_split(const std::string& pattern, const std::string& path) {
    UErrorCode status = U_ZERO_ERROR;
    UParseError where{};
    auto re = std::unique_ptr<icu::RegexPattern>(icu::RegexPattern::compile(
        icu::UnicodeString::fromUTF8(to_icu_pattern(pattern)), where, status));
    LUM_CHECK(U_SUCCESS(status) && re)
        << path << ": cannot compile pre-tokenizer regex '" << pattern << "' ("
        << u_errorName(status) << " at offset " << where.offset << ")";
    splits.push_back(std::move(re));
  }

  void add_normalizer(const Json& n, const std::string& path) {
    const std::string t = type_of(n);
    UErrorCode status = U_ZERO_ERROR;
    if (t == "Sequence") {
      for (const Json& part : member(n, "normalizers", path).array()) add_normalizer(part, path);
      return;
    }
    LUM_CHECK(!normalizer) << path << ": more than one Unicode normalizer";
    if (t == "NFC")
      normalizer = icu::Normalizer2::getNFCInstance(status);
    else if (t == "NFKC")
      normalizer = icu::Normalizer2::getNFKCInstance(status);
    else if (t == "NFD")
      normalizer = icu::Normalizer2::getNFDInstance(status);
    else
      LUM_FAIL() << path << ": normalizer '" << t
                 << "' is not supported (supported: NFC, NFKC, NFD)";
    LUM_CHECK(U_SUCCESS(status)) << "ICU normalizer " << t << ": " << u_errorName(status);
  }

  void add_pre_tokenizer(const Json& p, const std::string& path) {
    const std::string t = type_of(p);
    if (t == "Sequence") {
      for (const Json& part : member(p, "pretokenizers", path).array())
        add_pre_tokenizer(part, path);
    } else if (t == "Split") {
      const Json& pattern = member(p, "pattern", path);
      const Json* behavior = p.find("behavior");
      const Json* invert = p.find("invert");
      LUM_CHECK(behavior && behavior->is_string() && behavior->string() == "Isolated" &&
                (!invert || !std::get<bool>(invert->v)))
          << path << ": only Split pre-tokenizers with behavior Isolated are supported";
      if (const Json* re = pattern.find("Regex")) {
        add_split(re->string(), path);
      } else {
        // A literal string: escape it into a regex.
        std::string lit;
        for (char c : member(pattern, "String", path).string()) {
          if (std::string("\\^$.|?*+()[]{}").find(c) != std::string::npos) lit += '\\';
          lit += c;
        }
        add_split(lit, path);
      }
    } else if (t == "ByteLevel") {
      const Json* prefix = p.find("add_prefix_space");
      add_prefix_space =
          prefix && std::holds_alternative<bool>(prefix->v) && std::get<bool>(prefix->v);
      const Json* use_regex = p.find("use_regex");
      if (!use_regex || !std::holds_alternative<bool>(use_regex->v) || std::get<bool>(use_regex->v))
        add_split(kGpt2Split, path);
    } else {
      LUM_FAIL() << path << ": pre-tokenizer '" << t
                 << "' is not supported (supported: ByteLevel, Split, Sequence)";
    }
  }

  // Cuts `text` at every match of each split in turn (matches and gaps both kept).
  std::vector<icu::UnicodeString> pre_tokenize(const icu::UnicodeString& text) const {
    std::vector<icu::UnicodeString> pieces{text};
    for (const auto& re : splits) {
      std::vector<icu::UnicodeString> next;
      for (const icu::UnicodeString& piece : pieces) {
        UErrorCode status = U_ZERO_ERROR;
        std::unique_ptr<icu::RegexMatcher> m(re->matcher(piece, status));
        LUM_CHECK(U_SUCCESS(status)) << "tokenizer regex: " << u_errorName(status);
        int32_t last = 0;
        while (m->find(status)) {
          const int32_t start = m->start(status), end = m->end(status);
          if (start == end) continue;
          // Copies: a substring aliasing `piece` would dangle once `pieces` is replaced.
          if (start > last) next.emplace_back(piece, last, start - last);
          next.emplace_back(piece, start, end - start);
          last = end;
        }
        if (last < piece.length()) next.emplace_back(piece, last);
      }
      pieces = std::move(next);
    }
    return pieces;
  }
};

BpeTokenizer::~BpeTokenizer() = default;
BpeTokenizer::BpeTokenizer(BpeTokenizer&&) noexcept = default;

BpeTokenizer::BpeTokenizer(const std::string& path) : impl_(std::make_unique<Impl>()) {
  std::ifstream f(path, std::ios::binary);
  LUM_CHECK(f) << "cannot open tokenizer " << path;
  const std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  const Json j = parse_json(text, path);
  LUM_CHECK(j.is_object()) << path << ": tokenizer is not a JSON object";

  const Json& model = member(j, "model", path);
  const std::string model_type = type_of(model);
  LUM_CHECK(model_type == "BPE") << path << ": tokenizer model '" << model_type
                                 << "' is not supported (supported: byte-level BPE)";
  if (const Json* im = model.find("ignore_merges"); im && std::holds_alternative<bool>(im->v))
    ignore_merges_ = std::get<bool>(im->v);
  for (const auto& [token, id] : member(model, "vocab", path).object()) {
    LUM_CHECK(id.is_int() && id.integer() >= 0 && id.integer() < (1 << 24))
        << path << ": vocabulary id of '" << token << "' is out of range";
    const auto i = static_cast<size_t>(id.integer());
    if (i >= tokens_.size()) tokens_.resize(i + 1);
    tokens_[i] = token;
    ids_[token] = static_cast<int32_t>(i);
  }
  is_added_.assign(tokens_.size(), false);
  if (const Json* added = j.find("added_tokens"); added && added->is_array()) {
    for (const Json& a : added->array()) {
      const int64_t id = member(a, "id", path).integer();
      const std::string& content = member(a, "content", path).string();
      LUM_CHECK(id >= 0 && id < (1 << 24))
          << path << ": added token '" << content << "' has id " << id;
      const auto i = static_cast<size_t>(id);
      if (i >= tokens_.size()) tokens_.resize(i + 1), is_added_.resize(i + 1, false);
      tokens_[i] = content;
      is_added_[i] = true;
      ids_[content] = static_cast<int32_t>(i);
      added_.push_back(content);
    }
  }
  std::sort(added_.begin(), added_.end(),
            [](const auto& a, const auto& b) { return a.size() > b.size(); });

  int32_t rank = 0;
  for (const Json& m : member(model, "merges", path).array()) {
    std::string left, right;
    if (m.is_string()) {  // "a b"
      const size_t sp = m.string().find(' ', 1);
      LUM_CHECK(sp != std::string::npos) << path << ": merge '" << m.string() << "' has no space";
      left = m.string().substr(0, sp), right = m.string().substr(sp + 1);
    } else {
      LUM_CHECK(m.is_array() && m.array().size() == 2)
          << path << ": merge " << rank << " is not a pair";
      left = m.array()[0].string(), right = m.array()[1].string();
    }
    const int32_t a = find(left), b = find(right), merged = find(left + right);
    LUM_CHECK(a >= 0 && b >= 0 && merged >= 0) << path << ": merge '" << left << " " << right
                                               << "' names a token missing from the vocabulary";
    merges_.emplace((static_cast<uint64_t>(a) << 32) | static_cast<uint32_t>(b),
                    std::pair{rank++, merged});
  }

  if (const Json* n = j.find("normalizer"); n && n->is_object()) impl_->add_normalizer(*n, path);
  if (const Json* p = j.find("pre_tokenizer"); p && p->is_object())
    impl_->add_pre_tokenizer(*p, path);
  if (const Json* d = j.find("decoder"); d && d->is_object()) {
    LUM_CHECK(type_of(*d) == "ByteLevel")
        << path << ": decoder '" << type_of(*d) << "' is not supported (supported: ByteLevel)";
  }
  for (int b = 0; b < 256; ++b)
    impl_->to_byte[impl_->to_char[static_cast<size_t>(b)]] = static_cast<unsigned char>(b);
}

int32_t BpeTokenizer::find(const std::string& token) const {
  const auto it = ids_.find(token);
  return it == ids_.end() ? -1 : it->second;
}

void BpeTokenizer::encode_word(const std::string& word, std::vector<int32_t>& out) const {
  // Byte-level: each byte becomes one printable character.
  std::vector<int32_t> symbols;
  std::string mapped;
  for (unsigned char b : word) {
    const std::string c = utf8(impl_->to_char[b]);
    mapped += c;
    const int32_t id = find(c);
    LUM_CHECK(id >= 0) << "tokenizer vocabulary lacks the byte-level character for byte "
                       << static_cast<int>(b);
    symbols.push_back(id);
  }
  if (ignore_merges_) {
    if (const int32_t whole = find(mapped); whole >= 0) {
      out.push_back(whole);
      return;
    }
  }
  // Repeatedly merge the adjacent pair of lowest rank.
  while (symbols.size() > 1) {
    int32_t best_rank = std::numeric_limits<int32_t>::max(), best_id = -1;
    size_t best = 0;
    for (size_t i = 0; i + 1 < symbols.size(); ++i) {
      const auto it = merges_.find((static_cast<uint64_t>(symbols[i]) << 32) |
                                   static_cast<uint32_t>(symbols[i + 1]));
      if (it != merges_.end() && it->second.first < best_rank)
        best_rank = it->second.first, best_id = it->second.second, best = i;
    }
    if (best_id < 0) break;
    symbols[best] = best_id;
    symbols.erase(symbols.begin() + static_cast<std::ptrdiff_t>(best) + 1);
  }
  out.insert(out.end(), symbols.begin(), symbols.end());
}

std::vector<int32_t> BpeTokenizer::encode(const std::string& text) const {
  std::vector<int32_t> out;
  const auto encode_plain = [&](const std::string& segment) {
    if (segment.empty()) return;
    icu::UnicodeString u = icu::UnicodeString::fromUTF8(segment);
    if (impl_->normalizer) {
      UErrorCode status = U_ZERO_ERROR;
      u = impl_->normalizer->normalize(u, status);
      LUM_CHECK(U_SUCCESS(status)) << "tokenizer normalizer: " << u_errorName(status);
    }
    if (impl_->add_prefix_space && !u.startsWith(icu::UnicodeString(u' '))) u.insert(0, u' ');
    for (const icu::UnicodeString& piece : impl_->pre_tokenize(u)) {
      std::string word;
      piece.toUTF8String(word);
      encode_word(word, out);
    }
  };
  // Added tokens are matched in the raw text, longest first.
  size_t start = 0, i = 0;
  while (i < text.size()) {
    const auto hit = std::find_if(added_.begin(), added_.end(), [&](const std::string& a) {
      return text.compare(i, a.size(), a) == 0;
    });
    if (hit == added_.end()) {
      ++i;
      continue;
    }
    encode_plain(text.substr(start, i - start));
    out.push_back(find(*hit));
    i += hit->size();
    start = i;
  }
  encode_plain(text.substr(start));
  return out;
}

std::string BpeTokenizer::decode(const std::vector<int32_t>& ids) const {
  std::string bytes;
  for (int32_t id : ids) {
    LUM_CHECK(id >= 0 && static_cast<size_t>(id) < tokens_.size())
        << "token id " << id << " is out of range";
    const auto i = static_cast<size_t>(id);
    if (is_added_[i]) {
      bytes += tokens_[i];
      continue;
    }
    // Back from printable characters to bytes.
    const icu::UnicodeString u = icu::UnicodeString::fromUTF8(tokens_[i]);
    for (int32_t k = 0; k < u.length(); k = u.moveIndex32(k, 1)) {
      const auto c = static_cast<char32_t>(u.char32At(k));
      const auto it = impl_->to_byte.find(c);
      bytes += it != impl_->to_byte.end() ? std::string(1, static_cast<char>(it->second)) : utf8(c);
    }
  }
  return utf8_lossy(bytes);
}

}  // namespace luminal::models

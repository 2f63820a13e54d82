// Interning of operator symbols and attribute lists.
#include "luminal/egraph/ids.hpp"

#include <bit>
#include <deque>
#include <map>
#include <mutex>
#include <sstream>
#include <unordered_map>

#include "luminal/error.hpp"

namespace luminal::eg {
namespace {

struct SymbolTable {
  std::mutex mu;
  std::deque<std::string> names;  // stable addresses
  std::unordered_map<std::string_view, uint32_t> index;
  SymbolTable() { intern(""); }
  uint32_t intern(std::string_view s) {
    std::lock_guard lock(mu);
    if (auto it = index.find(s); it != index.end()) return it->second;
    names.emplace_back(s);
    const auto id = static_cast<uint32_t>(names.size() - 1);
    index.emplace(names.back(), id);
    return id;
  }
};

SymbolTable& symbols() {
  static SymbolTable* t = new SymbolTable();
  return *t;
}

struct AttrListTable {
  std::mutex mu;
  std::deque<std::vector<Attr>> lists;  // stable addresses
  std::map<std::vector<std::pair<int, int64_t>>, uint32_t> index;
  AttrListTable() { lists.emplace_back(); }
};

AttrListTable& attr_lists() {
  static AttrListTable* t = new AttrListTable();
  return *t;
}

}  // namespace

Symbol Symbol::of(std::string_view name) {
  return Symbol{symbols().intern(name)};
}

std::string_view Symbol::name() const {
  auto& t = symbols();
  std::lock_guard lock(t.mu);
  return t.names.at(v);
}

Attr Attr::of_float(double v) {
  return {Kind::Float, std::bit_cast<int64_t>(v)};
}
double Attr::as_float() const {
  return kind == Kind::Float ? std::bit_cast<double>(bits) : static_cast<double>(bits);
}

std::string Attr::to_string() const {
  std::ostringstream os;
  switch (kind) {
    case Kind::Int:
      os << bits;
      break;
    case Kind::Float:
      os << as_float() << (as_float() == static_cast<int64_t>(as_float()) ? ".0" : "");
      break;
    case Kind::Str:
      os << '"' << Symbol{static_cast<uint32_t>(bits)}.name() << '"';
      break;
    case Kind::Expr:
      os << '{' << as_expr() << '}';
      break;
    case Kind::DType:
      os << '#' << dtype_name(static_cast<DType>(bits));
      break;
  }
  return os.str();
}

AttrList AttrList::of(const std::vector<Attr>& attrs) {
  if (attrs.empty()) return AttrList{0};
  std::vector<std::pair<int, int64_t>> key;
  key.reserve(attrs.size());
  for (const Attr& a : attrs) key.emplace_back(static_cast<int>(a.kind), a.bits);
  auto& t = attr_lists();
  std::lock_guard lock(t.mu);
  if (auto it = t.index.find(key); it != t.index.end()) return AttrList{it->second};
  t.lists.push_back(attrs);
  const auto id = static_cast<uint32_t>(t.lists.size() - 1);
  t.index.emplace(std::move(key), id);
  return AttrList{id};
}

const std::vector<Attr>& AttrList::get() const {
  auto& t = attr_lists();
  std::lock_guard lock(t.mu);
  return t.lists.at(v);
}

}  // namespace luminal::eg

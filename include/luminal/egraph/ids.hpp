// Typed ids and attribute values shared by the e-graph engine.
//
// An e-node is an operator symbol, an attribute list (interned, so a node compares by
// id) and child e-class ids. Attributes carry what is not a child: an axis, a constant,
// a view's expressions, a dtype, a name.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "luminal/dtype.hpp"
#include "luminal/expr.hpp"

namespace luminal::eg {

/// An e-class id; compare canonical ids (EGraph::find) to test equivalence.
struct ClassId {
  uint32_t v = UINT32_MAX;
  bool valid() const { return v != UINT32_MAX; }
  bool operator==(const ClassId&) const = default;
  auto operator<=>(const ClassId&) const = default;
};

/// An interned operator name.
struct Symbol {
  uint32_t v = 0;
  bool operator==(const Symbol&) const = default;
  static Symbol of(std::string_view name);
  std::string_view name() const;
};

/// One attribute value.
struct Attr {
  enum class Kind : uint8_t { Int, Float, Str, Expr, DType } kind = Kind::Int;
  int64_t bits = 0;  // the int, the double's bits, a Symbol id, an Expr id, a DType

  static Attr of_int(int64_t v) { return {Kind::Int, v}; }
  static Attr of_float(double v);
  static Attr of_str(std::string_view s) { return {Kind::Str, Symbol::of(s).v}; }
  static Attr of_expr(luminal::Expr e) { return {Kind::Expr, e.id()}; }
  static Attr of_dtype(luminal::DType t) { return {Kind::DType, static_cast<int64_t>(t)}; }
  double as_float() const;
  luminal::Expr as_expr() const { return luminal::Expr::from_id(static_cast<uint32_t>(bits)); }
  std::string to_string() const;
  bool operator==(const Attr&) const = default;
};

/// An interned list of attributes; id 0 is the empty list.
struct AttrList {
  uint32_t v = 0;
  bool operator==(const AttrList&) const = default;
  static AttrList of(const std::vector<Attr>& attrs);
  const std::vector<Attr>& get() const;
  bool empty() const { return v == 0; }
};

}  // namespace luminal::eg

template <>
struct std::hash<luminal::eg::ClassId> {
  size_t operator()(luminal::eg::ClassId c) const noexcept { return c.v; }
};

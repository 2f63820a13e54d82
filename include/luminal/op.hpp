// The primitive op enum and its constexpr trait table, generated from ops.def.
// Passes and backends ask traits (arity, category) rather than matching names.
#pragma once

#include <cstdint>
#include <string_view>

namespace luminal {

enum class Op : uint8_t {
#define LUM_OP(name, arity, category, float_only, commutative) name,
#include "luminal/ops.def"
#undef LUM_OP
};

enum class OpCategory : uint8_t { Source, Unary, Binary, Ternary, Reduce, Indexing, Custom };

struct OpTraits {
  std::string_view name;
  int arity;  // -1: any number of inputs
  OpCategory category;
  bool float_only;   // inputs must be floating point
  bool commutative;  // f(a, b) == f(b, a)
};

inline constexpr OpTraits kOpTraits[] = {
#define LUM_OP(name, arity, category, float_only, commutative) \
  {#name, arity, OpCategory::category, float_only, commutative},
#include "luminal/ops.def"
#undef LUM_OP
};

inline constexpr size_t kNumOps = std::size(kOpTraits);

constexpr const OpTraits& traits(Op op) {
  return kOpTraits[static_cast<size_t>(op)];
}
constexpr std::string_view op_name(Op op) {
  return traits(op).name;
}
constexpr bool is_elementwise(Op op) {
  const OpCategory c = traits(op).category;
  return c == OpCategory::Unary || c == OpCategory::Binary || c == OpCategory::Ternary;
}

}  // namespace luminal

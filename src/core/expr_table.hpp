// The process-wide interning table behind luminal::Expr (private to src/core).
//
// Nodes live in fixed-size chunks that never move, so a published node can be read
// without a lock; inserting and the simplification memo are guarded by one mutex.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "luminal/expr.hpp"

namespace luminal::expr_detail {

inline constexpr uint32_t kNoId = 0xffffffffu;

struct ExprNode {
  ExprOp op;
  uint32_t a = 0;     // lhs id, or the name id of a variable
  uint32_t b = 0;     // rhs id
  int64_t value = 0;  // constant value
  int64_t lo = 0;     // proven bounds (for variables: the declared ones)
  int64_t hi = 0;
  uint64_t shash = 0;  // structural hash, stable across runs
};

/// The lookup key of a node: for variables the bounds are part of its identity.
struct NodeKey {
  ExprOp op;
  uint32_t a, b;
  int64_t value, lo, hi;
  bool operator==(const NodeKey&) const = default;
};

class ExprTable {
 public:
  static ExprTable& get();

  const ExprNode& node(uint32_t id) const {
    return chunks_[id >> kChunkBits][id & (kChunkSize - 1)];
  }
  /// Returns the id of the node with this key, creating it (bounds computed) if new.
  uint32_t intern(const NodeKey& key) { return intern_with_memo(key).first; }
  /// intern() and memo() under one lock.
  std::pair<uint32_t, uint32_t> intern_with_memo(const NodeKey& key);
  /// Interns a node that is its own simplified form.
  uint32_t intern_canonical(const NodeKey& key);
  uint32_t intern_name(std::string_view name);
  /// The name of an interned variable; the view stays valid for the process lifetime.
  std::string_view name(uint32_t name_id) const;

  /// The simplified form of a raw node, kNoId if not computed yet.
  uint32_t memo(uint32_t raw) const;
  void set_memo(uint32_t raw, uint32_t simplified);

 private:
  ExprTable();
  static constexpr uint32_t kChunkBits = 16;
  static constexpr uint32_t kChunkSize = 1u << kChunkBits;
  static constexpr uint32_t kMaxChunks = 1u << 14;

  uint32_t find_or_insert_locked(const NodeKey& key);
  uint32_t insert_locked(const NodeKey& key, uint32_t tag);
  void grow_locked();

  mutable std::mutex mu_;
  std::array<ExprNode*, kMaxChunks> chunks_{};
  std::vector<std::unique_ptr<ExprNode[]>> owned_;
  std::vector<uint32_t> memo_;
  uint32_t size_ = 0;
  // Open addressing. The hash tag lets probing and growth skip reading nodes.
  struct Slot {
    uint32_t tag = 0;  // low 32 bits of the key hash
    uint32_t id1 = 0;  // node id + 1; 0 = empty
  };
  std::vector<Slot> slots_;
  std::vector<std::unique_ptr<const std::string>> names_;  // stable addresses
  struct NameHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  std::unordered_map<std::string, uint32_t, NameHash, std::equal_to<>> name_index_;
};

inline const ExprNode& node_of(Expr e) {
  return ExprTable::get().node(e.id());
}

/// Saturating arithmetic on bounds (kExprInf / kExprNegInf act as infinities).
int64_t sat_add(int64_t a, int64_t b);
int64_t sat_mul(int64_t a, int64_t b);
/// Floor division / modulo on int64 (b != 0).
int64_t floor_div(int64_t a, int64_t b);
int64_t floor_mod(int64_t a, int64_t b);

/// Folds a binary op on constants; nullopt where undefined (division by zero).
std::optional<int64_t> fold(ExprOp op, int64_t a, int64_t b);

/// Applies the simplifier to `op(a, b)` whose children are already simplified.
Expr build(ExprOp op, Expr a, Expr b);

}  // namespace luminal::expr_detail

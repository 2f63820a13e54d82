// The interning table, bounds analysis and integer helpers behind luminal::Expr.
#include "core/expr_table.hpp"

#include <algorithm>
#include <bit>

#include "luminal/error.hpp"
#include "luminal/hash.hpp"

namespace luminal::expr_detail {
namespace {

uint64_t mix(uint64_t h, uint64_t v) {
  return hash_mix(h, v) * 0xff51afd7ed558ccdull;
}

uint64_t key_hash(const NodeKey& k) {
  uint64_t h = static_cast<uint64_t>(k.op);
  h = mix(h, k.a);
  h = mix(h, k.b);
  h = mix(h, static_cast<uint64_t>(k.value));
  h = mix(h, static_cast<uint64_t>(k.lo));
  return hash_avalanche(mix(h, static_cast<uint64_t>(k.hi)));
}

bool is_inf(int64_t v) {
  return v == kExprInf || v == kExprNegInf;
}

// Floor division where an infinite numerator stays infinite.
int64_t bound_div(int64_t a, int64_t b) {
  if (is_inf(a)) return (a > 0) == (b > 0) ? kExprInf : kExprNegInf;
  return floor_div(a, b);
}

void compute_bounds(ExprNode& n, const ExprTable& t) {
  if (n.op == ExprOp::Const) {
    n.lo = n.hi = n.value;
    return;
  }
  if (n.op == ExprOp::Var) return;  // declared bounds come with the key
  const ExprNode& a = t.node(n.a);
  const ExprNode& b = t.node(n.b);
  int64_t lo = kExprNegInf, hi = kExprInf;
  switch (n.op) {
    case ExprOp::Add:
      lo = sat_add(a.lo, b.lo);
      hi = sat_add(a.hi, b.hi);
      break;
    case ExprOp::Mul: {
      int64_t c[4] = {sat_mul(a.lo, b.lo), sat_mul(a.lo, b.hi), sat_mul(a.hi, b.lo),
                      sat_mul(a.hi, b.hi)};
      lo = *std::min_element(c, c + 4);
      hi = *std::max_element(c, c + 4);
      break;
    }
    case ExprOp::Div:
      if (b.lo > 0 && !is_inf(b.hi)) {
        // For a positive divisor, a/b is monotone in a and, for fixed a, in b.
        lo = std::min(bound_div(a.lo, b.lo), bound_div(a.lo, b.hi));
        hi = std::max(bound_div(a.hi, b.lo), bound_div(a.hi, b.hi));
      } else if (b.lo > 0 && a.lo >= 0) {
        lo = 0;
        hi = a.hi;
      } else if (b.hi < 0 && b.lo == b.hi) {
        lo = bound_div(a.hi, b.lo);
        hi = bound_div(a.lo, b.lo);
      }
      break;
    case ExprOp::Mod:
      if (b.lo > 0) {
        if (a.lo >= 0 && a.hi < b.lo) {
          lo = a.lo;
          hi = a.hi;
        } else {
          lo = 0;
          hi = b.hi == kExprInf ? kExprInf : b.hi - 1;
          if (a.lo >= 0) hi = std::min(hi, a.hi);
        }
      } else if (b.hi < 0 && b.lo > kExprNegInf) {
        lo = b.lo + 1;
        hi = 0;
      }
      break;
    case ExprOp::Min:
      lo = std::min(a.lo, b.lo);
      hi = std::min(a.hi, b.hi);
      break;
    case ExprOp::Max:
      lo = std::max(a.lo, b.lo);
      hi = std::max(a.hi, b.hi);
      break;
    case ExprOp::Lt:
      lo = a.hi < b.lo ? 1 : 0;
      hi = a.lo >= b.hi ? 0 : 1;
      break;
    case ExprOp::Ge:
      lo = a.lo >= b.hi ? 1 : 0;
      hi = a.hi < b.lo ? 0 : 1;
      break;
    case ExprOp::And:
    case ExprOp::Or:
      lo = 0;
      hi = 1;
      break;
    case ExprOp::Const:
    case ExprOp::Var:
      break;
  }
  n.lo = lo;
  n.hi = hi;
}

}  // namespace

int64_t sat_add(int64_t a, int64_t b) {
  if (a == kExprInf || b == kExprInf) return kExprInf;
  if (a == kExprNegInf || b == kExprNegInf) return kExprNegInf;
  int64_t r;
  if (__builtin_add_overflow(a, b, &r)) return a > 0 ? kExprInf : kExprNegInf;
  return r;
}

int64_t sat_mul(int64_t a, int64_t b) {
  if (a == 0 || b == 0) return 0;
  const bool neg = (a < 0) != (b < 0);
  if (is_inf(a) || is_inf(b)) return neg ? kExprNegInf : kExprInf;
  int64_t r;
  if (__builtin_mul_overflow(a, b, &r)) return neg ? kExprNegInf : kExprInf;
  return r;
}

int64_t floor_div(int64_t a, int64_t b) {
  if (b == -1) return a == kExprNegInf ? kExprInf : -a;
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

int64_t floor_mod(int64_t a, int64_t b) {
  if (b == -1) return 0;
  int64_t r = a % b;
  if (r != 0 && ((r < 0) != (b < 0))) r += b;
  return r;
}

std::optional<int64_t> fold(ExprOp op, int64_t a, int64_t b) {
  int64_t r;
  switch (op) {
    case ExprOp::Add:
      if (__builtin_add_overflow(a, b, &r)) return std::nullopt;
      return r;
    case ExprOp::Mul:
      if (__builtin_mul_overflow(a, b, &r)) return std::nullopt;
      return r;
    case ExprOp::Div:
      if (b == 0) return std::nullopt;
      return floor_div(a, b);
    case ExprOp::Mod:
      if (b == 0) return std::nullopt;
      return floor_mod(a, b);
    case ExprOp::Min:
      return std::min(a, b);
    case ExprOp::Max:
      return std::max(a, b);
    case ExprOp::Lt:
      return a < b ? 1 : 0;
    case ExprOp::Ge:
      return a >= b ? 1 : 0;
    case ExprOp::And:
      return (a != 0 && b != 0) ? 1 : 0;
    case ExprOp::Or:
      return (a != 0 || b != 0) ? 1 : 0;
    case ExprOp::Const:
    case ExprOp::Var:
      break;
  }
  return std::nullopt;
}

ExprTable& ExprTable::get() {
  static ExprTable* table = new ExprTable();  // never destroyed: Exprs outlive statics
  return *table;
}

ExprTable::ExprTable() {
  slots_.assign(1u << 12, Slot{});
  // Id 0 is the constant 0, so a default-constructed Expr is zero.
  const NodeKey zero{ExprOp::Const, 0, 0, 0, 0, 0};
  std::lock_guard lock(mu_);
  insert_locked(zero, static_cast<uint32_t>(key_hash(zero)));
}

namespace {

bool same_key(const ExprNode& n, const NodeKey& k) {
  if (n.op != k.op || n.a != k.a || n.b != k.b || n.value != k.value) return false;
  return n.op != ExprOp::Var || (n.lo == k.lo && n.hi == k.hi);
}

}  // namespace

uint32_t ExprTable::find_or_insert_locked(const NodeKey& key) {
  const auto tag = static_cast<uint32_t>(key_hash(key));
  const size_t mask = slots_.size() - 1;
  for (size_t i = tag & mask;; i = (i + 1) & mask) {
    const Slot s = slots_[i];
    if (s.id1 == 0) break;
    if (s.tag == tag && same_key(node(s.id1 - 1), key)) return s.id1 - 1;
  }
  return insert_locked(key, tag);
}

std::pair<uint32_t, uint32_t> ExprTable::intern_with_memo(const NodeKey& key) {
  std::lock_guard lock(mu_);
  const uint32_t id = find_or_insert_locked(key);
  return {id, memo_[id]};
}

uint32_t ExprTable::intern_canonical(const NodeKey& key) {
  std::lock_guard lock(mu_);
  const uint32_t id = find_or_insert_locked(key);
  memo_[id] = id;
  return id;
}

uint32_t ExprTable::insert_locked(const NodeKey& key, uint32_t tag) {
  LUM_ASSERT(size_ < kMaxChunks * kChunkSize) << "symbolic expression table is full";
  if ((size_ & (kChunkSize - 1)) == 0) {
    owned_.push_back(std::unique_ptr<ExprNode[]>(new ExprNode[kChunkSize]));
    chunks_[size_ >> kChunkBits] = owned_.back().get();
  }
  const uint32_t id = size_;
  ExprNode& n = chunks_[id >> kChunkBits][id & (kChunkSize - 1)];
  n.op = key.op;
  n.a = key.a;
  n.b = key.b;
  n.value = key.value;
  n.lo = key.lo;
  n.hi = key.hi;
  compute_bounds(n, *this);
  uint64_t h = mix(static_cast<uint64_t>(n.op) + 1, static_cast<uint64_t>(n.value));
  if (n.op == ExprOp::Var) {
    h = mix(mix(h, hash_bytes(*names_[n.a])), static_cast<uint64_t>(n.lo));
    h = mix(h, static_cast<uint64_t>(n.hi));
  } else if (n.op != ExprOp::Const) {
    h = mix(mix(h, node(n.a).shash), node(n.b).shash);
  }
  n.shash = h;
  ++size_;
  memo_.push_back(kNoId);
  if (size_ * 2 > slots_.size()) grow_locked();
  const size_t mask = slots_.size() - 1;
  size_t i = tag & mask;
  while (slots_[i].id1 != 0) i = (i + 1) & mask;
  slots_[i] = Slot{tag, id + 1};
  return id;
}

void ExprTable::grow_locked() {
  std::vector<Slot> old(slots_.size() * 2);
  old.swap(slots_);
  const size_t mask = slots_.size() - 1;
  for (const Slot& s : old) {
    if (s.id1 == 0) continue;
    size_t i = s.tag & mask;
    while (slots_[i].id1 != 0) i = (i + 1) & mask;
    slots_[i] = s;
  }
}

uint32_t ExprTable::intern_name(std::string_view name) {
  std::lock_guard lock(mu_);
  if (auto it = name_index_.find(name); it != name_index_.end()) return it->second;
  const auto id = static_cast<uint32_t>(names_.size());
  names_.push_back(std::make_unique<const std::string>(name));
  name_index_.emplace(std::string(name), id);
  return id;
}

std::string_view ExprTable::name(uint32_t name_id) const {
  std::lock_guard lock(mu_);
  return *names_.at(name_id);
}

uint32_t ExprTable::memo(uint32_t raw) const {
  std::lock_guard lock(mu_);
  return memo_[raw];
}

void ExprTable::set_memo(uint32_t raw, uint32_t simplified) {
  std::lock_guard lock(mu_);
  memo_[raw] = simplified;
}

}  // namespace luminal::expr_detail

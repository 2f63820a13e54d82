// E-graph core: hashcons, union-find, deferred rebuilding.
#include "luminal/egraph/egraph.hpp"

#include <algorithm>
#include <unordered_set>

#include "luminal/egraph/analysis.hpp"
#include "luminal/error.hpp"
#include "luminal/hash.hpp"

namespace luminal::eg {
namespace {

constexpr uint64_t kEmpty = 0, kTomb = 1;

uint32_t slot_node(uint64_t s) {
  return static_cast<uint32_t>(s & 0xffffffffu) - 2;
}
uint32_t slot_tag(uint64_t s) {
  return static_cast<uint32_t>(s >> 32);
}

}  // namespace

EGraph::EGraph() {
  slots_.assign(1024, kEmpty);
}
EGraph::~EGraph() = default;

void EGraph::set_analysis(std::unique_ptr<Analysis> analysis) {
  LUM_CHECK(recs_.empty()) << "set_analysis: the e-graph already has nodes";
  analysis_ = std::move(analysis);
}

ClassId EGraph::find(ClassId c) const {
  uint32_t x = c.v;
  while (uf_[x] != x) {
    uf_[x] = uf_[uf_[x]];  // path halving
    x = uf_[x];
  }
  return ClassId{x};
}

uint64_t EGraph::hash_parts(Symbol op, AttrList attrs, std::span<const ClassId> children) const {
  uint64_t h = hash_mix(op.v, attrs.v);
  for (ClassId c : children) h = hash_mix(h, c.v);
  return hash_avalanche(hash_mix(h, children.size()));
}

uint64_t EGraph::hash_node(uint32_t n) const {
  return hash_parts(recs_[n].op, recs_[n].attrs, node_children(n));
}

bool EGraph::same_content(uint32_t n, Symbol op, AttrList attrs,
                          std::span<const ClassId> children) const {
  const NodeRec& r = recs_[n];
  if (r.op != op || r.attrs != attrs || r.child_count != children.size()) return false;
  return std::equal(children.begin(), children.end(), pool_.begin() + r.child_begin);
}

int64_t EGraph::hc_find(Symbol op, AttrList attrs, std::span<const ClassId> children,
                        uint64_t h) const {
  const size_t mask = slots_.size() - 1;
  const auto tag = static_cast<uint32_t>(h >> 32);
  for (size_t i = h & mask;; i = (i + 1) & mask) {
    const uint64_t s = slots_[i];
    if (s == kEmpty) return -1;
    if (s != kTomb && slot_tag(s) == tag && same_content(slot_node(s), op, attrs, children))
      return slot_node(s);
  }
}

void EGraph::hc_insert(uint32_t n, uint64_t h) {
  if ((hashcons_used_ + 1) * 2 > slots_.size()) hc_grow();
  const size_t mask = slots_.size() - 1;
  size_t i = h & mask;
  while (slots_[i] != kEmpty && slots_[i] != kTomb) i = (i + 1) & mask;
  if (slots_[i] == kEmpty) ++hashcons_used_;
  slots_[i] = (h & 0xffffffff00000000ull) | (static_cast<uint64_t>(n) + 2);
  ++hashcons_live_;
}

void EGraph::hc_erase(uint32_t n) {
  const uint64_t h = hash_node(n);
  const size_t mask = slots_.size() - 1;
  for (size_t i = h & mask;; i = (i + 1) & mask) {
    const uint64_t s = slots_[i];
    if (s == kEmpty) return;  // a stale duplicate was never (or is no longer) present
    if (s != kTomb && slot_node(s) == n) {
      slots_[i] = kTomb;
      --hashcons_live_;
      return;
    }
  }
}

void EGraph::hc_grow() {
  std::vector<uint64_t> old = std::move(slots_);
  // Double only when live entries fill the table; otherwise a same-size rehash drops tombs.
  const size_t size = hashcons_live_ * 4 >= old.size() ? old.size() * 2 : old.size();
  slots_.assign(size, kEmpty);
  hashcons_used_ = 0;
  const size_t mask = slots_.size() - 1;
  for (uint64_t s : old) {
    if (s == kEmpty || s == kTomb) continue;
    const uint64_t h = hash_node(slot_node(s));
    size_t i = h & mask;
    while (slots_[i] != kEmpty) i = (i + 1) & mask;
    slots_[i] = s;
    ++hashcons_used_;
  }
}

std::optional<ClassId> EGraph::lookup(Symbol op, AttrList attrs,
                                      std::span<const ClassId> children) const {
  std::vector<ClassId> canon(children.begin(), children.end());
  for (ClassId& c : canon) c = find(c);
  const int64_t n = hc_find(op, attrs, canon, hash_parts(op, attrs, canon));
  if (n < 0) return std::nullopt;
  return find(recs_[n].eclass);
}

ClassId EGraph::add(Symbol op, AttrList attrs, std::span<const ClassId> children) {
  ++stats_.lookups;
  const auto begin = static_cast<uint32_t>(pool_.size());
  for (ClassId c : children) {
    LUM_ASSERT(c.v < uf_.size()) << "add: child e-class " << c.v << " does not exist";
    pool_.push_back(find(c));
  }
  const std::span<const ClassId> canon(pool_.data() + begin, children.size());
  const uint64_t h = hash_parts(op, attrs, canon);
  if (const int64_t n = hc_find(op, attrs, canon, h); n >= 0) {
    pool_.resize(begin);
    return find(recs_[n].eclass);
  }
  const auto n = static_cast<uint32_t>(recs_.size());
  const ClassId id{static_cast<uint32_t>(uf_.size())};
  recs_.push_back({op, attrs, begin, static_cast<uint32_t>(children.size()), id});
  uf_.push_back(id.v);
  size_.push_back(1);
  classes_.push_back(ClassRec{{n}, {}});
  ++live_classes_;
  for (uint32_t k = 0; k < recs_[n].child_count; ++k)
    classes_[pool_[begin + k].v].parents.push_back(n);
  hc_insert(n, h);
  ++stats_.nodes_added;
  if (analysis_) {
    analysis_->make(*this, id, n);
    analysis_->modify(*this, id);
  }
  return find(id);
}

bool EGraph::merge(ClassId a, ClassId b) {
  a = find(a);
  b = find(b);
  if (a == b) return false;
  ClassRec& ra = classes_[a.v];
  ClassRec& rb = classes_[b.v];
  // The larger class absorbs the smaller: fewer ids to move.
  if (ra.nodes.size() + ra.parents.size() < rb.nodes.size() + rb.parents.size()) std::swap(a, b);
  ClassRec& root = classes_[a.v];
  ClassRec& other = classes_[b.v];
  uf_[b.v] = a.v;
  size_[a.v] += size_[b.v];
  --live_classes_;
  ++stats_.unions;
  if (analysis_) {
    // Parents of a side whose data the join changed must recompute.
    const std::vector<uint32_t> root_parents = root.parents;
    const bool changed = analysis_->merge(a, b);
    if (changed)
      analysis_pending_.insert(analysis_pending_.end(), root_parents.begin(), root_parents.end());
    analysis_pending_.insert(analysis_pending_.end(), other.parents.begin(), other.parents.end());
  }
  root.nodes.insert(root.nodes.end(), other.nodes.begin(), other.nodes.end());
  root.parents.insert(root.parents.end(), other.parents.begin(), other.parents.end());
  other = ClassRec{};
  pending_.push_back(a);
  return true;
}

void EGraph::canonicalize(uint32_t n) {
  const NodeRec& r = recs_[n];
  for (uint32_t k = 0; k < r.child_count; ++k)
    pool_[r.child_begin + k] = find(pool_[r.child_begin + k]);
}

void EGraph::repair(ClassId c) {
  std::vector<uint32_t> parents = std::move(classes_[c.v].parents);
  classes_[c.v].parents.clear();
  std::sort(parents.begin(), parents.end());
  parents.erase(std::unique(parents.begin(), parents.end()), parents.end());
  for (uint32_t p : parents) {
    hc_erase(p);
    canonicalize(p);
  }
  std::vector<uint32_t> survivors;
  for (uint32_t p : parents) {
    ++stats_.rebuild_repairs;
    const uint64_t h = hash_node(p);
    const int64_t e = hc_find(recs_[p].op, recs_[p].attrs, node_children(p), h);
    if (e >= 0 && static_cast<uint32_t>(e) != p) {
      // Congruence: p duplicates e. The end of rebuild() drops p from its node list
      // (even when the classes were already one and the merge does nothing).
      merge(recs_[e].eclass, recs_[p].eclass);
      stale_classes_.push_back(recs_[p].eclass);
    } else if (e < 0) {
      hc_insert(p, h);
      survivors.push_back(p);
    } else {
      survivors.push_back(p);
    }
  }
  auto& dst = classes_[find(c).v].parents;
  dst.insert(dst.end(), survivors.begin(), survivors.end());
}

void EGraph::dedupe_nodes(ClassId c) {
  // Runs once every repair is done, so each hashcons entry is canonical: a listed node
  // stays only if it is the entry for its canonical content (stale duplicates are not).
  std::vector<ClassId> canon;
  std::erase_if(classes_[c.v].nodes, [&](uint32_t n) {
    const auto children = node_children(n);
    canon.assign(children.begin(), children.end());
    for (ClassId& ch : canon) ch = find(ch);
    const int64_t rep =
        hc_find(recs_[n].op, recs_[n].attrs, canon, hash_parts(recs_[n].op, recs_[n].attrs, canon));
    return rep != static_cast<int64_t>(n);
  });
}

size_t EGraph::rebuild() {
  const uint64_t before = stats_.rebuild_repairs;
  std::vector<ClassId> touched;
  while (!pending_.empty() || !analysis_pending_.empty()) {
    std::vector<ClassId> todo;
    todo.swap(pending_);
    for (ClassId& c : todo) c = find(c);
    std::sort(todo.begin(), todo.end());
    todo.erase(std::unique(todo.begin(), todo.end()), todo.end());
    for (ClassId c : todo) {
      repair(find(c));
      touched.push_back(find(c));
    }
    std::vector<uint32_t> anodes;
    anodes.swap(analysis_pending_);
    std::sort(anodes.begin(), anodes.end());
    anodes.erase(std::unique(anodes.begin(), anodes.end()), anodes.end());
    for (uint32_t n : anodes) {
      const ClassId c = find(recs_[n].eclass);
      if (analysis_->remake(*this, c, n)) {
        const auto& ps = classes_[c.v].parents;
        analysis_pending_.insert(analysis_pending_.end(), ps.begin(), ps.end());
        touched.push_back(c);
      }
    }
    if (pending_.empty() && analysis_pending_.empty()) {
      touched.insert(touched.end(), stale_classes_.begin(), stale_classes_.end());
      stale_classes_.clear();
      for (ClassId& c : touched) c = find(c);
      std::sort(touched.begin(), touched.end());
      touched.erase(std::unique(touched.begin(), touched.end()), touched.end());
      for (ClassId c : touched) {
        dedupe_nodes(c);
        if (analysis_) analysis_->modify(*this, c);  // may merge again: loop
      }
      touched.clear();
    }
  }
  return stats_.rebuild_repairs - before;
}

std::vector<ClassId> EGraph::classes() const {
  std::vector<ClassId> out;
  out.reserve(live_classes_);
  for (uint32_t i = 0; i < uf_.size(); ++i)
    if (uf_[i] == i) out.push_back(ClassId{i});
  return out;
}

std::span<const uint32_t> EGraph::node_ids(ClassId c) const {
  return classes_[find(c).v].nodes;
}

ENode EGraph::node(uint32_t n) const {
  auto ch = node_children(n);
  std::vector<ClassId> children(ch.begin(), ch.end());
  for (ClassId& c : children) c = find(c);
  return ENode{recs_[n].op, recs_[n].attrs, std::move(children)};
}

std::vector<ENode> EGraph::nodes(ClassId c) const {
  std::vector<ENode> out;
  for (uint32_t n : node_ids(c)) out.push_back(node(n));
  return out;
}

void EGraph::check_invariants() const {
  LUM_ASSERT(clean()) << "check_invariants: rebuild() first";
  size_t listed = 0;
  std::unordered_set<uint32_t> seen;
  for (ClassId c : classes()) {
    for (uint32_t n : classes_[c.v].nodes) {
      ++listed;
      LUM_ASSERT(seen.insert(n).second) << "node " << n << " listed twice";
      LUM_ASSERT(find(recs_[n].eclass) == c) << "node " << n << " listed in class " << c.v
                                             << " but belongs to " << find(recs_[n].eclass).v;
      for (ClassId ch : node_children(n)) {
        LUM_ASSERT(find(ch) == ch) << "node " << n << " has non-canonical child " << ch.v;
        const auto& ps = classes_[ch.v].parents;
        LUM_ASSERT(std::find(ps.begin(), ps.end(), n) != ps.end())
            << "node " << n << " missing from the parents of class " << ch.v;
      }
      const int64_t rep = hc_find(recs_[n].op, recs_[n].attrs, node_children(n), hash_node(n));
      LUM_ASSERT(rep == static_cast<int64_t>(n)) << "node " << n << " is not its hashcons entry";
    }
  }
  LUM_ASSERT(listed == hashcons_live_)
      << "classes list " << listed << " nodes, hashcons holds " << hashcons_live_;
}

}  // namespace luminal::eg

// Patterns: parsing, printing, e-matching and instantiation.
#include <cmath>
#include <sstream>

#include "egraph/pattern_parse.hpp"
#include "luminal/error.hpp"

namespace luminal::eg {
namespace {

int var_index(std::vector<std::string>& names, const std::string& name, bool create) {
  for (size_t i = 0; i < names.size(); ++i)
    if (names[i] == name) return static_cast<int>(i);
  if (!create) return -1;
  LUM_CHECK(names.size() < kMaxRuleVars)
      << "a rule uses more than " << kMaxRuleVars << " variables of one kind (at " << name << ")";
  names.push_back(name);
  return static_cast<int>(names.size() - 1);
}

bool parse_number(const std::string& t, Attr& out) {
  if (t == "inf" || t == "+inf" || t == "-inf") {
    out = Attr::of_float(t[0] == '-' ? -HUGE_VAL : HUGE_VAL);
    return true;
  }
  if (t.empty()) return false;
  const size_t start = (t[0] == '-' || t[0] == '+') ? 1 : 0;
  if (start >= t.size() || !(std::isdigit(static_cast<unsigned char>(t[start])) || t[start] == '.'))
    return false;
  const bool is_float = t.find_first_of(".eE") != std::string::npos;
  try {
    size_t used = 0;
    if (is_float) {
      const double v = std::stod(t, &used);
      out = Attr::of_float(v);
    } else {
      const long long v = std::stoll(t, &used);
      out = Attr::of_int(v);
    }
    return used == t.size();
  } catch (const std::exception&) {
    return false;
  }
}

bool attr_matches(const Attr& pattern, const Attr& actual) {
  const bool pn = pattern.kind == Attr::Kind::Int || pattern.kind == Attr::Kind::Float;
  const bool an = actual.kind == Attr::Kind::Int || actual.kind == Attr::Kind::Float;
  if (pn && an) return pattern.as_float() == actual.as_float();
  return pattern == actual;
}

}  // namespace

int VarTable::class_var(const std::string& name, bool create) {
  return var_index(classes, name, create);
}
int VarTable::attr_var(const std::string& name, bool create) {
  return var_index(attrs, name, create);
}

Value ArgRef::resolve(const Subst& s) const {
  switch (kind) {
    case Kind::ClassVar:
      return Value{true, s.classes[var], {}};
    case Kind::AttrVar:
      return Value{false, {}, s.attrs[var]};
    case Kind::Literal:
      break;
  }
  return Value{false, {}, literal};
}

std::optional<Attr> literal_attr(const SExpr& e) {
  if (e.kind == SExpr::Kind::String) return Attr::of_str(e.text);
  if (e.kind != SExpr::Kind::Atom) return std::nullopt;
  if (!e.text.empty() && e.text[0] == '#') {
    try {
      return Attr::of_dtype(dtype_from_name(e.text.substr(1)));
    } catch (const Error&) {
      return std::nullopt;
    }
  }
  Attr a;
  if (parse_number(e.text, a)) return a;
  return std::nullopt;
}

ArgRef arg_from_sexpr(const SExpr& e, VarTable& vars, std::string_view source) {
  ArgRef a;
  if (e.kind == SExpr::Kind::Atom && !e.text.empty() && (e.text[0] == '?' || e.text[0] == '$')) {
    const bool cls = e.text[0] == '?';
    a.kind = cls ? ArgRef::Kind::ClassVar : ArgRef::Kind::AttrVar;
    a.var = cls ? vars.class_var(e.text.substr(1), false) : vars.attr_var(e.text.substr(1), false);
    LUM_CHECK(a.var >= 0) << where(source, e) << "unbound variable " << e.text;
    return a;
  }
  auto lit = literal_attr(e);
  LUM_CHECK(lit) << where(source, e) << "expected ?var, $var or a literal, got '" << e.text << "'";
  a.literal = *lit;
  return a;
}

namespace {

uint32_t build_node(Pattern& p, const SExpr& e, VarTable& vars, std::string_view source, bool rhs) {
  PatternNode n;
  if (e.kind == SExpr::Kind::Atom && !e.text.empty() && e.text[0] == '?') {
    n.kind = PatternNode::Kind::Var;
    n.var = vars.class_var(e.text.substr(1), !rhs);
    LUM_CHECK(n.var >= 0) << where(source, e) << "variable " << e.text
                          << " is not bound by the left-hand side";
  } else if (e.kind == SExpr::Kind::List) {
    LUM_CHECK(!e.items.empty() && e.items[0].kind == SExpr::Kind::Atom)
        << where(source, e) << "a pattern must start with an operator name";
    const std::string& head = e.items[0].text;
    if (head == "call") {
      LUM_CHECK(rhs) << where(source, e) << "(call ...) is only allowed on a right-hand side";
      LUM_CHECK(e.items.size() >= 2 && e.items[1].kind == SExpr::Kind::Atom)
          << where(source, e) << "(call NAME args...) needs a name";
      n.kind = PatternNode::Kind::Call;
      n.call = e.items[1].text;
      for (size_t k = 2; k < e.items.size(); ++k)
        n.call_args.push_back(arg_from_sexpr(e.items[k], vars, source));
    } else {
      LUM_CHECK(head[0] != '?' && head[0] != '$' && !literal_attr(e.items[0]))
          << where(source, e.items[0]) << "'" << head << "' is not an operator name";
      n.kind = PatternNode::Kind::Op;
      n.op = Symbol::of(head);
      for (size_t k = 1; k < e.items.size(); ++k) {
        const SExpr& item = e.items[k];
        if (item.kind == SExpr::Kind::Atom && !item.text.empty() && item.text[0] == '$') {
          AttrPattern ap;
          ap.is_var = true;
          ap.var = vars.attr_var(item.text.substr(1), !rhs);
          LUM_CHECK(ap.var >= 0) << where(source, item) << "variable " << item.text
                                 << " is not bound by the left-hand side";
          n.attrs.push_back(ap);
        } else if (auto lit = literal_attr(item)) {
          n.attrs.push_back(AttrPattern{false, -1, *lit});
        } else if (item.kind == SExpr::Kind::List || (!item.text.empty() && item.text[0] == '?')) {
          n.children.push_back(build_node(p, item, vars, source, rhs));
        } else {
          LUM_FAIL() << where(source, item) << "unexpected '" << item.text
                     << "' (expected ?var, $var, a literal or a nested pattern)";
        }
      }
    }
  } else {
    LUM_FAIL() << where(source, e) << "expected a pattern, got '" << e.text << "'";
  }
  p.nodes.push_back(std::move(n));
  return static_cast<uint32_t>(p.nodes.size() - 1);
}

}  // namespace

Pattern pattern_from_sexpr(const SExpr& e, VarTable& vars, std::string_view source, bool rhs) {
  Pattern p;
  p.root = build_node(p, e, vars, source, rhs);
  return p;
}

Pattern parse_pattern(std::string_view text, VarTable& vars) {
  auto forms = read_sexprs(text, "<pattern>");
  LUM_CHECK(forms.size() == 1) << "<pattern>: expected one pattern, got " << forms.size();
  return pattern_from_sexpr(forms[0], vars, "<pattern>", false);
}

std::optional<Symbol> Pattern::root_op() const {
  if (nodes[root].kind != PatternNode::Kind::Op) return std::nullopt;
  return nodes[root].op;
}

std::string Pattern::to_string(const VarTable& vars) const {
  std::function<void(std::ostream&, uint32_t)> emit = [&](std::ostream& os, uint32_t i) {
    const PatternNode& n = nodes[i];
    if (n.kind == PatternNode::Kind::Var) {
      os << '?' << vars.classes[n.var];
      return;
    }
    if (n.kind == PatternNode::Kind::Call) {
      os << "(call " << n.call << " ...)";
      return;
    }
    os << '(' << n.op.name();
    for (const AttrPattern& a : n.attrs)
      os << ' ' << (a.is_var ? "$" + vars.attrs[a.var] : a.literal.to_string());
    for (uint32_t c : n.children) {
      os << ' ';
      emit(os, c);
    }
    os << ')';
  };
  std::ostringstream os;
  emit(os, root);
  return os.str();
}

Subst empty_subst(const VarTable&) {
  return Subst{};
}

namespace {

// Matches pattern nodes `todo` (stack of (pattern node, class)) in order; calls on_match
// for every complete substitution.
void match_all(const EGraph& g, const Pattern& p, std::vector<std::pair<uint32_t, ClassId>>& todo,
               Subst& s, const std::function<void(const Subst&)>& on_match) {
  if (todo.empty()) {
    on_match(s);
    return;
  }
  const auto [pi, cls] = todo.back();
  todo.pop_back();
  const PatternNode& pn = p.nodes[pi];
  if (pn.kind == PatternNode::Kind::Var) {
    ClassId& bound = s.classes[pn.var];
    if (!bound.valid()) {
      bound = cls;
      match_all(g, p, todo, s, on_match);
      bound = ClassId{};
    } else if (g.find(bound) == cls) {
      match_all(g, p, todo, s, on_match);
    }
  } else {
    for (uint32_t n : g.node_ids(cls)) {
      if (g.node_op(n) != pn.op) continue;
      const auto children = g.node_children(n);
      if (children.size() != pn.children.size()) continue;
      const auto& attrs = g.node_attrs(n).get();
      if (attrs.size() != pn.attrs.size()) continue;
      // Bind attribute variables, remembering which this node bound.
      const uint32_t bound_before = s.attr_set;
      bool ok = true;
      for (size_t k = 0; k < attrs.size() && ok; ++k) {
        const AttrPattern& ap = pn.attrs[k];
        if (!ap.is_var) {
          ok = attr_matches(ap.literal, attrs[k]);
        } else if (s.has_attr(ap.var)) {
          ok = s.attrs[ap.var] == attrs[k];
        } else {
          s.attrs[ap.var] = attrs[k];
          s.attr_set |= 1u << ap.var;
        }
      }
      if (ok) {
        const size_t depth = todo.size();
        for (size_t k = children.size(); k-- > 0;)
          todo.emplace_back(pn.children[k], g.find(children[k]));
        match_all(g, p, todo, s, on_match);
        todo.resize(depth);
      }
      s.attr_set = bound_before;
    }
  }
  todo.emplace_back(pi, cls);
}

}  // namespace

void match_class(const EGraph& g, const Pattern& p, ClassId c, const Subst& base,
                 const std::function<void(const Subst&)>& on_match) {
  Subst s = base;
  std::vector<std::pair<uint32_t, ClassId>> todo{{p.root, g.find(c)}};
  match_all(g, p, todo, s, on_match);
}

Functions::Functions() {
  predicates["distinct"] = [](const EGraph& g, std::span<const Value> args) {
    LUM_CHECK(args.size() == 2 && args[0].is_class && args[1].is_class)
        << "distinct takes two ?class arguments";
    return !g.equivalent(args[0].c, args[1].c);
  };
}

std::optional<ClassId> instantiate(EGraph& g, const Pattern& p, const Subst& s,
                                   const Functions& fns) {
  thread_local std::vector<ClassId> built;
  thread_local std::vector<ClassId> children;
  thread_local std::vector<Attr> attrs;
  built.assign(p.nodes.size(), ClassId{});
  // Pattern nodes are stored children-first, so one forward pass suffices.
  for (uint32_t i = 0; i < p.nodes.size(); ++i) {
    const PatternNode& n = p.nodes[i];
    switch (n.kind) {
      case PatternNode::Kind::Var:
        built[i] = s.classes[n.var];
        break;
      case PatternNode::Kind::Call: {
        auto it = fns.appliers.find(n.call);
        LUM_CHECK(it != fns.appliers.end()) << "no applier named '" << n.call << "'";
        std::vector<Value> args;
        for (const ArgRef& a : n.call_args) args.push_back(a.resolve(s));
        auto r = it->second(g, args);
        if (!r) return std::nullopt;
        built[i] = *r;
        break;
      }
      case PatternNode::Kind::Op: {
        attrs.clear();
        for (const AttrPattern& a : n.attrs) attrs.push_back(a.is_var ? s.attrs[a.var] : a.literal);
        children.clear();
        for (uint32_t c : n.children) children.push_back(built[c]);
        const AttrList list = attrs.empty() ? AttrList{} : AttrList::of(attrs);
        built[i] = g.add(n.op, list, children);
        break;
      }
    }
  }
  return built[p.root];
}

}  // namespace luminal::eg

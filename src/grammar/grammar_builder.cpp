// GrammarBuilder: the expression graph and its lowering into a flat Grammar.
//
// Lowering choices (they decide how fast Matcher runs):
// - sequences and literals are spliced into the enclosing alternative (no rule per piece), up
//   to a small size, so a closure step pushes few stack frames;
// - a choice between single bytes becomes one terminal class;
// - a choice between many literals (a huge enum) becomes a radix trie of rules, so the
//   recognizer tracks one stack per distinct next byte instead of one per alternative;
// - x* is the right-recursive rule `S ::= x S | ()` and x{0,k} a chain of k such optional
//   rules, both tail calls, which Matcher runs without growing its stacks.
#include <algorithm>
#include <fmt/format.h>
#include <map>
#include <unordered_map>

#include "common/error.h"
#include "grammar/builder_impl.h"

namespace splash::grammar {

using Impl = GrammarBuilder::Impl;
using Id = GrammarBuilder::Id;

int ByteSet::count() const {
  int n = 0;
  for (uint64_t w : words) n += __builtin_popcountll(w);
  return n;
}

Id Impl::add(Node node) {
  if (nodes.size() >= kMaxBuilderNodes) fail("schema too large: grammar exceeds {} expressions", kMaxBuilderNodes);
  nodes.push_back(std::move(node));
  return static_cast<Id>(nodes.size() - 1);
}

const Impl::Node& Impl::at(Id id) const {
  if (id < 0 || static_cast<size_t>(id) >= nodes.size()) fail("grammar builder: invalid expression id {}", id);
  return nodes[static_cast<size_t>(id)];
}

GrammarBuilder::GrammarBuilder() : impl_(std::make_unique<Impl>()) {}
GrammarBuilder::~GrammarBuilder() = default;

Id GrammarBuilder::literal(std::string_view bytes) {
  Impl::Node n;
  n.kind = Impl::Kind::literal;
  n.text = std::string(bytes);
  return impl_->add(std::move(n));
}

Id GrammarBuilder::char_class(const ByteSet& set) {
  Impl::Node n;
  n.kind = Impl::Kind::cls;
  n.set = set;
  return impl_->add(std::move(n));
}

Id GrammarBuilder::char_class(std::string_view ranges, bool negated) {
  ByteSet set;
  for (size_t i = 0; i < ranges.size(); ++i) {
    const auto lo = static_cast<uint8_t>(ranges[i]);
    if (i + 2 < ranges.size() && ranges[i + 1] == '-') {
      const auto hi = static_cast<uint8_t>(ranges[i + 2]);
      if (hi < lo) fail("grammar builder: bad class range in '{}'", ranges);
      set.add_range(lo, hi);
      i += 2;
    } else {
      set.add(lo);
    }
  }
  return char_class(negated ? set.inverted() : set);
}

Id GrammarBuilder::any_byte() { return char_class(ByteSet{}.inverted()); }

Id GrammarBuilder::sequence(std::vector<Id> parts) {
  for (Id p : parts) impl_->at(p);
  if (parts.size() == 1) return parts[0];
  Impl::Node n;
  n.kind = Impl::Kind::seq;
  n.kids = std::move(parts);
  return impl_->add(std::move(n));
}

Id GrammarBuilder::choice(std::vector<Id> alternatives) {
  for (Id p : alternatives) impl_->at(p);
  if (alternatives.size() == 1) return alternatives[0];
  Impl::Node n;
  n.kind = Impl::Kind::choice;
  n.kids = std::move(alternatives);
  return impl_->add(std::move(n));
}

Id GrammarBuilder::repeat(Id item, int min, int max) {
  impl_->at(item);
  if (min < 0 || (max != -1 && max < min)) fail("grammar builder: bad repetition bounds {{{},{}}}", min, max);
  if (min == 1 && max == 1) return item;
  Impl::Node n;
  n.kind = Impl::Kind::repeat;
  n.min = min;
  n.max = max;
  n.kids = {item};
  return impl_->add(std::move(n));
}

Id GrammarBuilder::rule(std::string name) {
  Impl::Node n;
  n.kind = Impl::Kind::rule;
  n.text = std::move(name);
  return impl_->add(std::move(n));
}

void GrammarBuilder::define(Id rule, Id body) {
  impl_->at(body);
  auto& n = impl_->nodes.at(static_cast<size_t>(rule));
  if (n.kind != Impl::Kind::rule) fail("grammar builder: define() on an expression that is not a rule");
  if (n.body != -1) fail("grammar: rule '{}' is defined twice", n.text);
  n.body = body;
}

Id GrammarBuilder::utf8_char_nonascii() {
  if (impl_->utf8 != -1) return impl_->utf8;
  // Well-formed UTF-8 only (no overlongs, no surrogates, nothing above U+10FFFF), so any
  // output we allow is text every JSON parser accepts.
  auto cls = [&](uint8_t lo, uint8_t hi) {
    ByteSet s;
    s.add_range(lo, hi);
    return char_class(s);
  };
  const Id cont = cls(0x80, 0xBF);
  impl_->utf8 = choice({
      sequence({cls(0xC2, 0xDF), cont}),
      sequence({cls(0xE0, 0xE0), cls(0xA0, 0xBF), cont}),
      sequence({choice({cls(0xE1, 0xEC), cls(0xEE, 0xEF)}), cont, cont}),
      sequence({cls(0xED, 0xED), cls(0x80, 0x9F), cont}),
      sequence({cls(0xF0, 0xF0), cls(0x90, 0xBF), cont, cont}),
      sequence({cls(0xF1, 0xF3), cont, cont, cont}),
      sequence({cls(0xF4, 0xF4), cls(0x80, 0x8F), cont, cont}),
  });
  return impl_->utf8;
}

namespace {

using Elem = Grammar::Elem;
using Alt = std::vector<Elem>;
constexpr int64_t kInlineLimit = 48;  // a sequence up to this many elements is spliced in place

struct ByteSetHash {
  size_t operator()(const ByteSet& s) const {
    uint64_t h = 1469598103934665603ull;
    for (uint64_t w : s.words) h = (h ^ w) * 1099511628211ull;
    return static_cast<size_t>(h);
  }
};

class Lowerer {
 public:
  explicit Lowerer(const Impl& b) : b_(b), size_memo_(b.nodes.size(), -1), single_memo_(b.nodes.size(), -1) {}

  std::shared_ptr<Grammar> run(Id root) {
    const int32_t root_rule = as_rule(root);
    // Rule bodies are filled from a queue rather than recursively, so long chains of rules
    // ($ref after $ref, Lark rule after rule) never deepen the C++ stack.
    while (!queue_.empty()) {
      const auto [rule, id] = queue_.back();
      queue_.pop_back();
      std::vector<Alt> alts = body_alts(id);
      rules_[static_cast<size_t>(rule)].alts = std::move(alts);
    }
    check_left_recursion();
    auto g = std::make_shared<Grammar>();
    g->classes = std::move(classes_);
    g->root = root_rule;
    g->rule_begin.reserve(rules_.size() + 1);
    for (auto& r : rules_) {
      g->rule_begin.push_back(static_cast<int32_t>(g->alt_starts.size()));
      g->rule_names.push_back(std::move(r.name));
      for (auto& alt : r.alts) {
        g->alt_starts.push_back(static_cast<int32_t>(g->code.size()));
        g->code.insert(g->code.end(), alt.begin(), alt.end());
        g->code.push_back({Grammar::Op::end, 0});
      }
    }
    g->rule_begin.push_back(static_cast<int32_t>(g->alt_starts.size()));
    return g;
  }

 private:
  struct Rule {
    std::string name;
    std::vector<Alt> alts;
  };

  const Impl::Node& node(Id id) const { return b_.nodes[static_cast<size_t>(id)]; }

  void count(size_t n) {
    elements_ += n;
    if (elements_ > kMaxGrammarElements) fail("schema too large: grammar exceeds {} elements", kMaxGrammarElements);
  }

  int32_t new_rule(std::string name) {
    count(1);
    rules_.push_back({std::move(name), {}});
    return static_cast<int32_t>(rules_.size() - 1);
  }

  Elem term(const ByteSet& set) {
    count(1);
    auto [it, fresh] = class_index_.try_emplace(set, static_cast<int32_t>(classes_.size()));
    if (fresh) classes_.push_back(set);
    return {Grammar::Op::term, it->second};
  }
  Elem byte(uint8_t c) {
    ByteSet s;
    s.add(c);
    return term(s);
  }
  Elem ref(int32_t rule) {
    count(1);
    return {Grammar::Op::rule, rule};
  }

  // Elements an expression inlines to (a bound; a rule reference counts 1).
  int64_t inline_size(Id id) {
    auto& memo = size_memo_[static_cast<size_t>(id)];
    if (memo >= 0) return memo;
    const auto& n = node(id);
    int64_t s = 1;
    switch (n.kind) {
      case Impl::Kind::literal: s = static_cast<int64_t>(n.text.size()); break;
      case Impl::Kind::seq:
        s = 0;
        for (Id k : n.kids) s = std::min<int64_t>(s + inline_size(k), int64_t{1} << 40);
        break;
      case Impl::Kind::repeat: s = std::min<int64_t>(int64_t{n.min} * inline_size(n.kids[0]) + 1, int64_t{1} << 40); break;
      default: s = 1;
    }
    return memo = s;
  }

  // True when the expression matches exactly one byte; the byte set goes to `out`.
  bool single_byte(Id id, ByteSet* out, int depth = 0) {
    if (depth > kMaxNestingDepth) fail("grammar nesting too deep (over {} levels)", kMaxNestingDepth);
    auto& memo = single_memo_[static_cast<size_t>(id)];
    if (memo == 0) return false;
    const auto& n = node(id);
    bool yes = false;
    ByteSet set;
    switch (n.kind) {
      case Impl::Kind::cls: yes = true, set = n.set; break;
      case Impl::Kind::literal:
        if (n.text.size() == 1) yes = true, set.add(static_cast<uint8_t>(n.text[0]));
        break;
      case Impl::Kind::choice:
        yes = !n.kids.empty();
        for (Id k : n.kids) {
          ByteSet ks;
          if (!single_byte(k, &ks, depth + 1)) {
            yes = false;
            break;
          }
          set.add(ks);
        }
        break;
      case Impl::Kind::seq:
        if (n.kids.size() == 1) yes = single_byte(n.kids[0], &set, depth + 1);
        break;
      case Impl::Kind::repeat:
        if (n.min == 1 && n.max == 1) yes = single_byte(n.kids[0], &set, depth + 1);
        break;
      default: break;
    }
    memo = yes ? 1 : 0;
    if (yes && out) *out = set;
    return yes;
  }

  // Appends the elements matching `id` to an alternative.
  void emit(Id id, Alt& out, int depth) {
    if (depth > kMaxNestingDepth) fail("grammar nesting too deep (over {} levels)", kMaxNestingDepth);
    const auto& n = node(id);
    switch (n.kind) {
      case Impl::Kind::literal:
        for (char c : n.text) out.push_back(byte(static_cast<uint8_t>(c)));
        return;
      case Impl::Kind::cls: out.push_back(term(n.set)); return;
      case Impl::Kind::seq:
        if (inline_size(id) <= kInlineLimit) {
          for (Id k : n.kids) emit(k, out, depth + 1);
        } else {
          out.push_back(ref(as_rule(id)));
        }
        return;
      case Impl::Kind::choice: {
        ByteSet set;
        if (single_byte(id, &set)) {
          out.push_back(term(set));
        } else {
          out.push_back(ref(as_rule(id)));
        }
        return;
      }
      case Impl::Kind::repeat: {
        const Id item = n.kids[0];
        for (int i = 0; i < n.min; ++i) emit(item, out, depth + 1);
        if (n.max == -1) {
          out.push_back(ref(star(item)));
        } else if (n.max > n.min) {
          out.push_back(ref(optional_chain(item, n.max - n.min)));
        }
        return;
      }
      case Impl::Kind::rule: out.push_back(ref(as_rule(id))); return;
    }
  }

  // The rule standing for an expression, made once; its body is filled from the queue.
  int32_t as_rule(Id id) {
    if (auto it = rule_of_.find(id); it != rule_of_.end()) return it->second;
    const auto& n = node(id);
    if (n.kind == Impl::Kind::rule && n.body == -1) fail("grammar: rule '{}' is used but never defined", n.text);
    const int32_t r = new_rule(n.kind == Impl::Kind::rule ? n.text : std::string());
    rule_of_.emplace(id, r);
    queue_.emplace_back(r, id);
    return r;
  }

  std::vector<Alt> body_alts(Id id) {
    const Impl::Node* n = &node(id);
    if (n->kind == Impl::Kind::rule) {
      id = n->body;
      n = &node(id);
    }
    std::vector<Alt> alts;
    if (n->kind == Impl::Kind::choice) {
      choice_alts(id, alts);
    } else if (n->kind == Impl::Kind::seq) {
      alts.emplace_back();
      for (Id k : n->kids) emit(k, alts.back(), 1);
    } else {
      alts.emplace_back();
      emit(id, alts.back(), 1);
    }
    return alts;
  }

  void flatten_choice(Id id, std::vector<Id>& out, int depth) {
    if (depth > kMaxNestingDepth) fail("grammar nesting too deep (over {} levels)", kMaxNestingDepth);
    for (Id k : node(id).kids) {
      if (node(k).kind == Impl::Kind::choice) {
        flatten_choice(k, out, depth + 1);
      } else {
        out.push_back(k);
      }
    }
  }

  void choice_alts(Id id, std::vector<Alt>& alts) {
    std::vector<Id> kids;
    flatten_choice(id, kids, 0);
    ByteSet bytes;
    bool any_bytes = false;
    std::vector<std::string_view> words;
    for (Id k : kids) {
      ByteSet s;
      if (single_byte(k, &s)) {
        bytes.add(s);
        any_bytes = true;
      } else if (node(k).kind == Impl::Kind::literal) {
        words.push_back(node(k).text);
      } else {
        alts.emplace_back();
        emit(k, alts.back(), 1);
      }
    }
    if (any_bytes) alts.push_back({term(bytes)});
    if (words.empty()) return;
    std::sort(words.begin(), words.end());
    words.erase(std::unique(words.begin(), words.end()), words.end());
    trie_alts(words, 0, words.size(), 0, alts);
  }

  // Alternatives for words[begin, end) (sorted, distinct, sharing their first `depth` bytes):
  // one per distinct next byte, each a run of shared bytes then a rule for the branches.
  void trie_alts(const std::vector<std::string_view>& words, size_t begin, size_t end, size_t depth,
                 std::vector<Alt>& alts) {
    size_t i = begin;
    if (words[i].size() == depth) {
      alts.emplace_back();
      ++i;
    }
    while (i < end) {
      const char c = words[i][depth];
      size_t j = i;
      while (j < end && words[j][depth] == c) ++j;
      const auto& first = words[i];
      const auto& last = words[j - 1];
      size_t p = depth + 1;
      while (p < first.size() && p < last.size() && first[p] == last[p]) ++p;
      Alt alt;
      for (size_t k = depth; k < p; ++k) alt.push_back(byte(static_cast<uint8_t>(first[k])));
      if (j - i > 1) {
        const int32_t child = new_rule("");
        std::vector<Alt> child_alts;
        trie_alts(words, i, j, p, child_alts);
        rules_[static_cast<size_t>(child)].alts = std::move(child_alts);
        alt.push_back(ref(child));
      }
      alts.push_back(std::move(alt));
      i = j;
    }
  }

  int32_t star(Id item) {
    if (auto it = star_of_.find(item); it != star_of_.end()) return it->second;
    const int32_t r = new_rule("");
    star_of_.emplace(item, r);
    Alt loop;
    emit(item, loop, 1);
    loop.push_back(ref(r));
    rules_[static_cast<size_t>(r)].alts = {std::move(loop), Alt{}};
    return r;
  }

  // O_k ::= item O_{k-1} | () with O_1 ::= item | (): up to k more items.
  int32_t optional_chain(Id item, int k) {
    int32_t prev = -1;
    for (int i = 1; i <= k; ++i) {
      auto [it, fresh] = chain_.try_emplace({item, i}, -1);
      if (fresh) {
        const int32_t r = new_rule("");
        it->second = r;
        Alt more;
        emit(item, more, 1);
        if (prev != -1) more.push_back(ref(prev));
        rules_[static_cast<size_t>(r)].alts = {std::move(more), Alt{}};
      }
      prev = it->second;
    }
    return prev;
  }

  std::string rule_label(int32_t r) const {
    const auto& name = rules_[static_cast<size_t>(r)].name;
    return name.empty() ? fmt::format("#{}", r) : name;
  }

  // A top-down recognizer loops forever on A ::= ... A x ... reached with no byte consumed.
  // A cycle of such "left corner" calls is harmless only when every call in it is a tail call
  // (then the stack does not grow and Matcher's dedupe stops it), so that is what we allow.
  void check_left_recursion() {
    const size_t n = rules_.size();
    std::vector<char> nullable(n, 0);
    {
      // Worklist nullability: an alternative is nullable once all its elements are.
      std::vector<int32_t> pending;  // per alternative: elements not yet known nullable
      std::vector<int32_t> alt_rule;
      std::vector<std::vector<int32_t>> uses(n);  // rule -> alternatives that reference it
      std::vector<int32_t> work;
      for (size_t r = 0; r < n; ++r) {
        for (const auto& alt : rules_[r].alts) {
          const auto a = static_cast<int32_t>(pending.size());
          bool has_term = false;
          for (const auto& e : alt) has_term |= e.op == Grammar::Op::term;
          pending.push_back(has_term ? -1 : static_cast<int32_t>(alt.size()));
          alt_rule.push_back(static_cast<int32_t>(r));
          if (has_term) continue;
          for (const auto& e : alt) uses[static_cast<size_t>(e.arg)].push_back(a);
          if (alt.empty() && !nullable[r]) {
            nullable[r] = 1;
            work.push_back(static_cast<int32_t>(r));
          }
        }
      }
      while (!work.empty()) {
        const int32_t r = work.back();
        work.pop_back();
        for (int32_t a : uses[static_cast<size_t>(r)]) {
          if (--pending[static_cast<size_t>(a)] == 0) {
            const auto owner = static_cast<size_t>(alt_rule[static_cast<size_t>(a)]);
            if (!nullable[owner]) {
              nullable[owner] = 1;
              work.push_back(static_cast<int32_t>(owner));
            }
          }
        }
      }
    }
    struct Edge {
      int32_t to;
      bool tail;
    };
    std::vector<std::vector<Edge>> edges(n);
    for (size_t r = 0; r < n; ++r) {
      for (const auto& alt : rules_[r].alts) {
        for (size_t i = 0; i < alt.size(); ++i) {
          if (alt[i].op != Grammar::Op::rule) break;
          edges[r].push_back({alt[i].arg, i + 1 == alt.size()});
          if (!nullable[static_cast<size_t>(alt[i].arg)]) break;
        }
      }
    }
    // Iterative Tarjan SCC.
    std::vector<int32_t> index(n, -1), low(n, 0), comp(n, -1), stack;
    std::vector<char> on_stack(n, 0);
    int32_t counter = 0, comps = 0;
    struct Frame {
      int32_t v;
      size_t next;
    };
    for (size_t s = 0; s < n; ++s) {
      if (index[s] != -1) continue;
      std::vector<Frame> dfs{{static_cast<int32_t>(s), 0}};
      index[s] = low[s] = counter++;
      stack.push_back(static_cast<int32_t>(s));
      on_stack[s] = 1;
      while (!dfs.empty()) {
        auto& f = dfs.back();
        const auto v = static_cast<size_t>(f.v);
        if (f.next < edges[v].size()) {
          const auto w = static_cast<size_t>(edges[v][f.next++].to);
          if (index[w] == -1) {
            index[w] = low[w] = counter++;
            stack.push_back(static_cast<int32_t>(w));
            on_stack[w] = 1;
            dfs.push_back({static_cast<int32_t>(w), 0});
          } else if (on_stack[w]) {
            low[v] = std::min(low[v], index[w]);
          }
          continue;
        }
        if (low[v] == index[v]) {
          int32_t w;
          do {
            w = stack.back();
            stack.pop_back();
            on_stack[static_cast<size_t>(w)] = 0;
            comp[static_cast<size_t>(w)] = comps;
          } while (static_cast<size_t>(w) != v);
          ++comps;
        }
        dfs.pop_back();
        if (!dfs.empty()) {
          const auto u = static_cast<size_t>(dfs.back().v);
          low[u] = std::min(low[u], low[v]);
        }
      }
    }
    for (size_t r = 0; r < n; ++r) {
      for (const auto& e : edges[r]) {
        if (!e.tail && comp[static_cast<size_t>(e.to)] == comp[r]) {
          fail("grammar is left-recursive through rule '{}' (rewrite it with repetition, e.g. a: b (\",\" b)*)",
               rule_label(static_cast<int32_t>(r)));
        }
      }
    }
  }

  const Impl& b_;
  std::vector<Rule> rules_;
  std::vector<std::pair<int32_t, Id>> queue_;
  std::unordered_map<Id, int32_t> rule_of_;
  std::unordered_map<Id, int32_t> star_of_;
  std::map<std::pair<Id, int>, int32_t> chain_;
  std::vector<ByteSet> classes_;
  std::unordered_map<ByteSet, int32_t, ByteSetHash> class_index_;
  std::vector<int64_t> size_memo_;
  std::vector<int8_t> single_memo_;
  size_t elements_ = 0;
};

}  // namespace

std::shared_ptr<const Grammar> GrammarBuilder::build(Id root) {
  impl_->at(root);
  auto grammar = Lowerer(*impl_).run(root);
  if (!grammar->admits_output()) {
    std::string parts;
    for (const auto& at : impl_->nothing_at) parts += (parts.empty() ? "" : ", ") + at;
    fail("no output can satisfy this schema or grammar{}", parts.empty() ? "" : " (a value is required where the schema is false: " + parts + ")");
  }
  return grammar;
}

// Productive rules by fixpoint: a rule is productive when one of its alternatives has only
// non-empty byte classes and productive rules.
bool Grammar::admits_output() const {
  std::vector<char> productive(static_cast<size_t>(std::max(rule_count(), 0)), 0);
  for (bool changed = true; changed;) {
    changed = false;
    for (int32_t r = 0; r < rule_count(); ++r) {
      if (productive[r]) continue;
      for (int32_t a = rule_begin[r]; a < rule_begin[r + 1] && !productive[r]; ++a) {
        bool ok = true;
        for (int32_t i = alt_starts[a]; code[i].op != Op::end && ok; ++i)
          ok = code[i].op == Op::term ? !classes[code[i].arg].empty() : productive[code[i].arg] != 0;
        if (ok) productive[r] = 1, changed = true;
      }
    }
  }
  return root >= 0 && root < rule_count() && productive[root];
}

size_t Grammar::memory_bytes() const {
  size_t bytes = sizeof(*this) + code.capacity() * sizeof(Elem) + classes.capacity() * sizeof(ByteSet) +
                 (rule_begin.capacity() + alt_starts.capacity()) * sizeof(int32_t) +
                 rule_names.capacity() * sizeof(std::string);
  for (const auto& name : rule_names) bytes += name.capacity() > 15 ? name.capacity() + 1 : 0;  // past SSO
  return bytes;
}

std::string Grammar::to_string() const {
  auto class_text = [](const ByteSet& s) {
    std::string out = "[";
    for (int b = 0; b < 256; ++b) {
      if (!s.has(static_cast<uint8_t>(b))) continue;
      int e = b;
      while (e + 1 < 256 && s.has(static_cast<uint8_t>(e + 1))) ++e;
      auto one = [](int c) {
        return (c > 32 && c < 127 && c != ']' && c != '\\' && c != '-') ? std::string(1, static_cast<char>(c))
                                                                         : fmt::format("\\x{:02x}", c);
      };
      out += one(b);
      if (e > b) {
        out += '-';
        out += one(e);
      }
      b = e;
    }
    return out + "]";
  };
  std::string out;
  for (int32_t r = 0; r < rule_count(); ++r) {
    out += fmt::format("r{}{}{} ::=", r, rule_names[static_cast<size_t>(r)].empty() ? "" : ":",
                       rule_names[static_cast<size_t>(r)]);
    for (int32_t a = rule_begin[static_cast<size_t>(r)]; a < rule_begin[static_cast<size_t>(r) + 1]; ++a) {
      if (a != rule_begin[static_cast<size_t>(r)]) out += " |";
      for (int32_t p = alt_starts[static_cast<size_t>(a)]; code[static_cast<size_t>(p)].op != Op::end; ++p) {
        const auto& e = code[static_cast<size_t>(p)];
        out += e.op == Op::term ? fmt::format(" {}", class_text(classes[static_cast<size_t>(e.arg)])) : fmt::format(" r{}", e.arg);
      }
      if (code[static_cast<size_t>(alt_starts[static_cast<size_t>(a)])].op == Op::end) out += " ()";
    }
    out += "\n";
  }
  return out;
}

}  // namespace splash::grammar

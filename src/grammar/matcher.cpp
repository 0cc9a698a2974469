#include "grammar/matcher.h"

#include <algorithm>
#include <unordered_map>

namespace splash::grammar {

namespace {
constexpr size_t kCompactFrames = size_t{1} << 21;  // rebuild caches past these sizes
constexpr size_t kCompactSets = size_t{1} << 15;
}  // namespace

struct Matcher::Arena {
  // A stack frame: "continue at code[pos], then return into parent" (-1: the bottom).
  struct Frame {
    int32_t pos;
    int32_t parent;
  };
  struct Set {
    std::vector<int32_t> leaves;  // frames whose pos is a terminal, sorted
    ByteSet first;                // union of the leaves' terminals: bytes that may advance
    bool complete = false;        // some stack emptied: the input so far is a sentence
    int32_t row = -1;             // transition row in rows, once one is needed
  };

  explicit Arena(const Grammar* grammar) : g(grammar) {
    sets.push_back({});  // set 0: dead
    set_index[hash_of(sets[0].leaves, false)].push_back(0);
  }

  const Grammar* g;
  std::vector<Frame> frames;
  std::unordered_map<uint64_t, int32_t> frame_ids;
  std::vector<Set> sets;
  std::unordered_map<uint64_t, std::vector<int32_t>> set_index;
  std::vector<int32_t> rows;  // 256 entries per row: next set id, or -1 not computed yet
  std::vector<uint32_t> stamp;
  uint32_t epoch = 0;
  std::vector<int32_t> work, scratch;
  bool overflowed = false;

  static uint64_t hash_of(const std::vector<int32_t>& leaves, bool complete) {
    uint64_t h = complete ? 0x9E3779B97F4A7C15ull : 0x1234567ull;
    for (int32_t f : leaves) h = (h ^ static_cast<uint32_t>(f)) * 0x100000001B3ull + (h >> 29);
    return h;
  }

  int32_t frame(int32_t pos, int32_t parent) {
    const uint64_t key = (uint64_t{static_cast<uint32_t>(pos)} << 32) | static_cast<uint32_t>(parent);
    auto [it, fresh] = frame_ids.try_emplace(key, static_cast<int32_t>(frames.size()));
    if (fresh) {
      frames.push_back({pos, parent});
      stamp.push_back(0);
    }
    return it->second;
  }

  // Expands frame f until every stack has a terminal on top (a leaf), popping finished
  // alternatives and pushing called rules; leaves go to scratch. Frames already visited in
  // this epoch are skipped: that is both the dedupe and what ends tail-call cycles.
  bool closure(int32_t f) {
    bool complete = false;
    const auto& code = g->code;
    work.push_back(f);
    while (!work.empty()) {
      const int32_t cur = work.back();
      work.pop_back();
      if (cur < 0) {
        complete = true;
        continue;
      }
      if (stamp[static_cast<size_t>(cur)] == epoch) continue;
      stamp[static_cast<size_t>(cur)] = epoch;
      const Frame fr = frames[static_cast<size_t>(cur)];
      const auto& e = code[static_cast<size_t>(fr.pos)];
      switch (e.op) {
        case Grammar::Op::term: scratch.push_back(cur); break;
        case Grammar::Op::end: work.push_back(fr.parent); break;
        case Grammar::Op::rule: {
          // A call in tail position returns straight into our parent: no frame for us.
          const int32_t cont = code[static_cast<size_t>(fr.pos) + 1].op == Grammar::Op::end
                                   ? fr.parent
                                   : frame(fr.pos + 1, fr.parent);
          const auto r = static_cast<size_t>(e.arg);
          for (int32_t a = g->rule_begin[r]; a < g->rule_begin[r + 1]; ++a) {
            work.push_back(frame(g->alt_starts[static_cast<size_t>(a)], cont));
          }
          break;
        }
      }
    }
    return complete;
  }

  void next_epoch() {
    if (++epoch == 0) {
      std::fill(stamp.begin(), stamp.end(), 0);
      epoch = 1;
    }
  }

  // Interns scratch (any order, may repeat) as a set id; clears scratch.
  int32_t intern(bool complete) {
    std::sort(scratch.begin(), scratch.end());
    scratch.erase(std::unique(scratch.begin(), scratch.end()), scratch.end());
    if (scratch.size() > kMaxStacks) {
      overflowed = true;
      scratch.clear();
      return 0;
    }
    const uint64_t h = hash_of(scratch, complete);
    auto& bucket = set_index[h];
    for (int32_t id : bucket) {
      const auto& s = sets[static_cast<size_t>(id)];
      if (s.complete == complete && s.leaves == scratch) {
        scratch.clear();
        return id;
      }
    }
    Set s;
    s.complete = complete;
    for (int32_t f : scratch) {
      s.first.add(g->classes[static_cast<size_t>(g->code[static_cast<size_t>(frames[static_cast<size_t>(f)].pos)].arg)]);
    }
    s.leaves = scratch;
    scratch.clear();
    const auto id = static_cast<int32_t>(sets.size());
    sets.push_back(std::move(s));
    bucket.push_back(id);
    return id;
  }

  int32_t initial() {
    next_epoch();
    bool complete = false;
    const auto r = static_cast<size_t>(g->root);
    for (int32_t a = g->rule_begin[r]; a < g->rule_begin[r + 1]; ++a) {
      complete |= closure(frame(g->alt_starts[static_cast<size_t>(a)], -1));
    }
    return intern(complete);
  }

  int32_t compute(int32_t set, uint8_t b) {
    int32_t next = 0;
    if (sets[static_cast<size_t>(set)].first.has(b)) {
      next_epoch();
      bool complete = false;
      // Index, not reference: closure() grows frames, intern() grows sets.
      const size_t n = sets[static_cast<size_t>(set)].leaves.size();
      for (size_t i = 0; i < n; ++i) {
        const int32_t leaf = sets[static_cast<size_t>(set)].leaves[i];
        const Frame fr = frames[static_cast<size_t>(leaf)];
        const auto& cls = g->classes[static_cast<size_t>(g->code[static_cast<size_t>(fr.pos)].arg)];
        if (cls.has(b)) complete |= closure(frame(fr.pos + 1, fr.parent));
      }
      next = intern(complete);
    }
    auto& s = sets[static_cast<size_t>(set)];
    if (s.row < 0) {
      s.row = static_cast<int32_t>(rows.size() / 256);
      rows.resize(rows.size() + 256, -1);
    }
    rows[static_cast<size_t>(s.row) * 256 + b] = next;
    return next;
  }

  int32_t step(int32_t set, uint8_t b) {
    const int32_t row = sets[static_cast<size_t>(set)].row;
    if (row >= 0) {
      const int32_t t = rows[static_cast<size_t>(row) * 256 + b];
      if (t >= 0) return t;
    }
    return compute(set, b);
  }

  // Copies set `id` of `from` into this arena (frames copied along their parent chains).
  int32_t import(const Arena& from, int32_t id, std::unordered_map<int32_t, int32_t>& memo) {
    const auto& s = from.sets[static_cast<size_t>(id)];
    std::vector<int32_t> chain;
    for (int32_t leaf : s.leaves) {
      chain.clear();
      int32_t f = leaf;
      while (f >= 0 && !memo.count(f)) {
        chain.push_back(f);
        f = from.frames[static_cast<size_t>(f)].parent;
      }
      int32_t parent = f < 0 ? -1 : memo[f];
      for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
        parent = frame(from.frames[static_cast<size_t>(*it)].pos, parent);
        memo[*it] = parent;
      }
      scratch.push_back(memo[leaf]);
    }
    return intern(s.complete);
  }
};

Matcher::Matcher(std::shared_ptr<const Grammar> grammar)
    : grammar_(std::move(grammar)), arena_(std::make_unique<Arena>(grammar_.get())) {
  initial_ = current_ = arena_->initial();
}

Matcher::~Matcher() = default;
Matcher::Matcher(const Matcher& o)
    : grammar_(o.grammar_), arena_(std::make_unique<Arena>(*o.arena_)), current_(o.current_), history_(o.history_),
      initial_(o.initial_) {}
Matcher& Matcher::operator=(const Matcher& o) {
  if (this != &o) *this = Matcher(o);
  return *this;
}
Matcher::Matcher(Matcher&&) noexcept = default;
Matcher& Matcher::operator=(Matcher&&) noexcept = default;

int32_t Matcher::step(int32_t set, uint8_t byte) const { return arena_->step(set, byte); }

bool Matcher::can_accept(std::string_view bytes) const {
  int32_t s = current_;
  for (char c : bytes) {
    s = arena_->step(s, static_cast<uint8_t>(c));
    if (s == 0) return false;
  }
  return true;
}

bool Matcher::accept(std::string_view bytes) {
  maybe_compact();
  int32_t s = current_;
  for (char c : bytes) {
    s = arena_->step(s, static_cast<uint8_t>(c));
    if (s == 0) return false;
  }
  history_.push_back(current_);
  if (history_.size() > kHistory) history_.erase(history_.begin());
  current_ = s;
  return true;
}

bool Matcher::is_complete() const { return arena_->sets[static_cast<size_t>(current_)].complete; }
bool Matcher::is_dead() const { return arena_->sets[static_cast<size_t>(current_)].leaves.empty(); }
bool Matcher::overflowed() const { return arena_->overflowed; }

bool Matcher::rollback(size_t n) {
  if (n > history_.size()) return false;
  if (n == 0) return true;
  current_ = history_[history_.size() - n];
  history_.resize(history_.size() - n);
  return true;
}

void Matcher::reset() {
  history_.clear();
  current_ = initial_;
}

void Matcher::fill_mask(const TokenTrie& trie, std::vector<uint8_t>& allowed) const {
  allowed.assign(trie.vocab_size(), 0);
  auto& a = *arena_;
  if (a.sets[static_cast<size_t>(current_)].leaves.empty()) return;
  const auto& nodes = trie.nodes();
  const auto& ids = trie.token_ids();
  std::vector<int32_t> state(static_cast<size_t>(trie.max_depth()) + 1);
  state[0] = current_;
  const auto n = static_cast<int32_t>(nodes.size());
  for (int32_t i = 0; i < n;) {
    const auto& node = nodes[static_cast<size_t>(i)];
    const int32_t s = a.step(state[node.depth - 1u], node.byte);
    if (s == 0) {
      i = node.subtree_end;
      continue;
    }
    state[node.depth] = s;
    for (int32_t t = node.tokens_begin; t < node.tokens_end; ++t) allowed[static_cast<size_t>(ids[static_cast<size_t>(t)])] = 1;
    i = a.sets[static_cast<size_t>(s)].leaves.empty() ? node.subtree_end : i + 1;
  }
}

std::string Matcher::forced_bytes(size_t max_bytes) const {
  std::string out;
  int32_t s = current_;
  while (out.size() < max_bytes) {
    const auto& set = arena_->sets[static_cast<size_t>(s)];
    if (set.complete || set.leaves.empty() || set.first.count() != 1) break;
    int b = 0;
    while (!set.first.has(static_cast<uint8_t>(b))) ++b;
    const int32_t next = arena_->step(s, static_cast<uint8_t>(b));
    if (next == 0) break;
    out.push_back(static_cast<char>(b));
    s = next;
  }
  return out;
}

void Matcher::maybe_compact() {
  if (arena_->frames.size() < kCompactFrames && arena_->sets.size() < kCompactSets) return;
  auto fresh = std::make_unique<Arena>(grammar_.get());
  fresh->overflowed = arena_->overflowed;
  std::unordered_map<int32_t, int32_t> memo;
  current_ = fresh->import(*arena_, current_, memo);
  initial_ = fresh->import(*arena_, initial_, memo);
  for (auto& h : history_) h = fresh->import(*arena_, h, memo);
  arena_ = std::move(fresh);
}

}  // namespace splash::grammar

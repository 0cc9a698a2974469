#pragma once
// A hybrid model's recurrent-state snapshots (model.h: ModelInfo::state_snapshots): the
// cache layer's bookkeeping of which snapshot holds the state after which prefix of tokens.
// A recurrent state cannot be rewound (but for refused guesses, Model::rewind_state), so a
// prefix hit needs the state at the hit's end:
// the engine saves a sequence's state a few tokens before its prompt's end and when it
// finishes (a coding agent's next turn extends the previous prompt and reply), and a new
// sequence resumes from the deepest snapshot its prompt extends, its KV blocks taken from
// the prefix index as usual; it also saves some inside a long prompt, at a few thousand
// tokens and each doubling (interior snapshots: stepping stones for a later prompt that
// shares only the beginning).
// The states themselves live in the model, like the blocks' contents; an interior snapshot
// is overwritten before any other (a long prompt's grid never pushes out the turns of other
// conversations while one of its own is left), each kind least recently used first.
#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

namespace splash::cache {

struct SnapshotCounters {
  int total = 0, held = 0;
  uint64_t saved = 0, hits = 0;
};

class StateSnapshots {
 public:
  explicit StateSnapshots(int count);  // 0: none are kept

  // Snapshots whose prefix `tokens` extends, at most `limit` tokens long: (snapshot, tokens),
  // deepest first.
  struct Candidate {
    int snapshot, tokens;
  };
  std::vector<Candidate> candidates(std::span<const int32_t> tokens, int limit) const;
  // Marks a snapshot used by a new sequence (a hit; an interior one is kept as any other from
  // then on).
  void use(int snapshot);
  // The snapshot to save the state after `prefix` into: an empty one, else the least recently
  // used interior one, else the least recently used, which now names that prefix; -1 when
  // one already holds it (then marked used, and no longer interior unless `interior`) or none
  // are kept.
  int store(std::span<const int32_t> prefix, bool interior = false);
  // Forgets what a snapshot holds (its state could not be saved).
  void discard(int snapshot);
  // Whether a snapshot holds the state after `prefix`.
  bool holds(std::span<const int32_t> prefix) const;

  SnapshotCounters counters() const;

 private:
  using Key = uint64_t;
  static Key extend(Key key, int32_t token);
  static Key key_of(std::span<const int32_t> prefix);
  struct Entry {
    Key key = 0;
    int tokens = 0;  // -1: empty
    bool interior = false;
    uint64_t last_used = 0;
    std::vector<int32_t> prefix;  // compared on a hit: the key alone could collide
  };
  int find(std::span<const int32_t> prefix, Key key) const;  // the entry holding prefix, or -1
  std::vector<Entry> entries_;
  std::unordered_map<Key, int> by_key_;
  uint64_t clock_ = 0, saved_ = 0, hits_ = 0;
};

}  // namespace splash::cache

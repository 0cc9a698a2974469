#pragma once
// The memory plan: from a budget (--max-memory, or what this machine can give without
// swapping, less a reserve) subtract weights, activations, runtime buffers and the byte
// budget of every cache outside the KV pool; what is left holds the KV cache, which fixes
// the maximum context. Printed at start-up as a
// breakdown table and reported by /status; a model that cannot run at a useful context is
// refused with the same table.
#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "model/model.h"

namespace splash::engine {

using model::MemoryNeeds;

// A cache outside the KV pool (compiled grammars, encoded images, stored responses, request
// bodies being read), bounded by its own byte budget, which the plan sets aside.
struct CacheBudget {
  std::string name;
  size_t bytes = 0;
  std::string note;
};

struct MemoryPlan {
  size_t budget_bytes = 0;
  std::string budget_source;
  size_t weight_bytes = 0, mapped_bytes = 0, activation_bytes = 0, runtime_bytes = 0, kv_bytes = 0;
  // A hybrid model's recurrent states: one slot per sequence that runs at once.
  size_t state_bytes = 0;
  int state_slots = 0;
  // And snapshots of such states for prefix hits (two a sequence: before its prompt's end,
  // at its reply's end).
  size_t snapshot_bytes = 0;
  int state_snapshots = 0;
  std::vector<CacheBudget> caches;  // host memory: inside the budget on the CPU, beside it on a GPU
  bool caches_in_budget = true;
  int batch_tokens = 0;  // the tokens of the pass the activations are sized for
  int max_context = 0;      // the longest sequence (prompt + reply)
  int kv_blocks = 0;        // the paged KV pool
  std::string kv_type = "q8";
  int max_sequences = 1;    // sequences that fit at once at the full context (shorter ones: more)
  bool fits = false;
  std::string problem;      // why it does not fit

  size_t cache_bytes() const;  // those counted in the budget
  size_t total_bytes() const {
    return weight_bytes + mapped_bytes + activation_bytes + runtime_bytes + cache_bytes() + state_bytes + snapshot_bytes +
           kv_bytes;
  }
  std::string table() const;
};

inline constexpr int kBlockTokens = model::kKvBlockTokens;
// The pool holds at most this many sequences at the full context.
inline constexpr size_t kMaxFullContexts = 32;
// A hybrid model's server runs at most this many sequences at once (each holds a recurrent
// state, e.g. 61 MiB for Qwen3.5-35B-A3B), fewer when the budget is short of them.
inline constexpr int kServerStateSlots = 16;

// Below this many tokens a coding agent cannot work (its system prompt alone is longer).
inline constexpr int kMinimumUsefulContext = 2048;

// Where the budget comes from when the model runs on a GPU: its free memory.
struct GpuMemory {
  std::string name;
  size_t free_bytes = 0, total_bytes = 0;
};

// The caches every engine has (compiled grammars; encoded images when it reads them).
std::vector<CacheBudget> engine_caches(bool vision);

// max_memory: --max-memory, if given; requested_context: --max-context (0: the model's);
// gpu: the device's memory when the model runs there (the budget is then the GPU's free
// memory less a reserve, capped by --max-memory), else the budget is this machine's memory;
// caches: engine_caches() and whatever the caller adds (a server's); sequences: how many a
// hybrid model's recurrent states are set aside for (a server's kServerStateSlots, fewer when
// the budget is short; 1 for a command that runs one sequence); snapshot_memory: a server's
// bytes for a hybrid model's state snapshots (--snapshot-memory; none: two a sequence within
// a quarter of what one full context's KV leaves).
MemoryPlan plan_memory(const MemoryNeeds& needs, std::optional<size_t> max_memory, int requested_context,
                       const std::optional<GpuMemory>& gpu = std::nullopt,
                       std::vector<CacheBudget> caches = engine_caches(false), int sequences = kServerStateSlots,
                       std::optional<size_t> snapshot_memory = std::nullopt);

// Memory this machine can give without swapping: MemAvailable, capped by a cgroup limit.
size_t available_memory_bytes();

// "8G", "512MiB", "1.5g", "1073741824" -> bytes; nullopt if malformed.
std::optional<size_t> parse_memory_size(const std::string& text);

}  // namespace splash::engine

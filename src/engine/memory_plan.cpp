#include "engine/memory_plan.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <fstream>
#include <sstream>

#include "engine/constraint_cache.h"
#include "engine/image_feature_cache.h"

namespace splash::engine {
namespace {

// Threads, HTTP buffers, tokenizer tables, allocator slack: measured RSS minus the parts
// above is ~60 MB for the default model; this keeps a margin. The caches are apart.
constexpr size_t kRuntimeBytes = size_t{128} << 20;

std::string human(size_t bytes) {
  const double mib = static_cast<double>(bytes) / (1024.0 * 1024.0);
  return mib >= 1024.0 ? fmt::format("{:.2f} GiB", mib / 1024.0) : fmt::format("{:.1f} MiB", mib);
}

}  // namespace

std::string MemoryPlan::table() const {
  std::string out = fmt::format("memory plan  budget {} ({})\n", human(budget_bytes), budget_source);
  auto row = [&](const char* what, size_t bytes, const std::string& note) {
    out += fmt::format("  {:<22} {:>12}  {}\n", what, human(bytes), note);
  };
  row("weights (packed)", weight_bytes, "");
  row("weights (mapped file)", mapped_bytes, "read from the GGUF mapping as needed");
  row("activations", activation_bytes, fmt::format("one {}-token batch", batch_tokens));
  row("runtime", runtime_bytes, "threads, buffers, tokenizer");
  for (const auto& cache : caches)
    row(cache.name.c_str(), cache.bytes, caches_in_budget ? cache.note : cache.note + " (host memory, beside the plan)");
  if (state_slots > 0)
    row("recurrent states", state_bytes,
        fmt::format("{} sequence(s) at once, {} each", state_slots, human(state_bytes / state_slots)));
  if (state_snapshots > 0)
    row("state snapshots", snapshot_bytes,
        fmt::format("{} for prefix hits (a prompt's end, a reply's end)", state_snapshots));
  row("KV cache", kv_bytes,
      fmt::format("{} blocks of {} tokens ({}): {} sequence(s) at the full {}-token context", kv_blocks,
                  kBlockTokens, kv_type, max_sequences, max_context));
  row("total", total_bytes(), fits ? "" : "DOES NOT FIT: " + problem);
  return out;
}

size_t MemoryPlan::cache_bytes() const {
  if (!caches_in_budget) return 0;
  size_t bytes = 0;
  for (const auto& cache : caches) bytes += cache.bytes;
  return bytes;
}

std::vector<CacheBudget> engine_caches(bool vision) {
  std::vector<CacheBudget> caches{{"compiled grammars", kConstraintCacheBytes, "schemas and tool grammars, least recently used out"}};
  if (vision) caches.push_back({"image features", ImageFeatureCache::kDefaultBytes, "encoded images, least recently used out"});
  return caches;
}

MemoryPlan plan_memory(const MemoryNeeds& needs, std::optional<size_t> max_memory, int requested_context,
                       const std::optional<GpuMemory>& gpu, std::vector<CacheBudget> caches, int sequences,
                       std::optional<size_t> snapshot_memory) {
  MemoryPlan plan;
  plan.caches = std::move(caches);
  plan.caches_in_budget = !gpu;
  if (gpu) {
    // Leave 5% (at least 1 GiB) of the free memory for the CUDA context's own growth, cuBLAS's
    // workspaces and other programs on the GPU.
    const size_t reserve = std::max(gpu->free_bytes / 20, size_t{1} << 30);
    const size_t usable = gpu->free_bytes > reserve ? gpu->free_bytes - reserve : 0;
    plan.budget_bytes = max_memory ? std::min(*max_memory, usable) : usable;
    plan.budget_source = fmt::format("GPU {}: {} free of {}, less a {} reserve{}", gpu->name, human(gpu->free_bytes),
                                     human(gpu->total_bytes), human(reserve),
                                     max_memory && *max_memory < usable ? ", capped by --max-memory" : "");
  } else if (max_memory) {
    plan.budget_bytes = *max_memory;
    plan.budget_source = "--max-memory";
  } else {
    const size_t available = available_memory_bytes();
    // Leave 10% (at least 512 MiB) to the rest of the machine.
    const size_t reserve = std::max(available / 10, size_t{512} << 20);
    plan.budget_bytes = available > reserve ? available - reserve : 0;
    plan.budget_source = fmt::format("available memory {} less a {} reserve", human(available), human(reserve));
  }
  plan.weight_bytes = needs.weight_bytes;
  plan.mapped_bytes = needs.mapped_bytes;
  plan.activation_bytes = needs.activation_bytes;
  plan.batch_tokens = needs.max_batch_tokens;
  plan.runtime_bytes = kRuntimeBytes;
  const size_t fixed = plan.weight_bytes + plan.mapped_bytes + plan.activation_bytes + plan.runtime_bytes + plan.cache_bytes();
  // --max-context may exceed the model's trained window (as llama.cpp's -c may): positions
  // past it are computed the same way, but the model was never trained on them, so quality
  // degrades; print_summary warns. Agents' prompts (15-20K tokens) need this on small models.
  const int wanted = requested_context > 0 ? requested_context : needs.native_context;
  size_t room = plan.budget_bytes > fixed ? plan.budget_bytes - fixed : 0;
  if (needs.recurrent_state_bytes > 0) {  // at most half of what is left, at least one sequence's
    // (each with its room to take refused guesses back out: drafts are verified on every model)
    const size_t per_sequence = needs.recurrent_state_bytes + needs.draft_rewind_bytes;
    plan.state_slots = static_cast<int>(
        std::clamp<size_t>(room / 2 / per_sequence, 1, static_cast<size_t>(std::max(1, sequences))));
    plan.state_bytes = plan.state_slots * per_sequence;
    room = room > plan.state_bytes ? room - plan.state_bytes : 0;
    // A server's snapshots: as many as --snapshot-memory holds, else two a sequence, within a
    // quarter of what one full context's KV leaves (so they never shorten the context; none
    // when that is short). A one-sequence command continues its own state and keeps none.
    const size_t one_context = (static_cast<size_t>(wanted) + kBlockTokens - 1) / kBlockTokens * needs.kv_bytes_per_block;
    const size_t spare = room > one_context ? room - one_context : 0;
    if (sequences <= 1)
      plan.state_snapshots = 0;
    else if (snapshot_memory)
      plan.state_snapshots = static_cast<int>(std::min<size_t>(*snapshot_memory / needs.recurrent_state_bytes, 1 << 20));
    else
      plan.state_snapshots = static_cast<int>(
          std::min<size_t>(spare / 4 / needs.recurrent_state_bytes, static_cast<size_t>(2 * plan.state_slots)));
    plan.snapshot_bytes = plan.state_snapshots * needs.recurrent_state_bytes;
    room = room > plan.snapshot_bytes ? room - plan.snapshot_bytes : 0;
  }
  const size_t per_block = std::max<size_t>(needs.kv_bytes_per_block, 1);
  const size_t wanted_blocks = (static_cast<size_t>(wanted) + kBlockTokens - 1) / kBlockTokens;
  // The pool: what the budget leaves, up to kMaxFullContexts sequences at the full context
  // (its pages become resident only as they are written).
  const size_t blocks = std::min(room / per_block, wanted_blocks * kMaxFullContexts);
  plan.kv_blocks = static_cast<int>(blocks);
  plan.max_context = static_cast<int>(std::min(blocks, wanted_blocks) * kBlockTokens);
  plan.max_context = std::min(plan.max_context, wanted);
  plan.kv_bytes = blocks * needs.kv_bytes_per_block;
  plan.max_sequences = plan.max_context > 0 ? static_cast<int>(blocks * kBlockTokens / plan.max_context) : 0;
  const int useful = std::min(kMinimumUsefulContext, wanted);
  plan.fits = plan.max_context >= useful;
  if (!plan.fits)
    plan.problem = fmt::format("needs {} for the model{}{} and {} for a {}-token context", human(fixed),
                               plan.state_bytes > 0 ? fmt::format(", {} for its recurrent state", human(plan.state_bytes))
                                                    : std::string(),
                               plan.snapshot_bytes > 0 && snapshot_memory
                                   ? fmt::format(", {} for its state snapshots (--snapshot-memory)", human(plan.snapshot_bytes))
                                   : std::string(),
                               human((static_cast<size_t>(useful) + kBlockTokens - 1) / kBlockTokens * needs.kv_bytes_per_block),
                               useful);
  return plan;
}

size_t available_memory_bytes() {
  size_t available = 0;
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  size_t value = 0;
  std::string unit;
  while (meminfo >> key >> value) {
    std::getline(meminfo, unit);
    if (key == "MemAvailable:") {
      available = value * 1024;
      break;
    }
  }
  // A container's memory limit (cgroup v2) can be far below what the host has free.
  std::ifstream limit_file("/sys/fs/cgroup/memory.max");
  std::string limit;
  if (limit_file >> limit && limit != "max") {
    std::ifstream usage_file("/sys/fs/cgroup/memory.current");
    size_t usage = 0;
    usage_file >> usage;
    const size_t cap = std::stoull(limit);
    if (cap > usage) available = std::min(available, cap - usage);
  }
  return available;
}

std::optional<size_t> parse_memory_size(const std::string& text) {
  std::istringstream in(text);
  double number = 0.0;
  if (!(in >> number) || !std::isfinite(number) || number <= 0.0) return std::nullopt;
  std::string unit;
  in >> unit;
  std::string rest;
  if (in >> rest) return std::nullopt;
  std::transform(unit.begin(), unit.end(), unit.begin(), [](unsigned char c) { return std::tolower(c); });
  double scale = 1.0;
  if (unit.empty() || unit == "b") scale = 1.0;
  else if (unit == "k" || unit == "kb" || unit == "kib") scale = 1024.0;
  else if (unit == "m" || unit == "mb" || unit == "mib") scale = 1024.0 * 1024.0;
  else if (unit == "g" || unit == "gb" || unit == "gib") scale = 1024.0 * 1024.0 * 1024.0;
  else if (unit == "t" || unit == "tb" || unit == "tib") scale = 1024.0 * 1024.0 * 1024.0 * 1024.0;
  else return std::nullopt;
  const double bytes = number * scale;
  if (bytes >= 1.8e19) return std::nullopt;
  return static_cast<size_t>(bytes);
}

}  // namespace splash::engine

#pragma once
// Compiled output constraints, kept by everything they are compiled from: agents send the
// same tools with every request, and compiling their schemas can take a while. Bounded by
// bytes, not by count (one enum schema of a few MB compiles to tens of MB of grammar), least
// recently used out first; an entry larger than the whole budget is returned, not kept. The
// memory plan counts the budget (kConstraintCacheBytes).
#include <cstddef>
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "engine/output_constraints.h"

namespace splash::engine {

inline constexpr size_t kConstraintCacheBytes = size_t{128} << 20;

class ConstraintCache {
 public:
  using Compile = std::function<std::shared_ptr<const OutputConstraints>(const ChatRequest&)>;
  explicit ConstraintCache(size_t budget_bytes = kConstraintCacheBytes) : budget_(budget_bytes) {}

  // The cached constraints of the request, or compile(request) (kept when it fits).
  std::shared_ptr<const OutputConstraints> get(const ChatRequest& request, const Compile& compile);

  struct Stats {
    size_t entries = 0, bytes = 0;
    uint64_t hits = 0, misses = 0;
  };
  Stats stats() const;

 private:
  struct Entry {
    std::string key;
    std::shared_ptr<const OutputConstraints> constraints;
    size_t bytes = 0;
  };
  const size_t budget_;
  mutable std::mutex mutex_;
  std::list<Entry> order_;  // most recently used first
  std::unordered_map<std::string, std::list<Entry>::iterator> index_;
  size_t bytes_ = 0;
  uint64_t hits_ = 0, misses_ = 0;
};

}  // namespace splash::engine

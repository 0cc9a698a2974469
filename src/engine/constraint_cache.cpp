#include "engine/constraint_cache.h"

#include <nlohmann/json.hpp>

namespace splash::engine {

namespace {

// Everything the constraints are compiled from, as one string.
std::string key_of(const ChatRequest& request) {
  nlohmann::json key = {{"choice", static_cast<int>(request.tool_choice)},
                        {"name", request.tool_choice_name},
                        {"parallel", request.parallel_tool_calls},
                        {"format", static_cast<int>(request.output_format.kind)},
                        {"schema", request.output_format.schema},
                        {"grammar", request.output_format.grammar},
                        {"syntax", static_cast<int>(request.tool_syntax)}};
  auto& tools = key["tools"] = nlohmann::json::array();
  for (const auto& t : request.tools)
    tools.push_back({static_cast<int>(t.kind), t.name, t.parameters, t.lark_grammar, t.strict});
  return key.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace

std::shared_ptr<const OutputConstraints> ConstraintCache::get(const ChatRequest& request, const Compile& compile) {
  std::string key = key_of(request);
  {
    std::lock_guard lock(mutex_);
    if (auto it = index_.find(key); it != index_.end()) {
      order_.splice(order_.begin(), order_, it->second);
      ++hits_;
      return it->second->constraints;
    }
    ++misses_;
  }
  auto compiled = compile(request);  // outside the lock: compiling can take a while
  // The key is held twice (list and index).
  const size_t bytes = (compiled ? compiled->memory_bytes() : 0) + 2 * key.size() + sizeof(Entry);
  std::lock_guard lock(mutex_);
  if (bytes > budget_ || index_.count(key)) return compiled;
  order_.push_front({key, compiled, bytes});
  index_.emplace(std::move(key), order_.begin());
  bytes_ += bytes;
  while (bytes_ > budget_) {
    bytes_ -= order_.back().bytes;
    index_.erase(order_.back().key);
    order_.pop_back();
  }
  return compiled;
}

ConstraintCache::Stats ConstraintCache::stats() const {
  std::lock_guard lock(mutex_);
  return {order_.size(), bytes_, hits_, misses_};
}

}  // namespace splash::engine

#include "tokenizer/word_cache.h"

namespace splash::tokenizer {

bool WordCache::lookup(std::string_view word, std::vector<int32_t>& out) {
  if (word.size() > kMaxWordBytes) return false;
  Shard& shard = shard_for(word);
  std::lock_guard lock(shard.mutex);
  const auto it = shard.words.find(word);
  if (it == shard.words.end()) return false;
  out.insert(out.end(), it->second.begin(), it->second.end());
  return true;
}

void WordCache::store(std::string_view word, std::span<const int32_t> ids) {
  if (word.size() > kMaxWordBytes) return;
  Shard& shard = shard_for(word);
  std::lock_guard lock(shard.mutex);
  if (shard.words.size() >= kMaxEntriesPerShard) shard.words.clear();
  shard.words.try_emplace(std::string(word), ids.begin(), ids.end());
}

}  // namespace splash::tokenizer

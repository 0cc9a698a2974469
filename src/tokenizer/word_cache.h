#pragma once
// Remembers the ids of recently encoded pre-tokenizer pieces. Real text repeats the same
// words constantly (" the", "    ", "();"), so most pieces skip the merge loop entirely.
// Sharded by hash with one mutex per shard so concurrent encodes rarely wait on each other;
// a full shard is simply emptied, which bounds memory without bookkeeping.
#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace splash::tokenizer {

// Lets unordered_map<std::string, ...> be searched with a string_view without a copy.
struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};

class WordCache {
 public:
  static constexpr size_t kMaxWordBytes = 64;  // longer pieces are rare and not worth keeping

  // Appends the cached ids of `word` to `out`; false when it is not cached.
  bool lookup(std::string_view word, std::vector<int32_t>& out);
  void store(std::string_view word, std::span<const int32_t> ids);

 private:
  static constexpr size_t kShards = 16;
  static constexpr size_t kMaxEntriesPerShard = 4096;
  struct Shard {
    std::mutex mutex;
    std::unordered_map<std::string, std::vector<int32_t>, StringHash, std::equal_to<>> words;
  };
  Shard& shard_for(std::string_view word) { return shards_[StringHash{}(word) % kShards]; }

  std::array<Shard, kShards> shards_;
};

}  // namespace splash::tokenizer

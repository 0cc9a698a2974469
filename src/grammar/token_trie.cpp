#include "grammar/token_trie.h"

#include <algorithm>
#include <string_view>

#include "common/error.h"

namespace splash::grammar {

TokenTrie::TokenTrie(const std::vector<std::string>& token_bytes, const std::vector<bool>& excluded)
    : vocab_size_(token_bytes.size()) {
  std::vector<int32_t> order;
  for (size_t i = 0; i < token_bytes.size(); ++i) {
    if (token_bytes[i].empty() || (i < excluded.size() && excluded[i])) continue;
    if (token_bytes[i].size() > 0xFFFF) fail("token {} is too long for the grammar trie", i);
    order.push_back(static_cast<int32_t>(i));
  }
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    const auto& x = token_bytes[static_cast<size_t>(a)];
    const auto& y = token_bytes[static_cast<size_t>(b)];
    return x != y ? x < y : a < b;
  });
  // In sorted order a token shares a prefix with the previous one: close the nodes below the
  // common prefix, open new ones for the rest. Tokens are appended as they come, so each
  // node's tokens (equal bytes) are contiguous.
  std::vector<int32_t> path;  // node index per depth - 1
  std::string_view prev;
  for (int32_t id : order) {
    const std::string_view s = token_bytes[static_cast<size_t>(id)];
    size_t common = 0;
    while (common < s.size() && common < prev.size() && common < path.size() && s[common] == prev[common]) ++common;
    while (path.size() > common) {
      nodes_[static_cast<size_t>(path.back())].subtree_end = static_cast<int32_t>(nodes_.size());
      path.pop_back();
    }
    for (size_t d = common; d < s.size(); ++d) {
      const auto t = static_cast<int32_t>(token_ids_.size());
      nodes_.push_back({static_cast<uint8_t>(s[d]), static_cast<uint16_t>(d + 1), 0, t, t});
      path.push_back(static_cast<int32_t>(nodes_.size() - 1));
    }
    auto& last = nodes_[static_cast<size_t>(path.back())];
    if (last.tokens_end != static_cast<int32_t>(token_ids_.size())) fail("token trie: tokens out of order");
    token_ids_.push_back(id);
    last.tokens_end = static_cast<int32_t>(token_ids_.size());
    max_depth_ = std::max(max_depth_, static_cast<int>(s.size()));
    prev = s;
  }
  while (!path.empty()) {
    nodes_[static_cast<size_t>(path.back())].subtree_end = static_cast<int32_t>(nodes_.size());
    path.pop_back();
  }
}

}  // namespace splash::grammar

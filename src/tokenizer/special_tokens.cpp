#include "tokenizer/special_tokens.h"

namespace splash::tokenizer {

int32_t SpecialTokenMatcher::child(int32_t node, uint8_t byte) const {
  for (const auto& [b, index] : nodes_[node].children) {
    if (b == byte) return index;
  }
  return -1;
}

void SpecialTokenMatcher::add(std::string_view text, int32_t id, bool control) {
  if (text.empty()) return;  // an empty token would match everywhere
  int32_t node = 0;
  for (char c : text) {
    const uint8_t byte = static_cast<uint8_t>(c);
    int32_t next = child(node, byte);
    if (next < 0) {
      next = static_cast<int32_t>(nodes_.size());
      nodes_.emplace_back();
      nodes_[node].children.emplace_back(byte, next);
    }
    node = next;
  }
  nodes_[node].id = id;
  nodes_[node].control = control;
  starts_[static_cast<uint8_t>(text[0])] = true;
}

std::optional<SpecialTokenMatcher::Match> SpecialTokenMatcher::find(std::string_view text, size_t from) const {
  if (empty()) return std::nullopt;
  for (size_t pos = from; pos < text.size(); ++pos) {
    if (!starts_[static_cast<uint8_t>(text[pos])]) continue;
    Match best;
    int32_t node = 0;
    for (size_t i = pos; i < text.size(); ++i) {
      node = child(node, static_cast<uint8_t>(text[i]));
      if (node < 0) break;
      const Node& n = nodes_[node];
      if (n.id >= 0) best = {pos, i + 1 - pos, n.id, n.control};
    }
    if (best.id >= 0) return best;
  }
  return std::nullopt;
}

}  // namespace splash::tokenizer

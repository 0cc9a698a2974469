#pragma once
// Finds special tokens (control and user-defined, e.g. "<|im_start|>", "<think>") written
// literally in text, before any pre-tokenization, so they map to their single id instead of
// being cut into pieces. Matching is leftmost-longest over all of them, as Hugging Face's
// added-token matching does: the earliest position where any token starts wins, and there the
// longest token. Whether a control match is then used is the caller's decision (parse_special).
// A byte trie keeps this O(text length x longest token) however many tokens there are.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>
#include <utility>
#include <vector>

namespace splash::tokenizer {

class SpecialTokenMatcher {
 public:
  // Adding the same text again replaces the id.
  void add(std::string_view text, int32_t id, bool control);
  bool empty() const { return nodes_.size() <= 1; }

  struct Match {
    size_t position = 0;
    size_t length = 0;
    int32_t id = -1;
    bool control = false;
  };
  // The first match at or after `from`.
  std::optional<Match> find(std::string_view text, size_t from) const;

 private:
  struct Node {
    std::vector<std::pair<uint8_t, int32_t>> children;  // (byte, node index), few per node
    int32_t id = -1;
    bool control = false;
  };
  int32_t child(int32_t node, uint8_t byte) const;

  std::vector<Node> nodes_{Node{}};  // nodes_[0] is the root
  // Which bytes can start a token, so positions that cannot start one are skipped quickly.
  bool starts_[256] = {};
};

}  // namespace splash::tokenizer

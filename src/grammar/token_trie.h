#pragma once
// The vocabulary as byte strings in a trie, built once per tokenizer and shared read-only by
// every Matcher. Nodes are stored in depth-first order with the index just past their subtree,
// so Matcher::fill_mask walks it as one linear scan and skips a dead subtree with one jump.
#include <cstdint>
#include <string>
#include <vector>

namespace splash::grammar {

class TokenTrie {
 public:
  struct Node {
    uint8_t byte;          // the edge into this node
    uint16_t depth;        // 1 for a child of the (implicit) root
    int32_t subtree_end;   // index just past this node's descendants
    int32_t tokens_begin;  // tokens whose bytes end exactly here: token_ids()[begin, end)
    int32_t tokens_end;
  };

  // token_bytes[i] is token i's raw bytes. Empty strings, and tokens with excluded[i] set
  // (pass control/special tokens here), are never in the trie, so no grammar allows them.
  explicit TokenTrie(const std::vector<std::string>& token_bytes, const std::vector<bool>& excluded = {});

  size_t vocab_size() const { return vocab_size_; }
  const std::vector<Node>& nodes() const { return nodes_; }
  const std::vector<int32_t>& token_ids() const { return token_ids_; }
  int max_depth() const { return max_depth_; }

 private:
  size_t vocab_size_;
  std::vector<Node> nodes_;
  std::vector<int32_t> token_ids_;
  int max_depth_ = 0;
};

}  // namespace splash::grammar

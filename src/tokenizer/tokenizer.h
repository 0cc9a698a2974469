#pragma once
// Byte-level BPE tokenizer (GGUF tokenizer.ggml.model = "gpt2"), id-for-id compatible with
// Hugging Face `tokenizers` for the same vocabulary, merges and pre-tokenizer.
//
// encode(text):
//   1. Invalid UTF-8 is repaired first: each maximal invalid subpart becomes U+FFFD, so
//      encode(bytes) == HF encode(bytes.decode("utf-8", "replace")). (Raw invalid bytes cannot
//      reach HF at all, a Python str is always valid; this is the closest defined behaviour.)
//   2. Control and user-defined tokens written literally in the text are matched
//      leftmost-longest and emitted as their single id. Without parse_special a matched control
//      token is left as plain text (HF's encode_special_tokens); user-defined ones still match.
//   3. The rest is pre-tokenized (see pre_tokenizer.h), each piece spelled byte-level and merged
//      by rank (see bpe.h). A byte the vocabulary has no token for is dropped before merging
//      (as HF's BPE without unk_token and llama.cpp do). SmolLM2's vocabulary lacks 21 of the
//      256 bytes (e.g. 0x04, 0xF1, 0xFF), so such input does not round-trip; HF agrees.
//   encode never adds BOS: a caller that builds a prompt prepends bos() when add_bos() says so.
// decode(ids): the bytes of each token concatenated, then repaired the same way (a cut-off
//   multi-byte character becomes U+FFFD, as in HF's decode). Use StreamingDetokenizer to print
//   tokens while they are generated.
//
// A Tokenizer is immutable after construction and safe to use from many threads at once;
// copies are cheap and share the vocabulary.
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace splash::gguf {
class File;
}

namespace splash::tokenizer {

// GGUF tokenizer.ggml.token_type values (llama.cpp's llama_token_type).
enum class TokenType : int32_t {
  undefined = 0,
  normal = 1,
  unknown = 2,
  control = 3,       // e.g. <|im_start|>: matched in text only when parse_special
  user_defined = 4,  // e.g. <think>: always matched in text, never skipped by decode
  unused = 5,
  byte = 6,
};

// Everything a tokenizer is built from; from_gguf fills it from the file, tests by hand.
struct Vocabulary {
  // Normal tokens in GPT-2's byte-level spelling ("Ġthe"); control and user-defined tokens
  // as their literal text ("<|im_end|>").
  std::vector<std::string> tokens;
  std::vector<TokenType> token_types;  // one per token, or empty: all normal
  std::vector<std::string> merges;     // "left right" in byte-level spelling, best first
  std::string pre_tokenizer = "default";
  std::optional<int32_t> bos, eos;
  std::optional<int32_t> unk;       // reported by unk() only: byte-level BPE never emits it
  std::optional<int32_t> eot, eom;  // end-of-turn / end-of-message ids some models declare
  bool add_bos = false;
};

// A byte range [begin, end) of a text.
struct TextSpan {
  size_t begin = 0;
  size_t end = 0;
};

class Tokenizer {
 public:
  // Throws splash::Error for an inconsistent vocabulary (ids out of range, sizes that differ,
  // an unknown pre-tokenizer name).
  explicit Tokenizer(Vocabulary vocabulary);
  // Reads the tokenizer.ggml.* keys; refuses (splash::Error) tokenizer models other than "gpt2".
  static Tokenizer from_gguf(const gguf::File& file);

  std::vector<int32_t> encode(std::string_view text, bool parse_special = true) const;
  // Like encode(text, true), except that control-token text inside any `literal` span (byte
  // offsets into text) stays plain text: message content rendered into a chat prompt cannot
  // forge <|im_start|>/<|im_end|> turns. Spans must be sorted and not overlap.
  std::vector<int32_t> encode_with_literals(std::string_view text, std::span<const TextSpan> literal) const;
  // skip_special drops control tokens; throws splash::Error for an id outside [0, size()).
  std::string decode(std::span<const int32_t> ids, bool skip_special = false) const;
  // Raw bytes of one token (possibly an incomplete UTF-8 sequence); throws for a bad id.
  const std::string& token_bytes(int32_t id) const;
  // The token as the vocabulary spells it ("Ġthe"); throws for a bad id.
  const std::string& token_text(int32_t id) const;
  TokenType token_type(int32_t id) const;

  size_t size() const;
  int32_t bos() const;  // -1 when the vocabulary declares none
  int32_t eos() const;  // -1 when the vocabulary declares none
  int32_t unk() const;  // -1 when the vocabulary declares none
  bool add_bos() const;
  const std::string& pre_tokenizer_name() const;

  // eos, eot, eom and any token spelled like a known end-of-turn marker
  // (<|endoftext|>, <|im_end|>, <|eot_id|>, <end_of_turn>, ...).
  bool is_end_of_generation(int32_t id) const;
  // The id of the token whose text is exactly `text`: a special token by its literal text
  // ("<|im_end|>") or a normal token by its raw bytes (" the", not "Ġthe").
  std::optional<int32_t> find_token(std::string_view text) const;

 private:
  struct Model;
  const Model& model() const { return *model_; }
  void encode_plain(std::string_view text, std::vector<int32_t>& out) const;
  std::vector<int32_t> encode_impl(std::string_view text, bool parse_special, std::span<const TextSpan> literal) const;

  std::shared_ptr<Model> model_;  // shared by copies; only its word cache ever changes
};

}  // namespace splash::tokenizer

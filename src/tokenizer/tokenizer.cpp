#include "tokenizer/tokenizer.h"

#include <array>
#include <limits>
#include <unordered_map>

#include "common/error.h"
#include "formats/gguf.h"
#include "tokenizer/bpe.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/special_tokens.h"
#include "tokenizer/utf8.h"
#include "tokenizer/word_cache.h"

namespace splash::tokenizer {

namespace {

// Tokens that end a turn in the chat formats of supported families, beyond the declared eos.
constexpr std::array<std::string_view, 9> kEndOfTurnTexts = {
    "<|endoftext|>", "<|im_end|>", "<|eot_id|>", "<|eom_id|>", "<end_of_turn>",
    "<|end|>",       "<|end_of_text|>", "<|return|>", "<｜end▁of▁sentence｜>",
};

bool is_literal(TokenType type) { return type == TokenType::control || type == TokenType::user_defined; }

// HF's GGUF conversion keys the BPE vocabulary by byte-level spelling and respells a token that
// holds characters outside the alphabet; doing the same keeps merges and lookups consistent.
std::string vocabulary_key(const std::string& token) {
  return byte_level::unspell(token) ? token : byte_level::spell(token);
}

}  // namespace

struct Tokenizer::Model {
  std::vector<std::string> tokens;
  std::vector<TokenType> types;
  std::vector<std::string> bytes;  // what each token decodes to
  std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>> by_spelling;
  std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>> literal_ids;
  std::array<int32_t, 256> byte_ids{};  // the one-byte token of each byte, -1 if none
  std::vector<bool> end_of_generation;
  BpeMerges merges;
  PreTokenizer pre;
  SpecialTokenMatcher specials;
  int32_t bos = -1, eos = -1, unk = -1;
  bool add_bos = false;
  mutable WordCache cache;
};

Tokenizer::Tokenizer(Vocabulary v) : model_(std::make_shared<Model>()) {
  Model& m = *model_;
  if (v.tokens.empty()) fail("tokenizer vocabulary is empty");
  if (v.tokens.size() > static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
    fail("tokenizer vocabulary has {} tokens, more than ids can address", v.tokens.size());
  }
  const auto n = static_cast<int32_t>(v.tokens.size());
  if (v.token_types.empty()) v.token_types.assign(v.tokens.size(), TokenType::normal);
  if (v.token_types.size() != v.tokens.size()) {
    fail("tokenizer has {} token types for {} tokens", v.token_types.size(), v.tokens.size());
  }
  const auto checked_id = [n](std::optional<int32_t> id, const char* what) {
    if (!id) return -1;
    if (*id < 0 || *id >= n) fail("tokenizer {} id {} is outside the vocabulary of {} tokens", what, *id, n);
    return *id;
  };
  m.bos = checked_id(v.bos, "bos");
  m.eos = checked_id(v.eos, "eos");
  m.unk = checked_id(v.unk, "unk");
  const int32_t eot = checked_id(v.eot, "eot");
  const int32_t eom = checked_id(v.eom, "eom");
  m.add_bos = v.add_bos;
  m.pre = PreTokenizer::for_name(v.pre_tokenizer);

  m.bytes.resize(v.tokens.size());
  m.end_of_generation.assign(v.tokens.size(), false);
  for (int32_t id = 0; id < n; ++id) {
    const std::string& token = v.tokens[id];
    const TokenType type = v.token_types[id];
    if (static_cast<int32_t>(type) < 0 || static_cast<int32_t>(type) > static_cast<int32_t>(TokenType::byte)) {
      fail("token {} has unknown token type {}", id, static_cast<int32_t>(type));
    }
    // Later duplicates win, as in HF's vocabulary dict and llama.cpp's token map.
    m.by_spelling[vocabulary_key(token)] = id;
    if (is_literal(type)) {
      // Special tokens are written literally, not in byte-level spelling.
      m.bytes[id] = token;
      m.literal_ids[token] = id;
      m.specials.add(token, id, type == TokenType::control);
    } else {
      m.bytes[id] = byte_level::unspell(token).value_or(token);
    }
    for (std::string_view marker : kEndOfTurnTexts) {
      if (token == marker) m.end_of_generation[id] = true;
    }
  }
  for (int32_t id : {m.eos, eot, eom}) {
    if (id >= 0) m.end_of_generation[id] = true;
  }

  m.byte_ids.fill(-1);
  for (int b = 0; b < 256; ++b) {
    const auto it = m.by_spelling.find(byte_level::spell(std::string(1, static_cast<char>(b))));
    if (it != m.by_spelling.end()) m.byte_ids[b] = it->second;
  }

  for (size_t rank = 0; rank < v.merges.size(); ++rank) {
    const std::string& merge = v.merges[rank];
    // Search from 1 so that a left side starting with a space still splits after it.
    const size_t space = merge.find(' ', 1);
    if (space == std::string::npos) fail("tokenizer merge {} ('{}') has no space between its two sides", rank, merge);
    const std::string left = merge.substr(0, space);
    const std::string right = merge.substr(space + 1);
    const auto l = m.by_spelling.find(left);
    const auto r = m.by_spelling.find(right);
    const auto merged = m.by_spelling.find(left + right);
    // A merge naming tokens the vocabulary lacks can never fire; skipping it is harmless.
    if (l == m.by_spelling.end() || r == m.by_spelling.end() || merged == m.by_spelling.end()) continue;
    m.merges.add(l->second, r->second, merged->second);
  }

  m.tokens = std::move(v.tokens);
  m.types = std::move(v.token_types);
}

Tokenizer Tokenizer::from_gguf(const gguf::File& file) {
  const std::string model = file.opt_string("tokenizer.ggml.model").value_or("");
  if (model != "gpt2") {
    fail("{}: tokenizer model '{}' is not supported (splash handles byte-level BPE, 'gpt2')", file.path(), model);
  }
  const auto optional_id = [&](const char* key) -> std::optional<int32_t> {
    const std::optional<uint64_t> id = file.opt_uint(key);
    if (!id) return std::nullopt;
    if (*id > static_cast<uint64_t>(std::numeric_limits<int32_t>::max())) fail("{}: {} = {} is not a token id", file.path(), key, *id);
    return static_cast<int32_t>(*id);
  };

  Vocabulary v;
  v.tokens = file.get_string_array("tokenizer.ggml.tokens");
  if (file.find("tokenizer.ggml.token_type")) {
    for (int32_t type : file.get_int_array("tokenizer.ggml.token_type")) v.token_types.push_back(static_cast<TokenType>(type));
  }
  v.merges = file.get_string_array("tokenizer.ggml.merges");
  v.pre_tokenizer = file.opt_string("tokenizer.ggml.pre").value_or("default");
  v.bos = optional_id("tokenizer.ggml.bos_token_id");
  v.eos = optional_id("tokenizer.ggml.eos_token_id");
  v.unk = optional_id("tokenizer.ggml.unknown_token_id");
  v.eot = optional_id("tokenizer.ggml.eot_token_id");
  v.eom = optional_id("tokenizer.ggml.eom_token_id");
  v.add_bos = file.opt_bool("tokenizer.ggml.add_bos_token").value_or(false);
  try {
    return Tokenizer(std::move(v));
  } catch (const Error& e) {
    fail("{}: {}", file.path(), e.what());
  }
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool parse_special) const {
  std::string repaired;
  if (!utf8::is_valid(text)) {
    repaired = utf8::repair(text);
    text = repaired;
  }
  return encode_impl(text, parse_special, {});
}

std::vector<int32_t> Tokenizer::encode_impl(std::string_view text, bool parse_special,
                                            std::span<const TextSpan> literal) const {
  const Model& m = model();
  // Whether a special-token match at [position, position + length) touches a literal span.
  size_t next_span = 0;
  auto inside_literal = [&](size_t position, size_t length) {
    while (next_span < literal.size() && literal[next_span].end <= position) ++next_span;
    return next_span < literal.size() && literal[next_span].begin < position + length;
  };
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 1);
  size_t plain_from = 0;   // start of the text not yet encoded
  size_t search_from = 0;  // where to look for the next special token
  while (const std::optional<SpecialTokenMatcher::Match> special = m.specials.find(text, search_from)) {
    search_from = special->position + special->length;
    // Without parse_special a control token is plain text, and (as in HF) the span it covers is
    // not searched again for shorter user-defined tokens.
    if (special->control && (!parse_special || inside_literal(special->position, special->length))) continue;
    encode_plain(text.substr(plain_from, special->position - plain_from), ids);
    ids.push_back(special->id);
    plain_from = search_from;
  }
  encode_plain(text.substr(plain_from), ids);
  return ids;
}

std::vector<int32_t> Tokenizer::encode_with_literals(std::string_view text, std::span<const TextSpan> literal) const {
  size_t previous_end = 0;
  for (const TextSpan& span : literal) {
    if (span.begin < previous_end || span.end < span.begin || span.end > text.size())
      fail("encode_with_literals: spans must be sorted, disjoint and inside the text");
    previous_end = span.end;
  }
  if (!utf8::is_valid(text)) {
    // Repair would move the offsets: encode the stretches one by one instead (each repaired
    // on its own); only the pre-tokenizer split at a span edge can differ from encode().
    std::vector<int32_t> ids;
    size_t from = 0;
    auto append = [&](std::string_view piece, bool parse_special) {
      const auto part = encode(piece, parse_special);
      ids.insert(ids.end(), part.begin(), part.end());
    };
    for (const TextSpan& span : literal) {
      append(text.substr(from, span.begin - from), true);
      append(text.substr(span.begin, span.end - span.begin), false);
      from = span.end;
    }
    append(text.substr(from), true);
    return ids;
  }
  return encode_impl(text, /*parse_special=*/true, literal);
}

void Tokenizer::encode_plain(std::string_view text, std::vector<int32_t>& out) const {
  const Model& m = model();
  std::vector<int32_t> symbols;
  m.pre.split(text, [&](std::string_view piece) {
    if (m.cache.lookup(piece, out)) return;
    symbols.clear();
    for (char c : piece) {
      const int32_t id = m.byte_ids[static_cast<uint8_t>(c)];
      // A byte the vocabulary cannot spell is dropped before merging, as HF's BPE (no unk_token
      // in byte-level vocabularies) and llama.cpp both do; emitting unk would change the ids.
      if (id >= 0) symbols.push_back(id);
    }
    m.merges.apply(symbols);
    m.cache.store(piece, symbols);
    out.insert(out.end(), symbols.begin(), symbols.end());
  });
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special) const {
  std::string text;
  for (int32_t id : ids) {
    if (skip_special && token_type(id) == TokenType::control) continue;
    text += token_bytes(id);
  }
  return utf8::is_valid(text) ? text : utf8::repair(text);
}

const std::string& Tokenizer::token_bytes(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= size()) fail("token id {} is outside the vocabulary of {} tokens", id, size());
  return model().bytes[id];
}

const std::string& Tokenizer::token_text(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= size()) fail("token id {} is outside the vocabulary of {} tokens", id, size());
  return model().tokens[id];
}

TokenType Tokenizer::token_type(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= size()) fail("token id {} is outside the vocabulary of {} tokens", id, size());
  return model().types[id];
}

size_t Tokenizer::size() const { return model().tokens.size(); }
int32_t Tokenizer::bos() const { return model().bos; }
int32_t Tokenizer::eos() const { return model().eos; }
int32_t Tokenizer::unk() const { return model().unk; }
bool Tokenizer::add_bos() const { return model().add_bos; }
const std::string& Tokenizer::pre_tokenizer_name() const { return model().pre.name(); }

bool Tokenizer::is_end_of_generation(int32_t id) const {
  return id >= 0 && static_cast<size_t>(id) < size() && model().end_of_generation[id];
}

std::optional<int32_t> Tokenizer::find_token(std::string_view text) const {
  const Model& m = model();
  if (const auto it = m.literal_ids.find(text); it != m.literal_ids.end()) return it->second;
  if (const auto it = m.by_spelling.find(byte_level::spell(text)); it != m.by_spelling.end()) {
    if (!is_literal(m.types[it->second])) return it->second;
  }
  return std::nullopt;
}

}  // namespace splash::tokenizer

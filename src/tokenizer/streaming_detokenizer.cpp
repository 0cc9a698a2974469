#include "tokenizer/streaming_detokenizer.h"

#include <utility>

#include "tokenizer/utf8.h"

namespace splash::tokenizer {

StreamingDetokenizer::StreamingDetokenizer(Tokenizer tokenizer, bool skip_special)
    : tokenizer_(std::move(tokenizer)), skip_special_(skip_special) {}

std::string StreamingDetokenizer::push(int32_t id) {
  const std::string& bytes = tokenizer_.token_bytes(id);
  if (skip_special_ && tokenizer_.token_type(id) == TokenType::control) return {};
  std::string pending = std::move(held_);
  held_.clear();
  pending += bytes;
  // Hold back a correct-but-unfinished character at the end; repair the rest. An earlier held
  // prefix that the new bytes did not complete is an invalid subpart there and becomes U+FFFD,
  // exactly as decode() treats the same bytes.
  const size_t tail = utf8::unfinished_tail_length(pending);
  held_ = pending.substr(pending.size() - tail);
  pending.resize(pending.size() - tail);
  return utf8::is_valid(pending) ? pending : utf8::repair(pending);
}

std::string StreamingDetokenizer::flush() {
  std::string rest = utf8::repair(held_);
  held_.clear();
  return rest;
}

}  // namespace splash::tokenizer

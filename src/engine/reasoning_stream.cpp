#include "engine/reasoning_stream.h"

#include <string_view>
#include <utility>

namespace splash::engine {
namespace {
constexpr std::string_view kOpen = "<think>", kClose = "</think>";
}

ReasoningStream::ReasoningStream(const tokenizer::Tokenizer& tokenizer, ReasoningControl control)
    : tokenizer_(tokenizer),
      control_(std::move(control)),
      phase_(!control_.enabled ? Phase::Reply : control_.opened ? Phase::Thinking : Phase::Opening),
      detokenizer_(tokenizer),
      close_({std::string(kClose)}) {}

std::optional<int32_t> ReasoningStream::take_forced() {
  if (forcing_.empty()) return std::nullopt;
  const int32_t token = forcing_.front();
  forcing_.pop_front();
  return token;
}

ReasoningStream::Fed ReasoningStream::push(int32_t token) {
  Fed fed;
  if (phase_ == Phase::Opening) {
    opening_tokens_.push_back(token);
    opening_text_ += tokenizer_.token_bytes(token);
    if (opening_text_.starts_with(kOpen)) {
      phase_ = Phase::Thinking;
      fed.reasoning = think(std::string_view(opening_text_).substr(kOpen.size()));
    } else if (!kOpen.starts_with(opening_text_)) {
      phase_ = Phase::Reply;
      fed.reply_tokens = std::move(opening_tokens_);
    }
    return fed;
  }
  if (phase_ != Phase::Thinking) return fed;
  ++thinking_tokens_;
  fed.reasoning = think(detokenizer_.push(token));
  if (phase_ == Phase::Thinking && !closing_ && control_.budget >= 0 && thinking_tokens_ >= control_.budget) {
    forcing_.assign(control_.close_tokens.begin(), control_.close_tokens.end());
    closing_ = true;
  }
  return fed;
}

std::string ReasoningStream::think(std::string_view text) {
  std::string shown = close_.push(text);
  if (close_.stopped()) phase_ = Phase::Reply;
  if (!started_) {  // the newlines after "<think>" are not reasoning
    const size_t first = shown.find_first_not_of('\n');
    if (first == std::string::npos) return {};
    shown.erase(0, first);
    started_ = true;
  }
  // Newlines at the end stay held until more text follows: those before "</think>" are not reasoning.
  const size_t last = shown.find_last_not_of('\n');
  if (last == std::string::npos) {
    trailing_newlines_ += shown;
    return {};
  }
  std::string out = std::move(trailing_newlines_);
  trailing_newlines_ = shown.substr(last + 1);
  out.append(shown, 0, last + 1);
  if (phase_ == Phase::Reply) trailing_newlines_.clear();
  return out;
}

std::vector<int32_t> ReasoningStream::take_opening() {
  if (phase_ != Phase::Opening) return {};
  phase_ = Phase::Reply;
  return std::move(opening_tokens_);
}

std::string ReasoningStream::flush() {
  if (phase_ != Phase::Thinking) return {};
  std::string out = think(detokenizer_.flush());
  out += close_.flush();
  return out + std::exchange(trailing_newlines_, {});
}

}  // namespace splash::engine

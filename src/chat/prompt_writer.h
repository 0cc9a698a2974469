#pragma once
// What the C++ chat templates share: a writer that keeps apart the template's own markup and
// the messages' text (RenderedPrompt::content, so control-token text inside a message stays
// text), Jinja's `trim`, and how Qwen's thinking templates split an assistant turn.
#include <string_view>

#include "chat/chat_format.h"

namespace splash::chat {

class PromptWriter {
 public:
  void markup(std::string_view text) { out_.text += text; }
  void content(std::string_view text) {  // message text: kept from acting as control tokens
    out_.content.push_back({out_.text.size(), out_.text.size() + text.size()});
    out_.text += text;
  }
  RenderedPrompt take() { return std::move(out_); }

 private:
  RenderedPrompt out_;
};

// Jinja's `trim` (Python's str.strip over ASCII whitespace).
inline std::string_view jinja_trim(std::string_view s) {
  constexpr std::string_view kSpace = " \t\n\r\f\v";
  const size_t first = s.find_first_not_of(kSpace);
  if (first == std::string_view::npos) return {};
  return s.substr(first, s.find_last_not_of(kSpace) - first + 1);
}

inline std::string_view strip_leading_newlines(std::string_view s) {
  while (!s.empty() && s.front() == '\n') s.remove_prefix(1);
  return s;
}
inline std::string_view strip_trailing_newlines(std::string_view s) {
  while (!s.empty() && s.back() == '\n') s.remove_suffix(1);
  return s;
}

// Qwen3's and Qwen3.5's templates' reasoning and content of an assistant turn: the message's
// own reasoning when it has one, else the inline block of its content (everything before the
// first "</think>", after the last "<think>" in it, less the newlines around it; the content
// is what follows the last "</think>", less its leading newlines).
struct AssistantParts {
  std::string_view reasoning, content;
};
inline AssistantParts assistant_parts(const ChatMessage& m, std::string_view content) {
  if (m.reasoning) return {*m.reasoning, content};
  const size_t first_close = content.find("</think>");
  if (first_close == std::string_view::npos) return {{}, content};
  std::string_view before = strip_trailing_newlines(content.substr(0, first_close));
  if (const size_t open = before.rfind("<think>"); open != std::string_view::npos)
    before.remove_prefix(open + std::string_view("<think>").size());
  const size_t last_close = content.rfind("</think>");
  return {strip_leading_newlines(before), strip_leading_newlines(content.substr(last_close + 8))};
}

}  // namespace splash::chat

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

// Whether a code point is whitespace to Python's str.strip() (str.isspace): the ASCII ones,
// U+001C..U+001F, U+0085, U+00A0, U+1680, U+2000..U+200A, U+2028, U+2029, U+202F, U+205F, U+3000.
constexpr bool is_python_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

// The bytes of the whitespace code point that s starts with (0: none). Only the well-formed
// one- to three-byte UTF-8 forms can be whitespace.
inline size_t leading_python_space(std::string_view s) {
  if (s.empty()) return 0;
  const auto b = [&](size_t i) { return static_cast<unsigned char>(s[i]); };
  if (b(0) < 0x80) return is_python_space(b(0)) ? 1 : 0;
  if ((b(0) & 0xE0) == 0xC0 && s.size() >= 2 && (b(1) & 0xC0) == 0x80)
    return is_python_space(static_cast<char32_t>(((b(0) & 0x1F) << 6) | (b(1) & 0x3F))) ? 2 : 0;
  if ((b(0) & 0xF0) == 0xE0 && s.size() >= 3 && (b(1) & 0xC0) == 0x80 && (b(2) & 0xC0) == 0x80)
    return is_python_space(static_cast<char32_t>(((b(0) & 0x0F) << 12) | ((b(1) & 0x3F) << 6) | (b(2) & 0x3F))) ? 3
                                                                                                               : 0;
  return 0;
}

// The bytes of the whitespace code point that s ends with (0: none).
inline size_t trailing_python_space(std::string_view s) {
  for (size_t length = 1; length <= 3 && length <= s.size(); ++length) {
    const std::string_view tail = s.substr(s.size() - length);
    if (leading_python_space(tail) == length) return length;
  }
  return 0;
}

// Jinja's `trim`: Python's str.strip(), so Unicode whitespace (a non-breaking or ideographic
// space) goes too.
inline std::string_view jinja_trim(std::string_view s) {
  while (const size_t n = leading_python_space(s)) s.remove_prefix(n);
  while (const size_t n = trailing_python_space(s)) s.remove_suffix(n);
  return s;
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

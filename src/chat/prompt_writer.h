#pragma once
// What the C++ chat templates share: a writer that keeps apart the template's own markup and
// the messages' text (RenderedPrompt::content, so control-token text inside a message stays
// text), and Jinja's `trim`.
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

}  // namespace splash::chat

// Qwen3's chat template in C++ (chat_format.h, Qwen3Format), byte for byte.
#include <algorithm>
#include <string_view>

#include "chat/chat_format.h"
#include "chat/prompt_writer.h"
#include "chat/tool_prompt.h"

namespace splash::chat {
namespace {

// The index of the last user message that is a query (not a tool result written as a user
// turn); the last message's index when there is none, as the template starts from.
size_t last_query_index(std::span<const ChatMessage> messages) {
  for (size_t i = messages.size(); i-- > 0;) {
    const std::string_view c = messages[i].content;
    if (messages[i].role == "user" && !(c.starts_with("<tool_response>") && c.ends_with("</tool_response>"))) return i;
  }
  return messages.empty() ? 0 : messages.size() - 1;
}


}  // namespace

RenderedPrompt Qwen3Format::render_conversation(std::span<const ChatMessage> messages, std::span<const ToolSpec> tools,
                                               bool add_generation_prompt) const {
  return render(messages, tools, add_generation_prompt, /*thinking=*/true);
}

RenderedPrompt Qwen3Format::render_reply_prompt(std::span<const ChatMessage> messages, std::span<const ToolSpec> tools,
                                               bool thinking) const {
  return render(messages, tools, /*add_generation_prompt=*/true, thinking);
}

std::vector<std::string> Qwen3Format::stop_texts() const { return {"<|im_end|>", "<|im_start|>"}; }

RenderedPrompt Qwen3Format::render(std::span<const ChatMessage> messages, std::span<const ToolSpec> tools,
                                   bool add_generation_prompt, bool thinking) const {
  PromptWriter w;
  const bool system_first = !messages.empty() && messages.front().role == "system";
  if (!tools.empty()) {
    w.markup("<|im_start|>system\n");
    if (system_first) w.content(messages.front().content), w.markup("\n\n");
    w.markup(tools_system_block(tools, CallExampleBraces::Single));
    w.markup("<|im_end|>\n");
  } else if (system_first) {
    w.markup("<|im_start|>system\n");
    w.content(messages.front().content);
    w.markup("<|im_end|>\n");
  }
  const size_t last_query = last_query_index(messages);
  for (size_t i = 0; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    const bool last = i + 1 == messages.size();
    if (m.role == "user" || (m.role == "system" && i > 0)) {
      w.markup("<|im_start|>" + m.role + "\n");
      w.content(m.content);
      w.markup("<|im_end|>\n");
    } else if (m.role == "assistant") {
      const AssistantParts parts = assistant_parts(m, m.content);
      w.markup("<|im_start|>assistant\n");
      if (i > last_query && (last || !parts.reasoning.empty())) {
        w.markup("<think>\n");
        w.content(strip_leading_newlines(strip_trailing_newlines(parts.reasoning)));
        w.markup("\n</think>\n\n");
        w.content(strip_leading_newlines(parts.content));
      } else {
        w.content(parts.content);
      }
      for (size_t c = 0; c < m.tool_calls.size(); ++c) {
        if (c > 0 || !parts.content.empty()) w.markup("\n");
        w.markup(render_tool_call(m.tool_calls[c]));
      }
      w.markup("<|im_end|>\n");
    } else if (m.role == "tool") {
      if (i == 0 || messages[i - 1].role != "tool") w.markup("<|im_start|>user");
      w.markup("\n<tool_response>\n");
      w.content(m.content);
      w.markup("\n</tool_response>");
      if (last || messages[i + 1].role != "tool") w.markup("<|im_end|>\n");
    }
  }
  if (add_generation_prompt) {
    w.markup("<|im_start|>assistant\n");
    if (!thinking) w.markup("<think>\n\n</think>\n\n");
  }
  return w.take();
}

}  // namespace splash::chat

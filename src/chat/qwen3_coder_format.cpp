// Qwen3-Coder's chat template in C++ (chat_format.h, Qwen3CoderFormat), byte for byte.
#include <string_view>

#include "chat/chat_format.h"
#include "chat/prompt_writer.h"
#include "chat/xml_tool_format.h"

namespace splash::chat {
namespace {

constexpr std::string_view kDefaultSystemPrompt =
    "You are Qwen, a helpful AI assistant that can interact with a computer to solve tasks.";

}  // namespace

std::vector<std::string> Qwen3CoderFormat::stop_texts() const { return {"<|im_end|>", "<|im_start|>"}; }

RenderedPrompt Qwen3CoderFormat::render_conversation(std::span<const ChatMessage> messages,
                                                     std::span<const ToolSpec> tools, bool add_generation_prompt) const {
  PromptWriter w;
  const bool system_first = !messages.empty() && messages.front().role == "system";
  // The system turn: the client's, else the default one only when there are tools.
  if (system_first || !tools.empty()) {
    w.markup("<|im_start|>system\n");
    if (system_first) w.content(messages.front().content);
    else w.markup(kDefaultSystemPrompt);
    if (!tools.empty()) {
      w.markup("\n\n");
      w.markup(xml_tools_system_block(tools));
    }
    w.markup("<|im_end|>\n");
  }
  const size_t first = system_first ? 1 : 0;
  for (size_t i = first; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    if (m.role == "assistant" && !m.tool_calls.empty()) {
      w.markup("<|im_start|>assistant");
      if (const std::string_view text = jinja_trim(m.content); !text.empty()) {
        w.markup("\n");
        w.content(text);
        w.markup("\n");
      }
      for (const ToolCall& call : m.tool_calls) {
        w.markup("\n");
        w.markup(render_xml_tool_call(call));
      }
      w.markup("<|im_end|>\n");
    } else if (m.role == "tool") {
      // Consecutive results share one user turn; a result that opens the conversation gets
      // no header (the template looks at the message before it).
      if (i > first && messages[i - 1].role != "tool") w.markup("<|im_start|>user\n");
      w.markup("<tool_response>\n");
      w.content(m.content);
      w.markup("\n</tool_response>\n");
      if (i + 1 == messages.size() || messages[i + 1].role != "tool") w.markup("<|im_end|>\n");
    } else {
      w.markup("<|im_start|>" + m.role + "\n");
      w.content(m.content);
      w.markup("<|im_end|>\n");
    }
  }
  if (add_generation_prompt) w.markup("<|im_start|>assistant\n");
  return w.take();
}

}  // namespace splash::chat

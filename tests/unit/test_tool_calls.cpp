// Tool calls end to end inside the engine: the prompt format (chat/tool_prompt.h), the
// streaming parser of the model's calls (engine/tool_call_stream.h), and constrained decoding
// (engine/output_constraints.h) on the real vocabulary and model: every call the engine emits
// is valid JSON matching its tool's schema, whatever the model would rather write.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <map>
#include <random>

#include "chat/chat_format.h"
#include "chat/tool_prompt.h"
#include "common/error.h"
#include "engine/generator.h"
#include "model/sequence.h"
#include "engine/output_constraints.h"
#include "engine/tool_call_stream.h"
#include "formats/gguf.h"
#include "model/model.h"
#include "model_fixture.h"
#include "real_model_fixture.h"
#include "tokenizer/tokenizer.h"

namespace splash::engine {
namespace {

using nlohmann::json;

bool valid_utf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    const size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (n == 0 || i + n > s.size()) return false;
    for (size_t k = 1; k < n; ++k)
      if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return false;
    i += n;
  }
  return true;
}

// Feeds `text` in pieces of `step` bytes; returns every update.
std::vector<ToolCallUpdate> stream_in_pieces(const std::string& text, size_t step) {
  ToolCallStream stream;
  std::vector<ToolCallUpdate> updates;
  for (size_t i = 0; i < text.size(); i += step) stream.push(text.substr(i, step), updates);
  stream.finish(false, updates);
  return updates;
}

// The text after the first "<tool_call>": two function calls and a custom one.
const std::string kCalls =
    "\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Zürich\", \"days\": [1, 2]}}\n</tool_call>"
    "\n<tool_call>\n{\"name\": \"read\", \"arguments\": {}}\n</tool_call>"
    "\n<tool_call>\napply_patch\n*** Begin Patch\n*** Add File: a.txt\n+héllo }\n*** End Patch\n\n</tool_call>";

TEST(ToolCallStream, ParsesCallsWhateverTheChunking) {
  for (size_t step : {1, 2, 3, 5, 7, 64, 1000}) {
    const auto updates = stream_in_pieces(kCalls, step);
    std::vector<std::string> names, arguments(3);
    std::vector<bool> custom;
    std::vector<chat::ToolCall> finished;
    for (const auto& u : updates) {
      ASSERT_LT(u.index, 3);
      if (u.kind == ToolCallUpdate::Kind::Started) {
        names.push_back(u.call.name);
        custom.push_back(u.call.custom);
        EXPECT_TRUE(u.call.id.starts_with("call_"));
      } else if (u.kind == ToolCallUpdate::Kind::Arguments) {
        EXPECT_TRUE(valid_utf8(u.arguments)) << "step " << step << ": a delta splits a character";
        arguments[u.index] += u.arguments;
      } else {
        finished.push_back(u.call);
      }
    }
    ASSERT_EQ(names, (std::vector<std::string>{"get_weather", "read", "apply_patch"})) << "step " << step;
    EXPECT_EQ(custom, (std::vector<bool>{false, false, true}));
    ASSERT_EQ(finished.size(), 3u);
    EXPECT_EQ(finished[0].arguments, "{\"city\": \"Zürich\", \"days\": [1, 2]}");
    EXPECT_EQ(finished[1].arguments, "{}");
    EXPECT_EQ(finished[2].arguments, "*** Begin Patch\n*** Add File: a.txt\n+héllo }\n*** End Patch\n");
    for (size_t i = 0; i < 3; ++i) EXPECT_EQ(arguments[i], finished[i].arguments) << "deltas of call " << i;
  }
}

TEST(ToolCallStream, ACallCutShortIsNeverReportedFinished) {
  ToolCallStream stream;
  std::vector<ToolCallUpdate> updates;
  stream.push("\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>\n<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": \"unfin",
              updates);
  stream.finish(false, updates);
  ASSERT_FALSE(updates.empty());
  EXPECT_EQ(updates.back().kind, ToolCallUpdate::Kind::Arguments);  // streamed so far, never finished
  ASSERT_EQ(stream.calls().size(), 1u);
  EXPECT_EQ(stream.calls()[0].arguments, "{}");

  // Cut before the name is complete: nothing usable, no call.
  ToolCallStream early;
  updates.clear();
  early.push("\n{\"name\": \"ge", updates);
  early.finish(false, updates);
  EXPECT_TRUE(updates.empty());
  EXPECT_TRUE(early.calls().empty());
}

// The same in the XML syntax (chat/xml_tool_format.h): a text value with newlines, a
// near-miss of the closing markup and non-ASCII text; a JSON value; a parameter the schema
// does not know (JSON when it parses, else text); a call without parameters; a custom tool.
const std::vector<chat::ToolSpec> kXmlTools = {
    {chat::ToolSpec::Kind::Function, "write_file", "", json::parse(R"({"type": "object", "properties": {
        "path": {"type": "string"}, "lines": {"type": "integer"}, "mode": {"enum": ["w", "a"]}}})"), "", false},
    {chat::ToolSpec::Kind::Function, "now", "", json{{"type", "object"}}, "", false},
    {chat::ToolSpec::Kind::Custom, "apply_patch", "", json::object(), "", false}};
const std::string kXmlCalls =
    "\n<function=write_file>\n<parameter=path>\nsrc/ü.py\n</paramete\nx\n</parameter>\n<parameter=lines>\n 12 \n</parameter>\n"
    "<parameter=mode>\na\n</parameter>\n<parameter=extra>\n{\"k\": [1, 2]}\n</parameter>\n"
    "<parameter=note>\nnot json\n</parameter>\n</function>\n</tool_call>"
    "\n<tool_call>\n<function=now>\n</function>\n</tool_call>"
    "\n<tool_call>\n<function=apply_patch>\n<parameter=input>\n*** Begin Patch\n+\"héllo\"\n*** End Patch\n</parameter>\n"
    "</function>\n</tool_call>";

TEST(ToolCallStream, ParsesXmlCallsWhateverTheChunking) {
  for (size_t step : {1, 2, 3, 5, 7, 13, 64, 1000}) {
    ToolCallStream stream(chat::ToolCallSyntax::Xml, kXmlTools);
    std::vector<ToolCallUpdate> updates;
    for (size_t i = 0; i < kXmlCalls.size(); i += step) stream.push(kXmlCalls.substr(i, step), updates);
    stream.finish(false, updates);
    std::vector<std::string> names, arguments(3);
    std::vector<bool> custom;
    for (const auto& u : updates) {
      ASSERT_LT(u.index, 3);
      if (u.kind == ToolCallUpdate::Kind::Started) names.push_back(u.call.name), custom.push_back(u.call.custom);
      if (u.kind == ToolCallUpdate::Kind::Arguments) {
        EXPECT_TRUE(valid_utf8(u.arguments)) << "step " << step << ": a delta splits a character";
        arguments[u.index] += u.arguments;
      }
    }
    ASSERT_EQ(names, (std::vector<std::string>{"write_file", "now", "apply_patch"})) << "step " << step;
    EXPECT_EQ(custom, (std::vector<bool>{false, false, true}));
    ASSERT_EQ(stream.calls().size(), 3u);
    EXPECT_EQ(json::parse(stream.calls()[0].arguments),
              json::parse(R"({"path": "src/ü.py\n</paramete\nx", "lines": 12, "mode": "a", "extra": {"k": [1, 2]}, "note": "not json"})"))
        << stream.calls()[0].arguments;
    EXPECT_EQ(stream.calls()[1].arguments, "{}");
    EXPECT_EQ(stream.calls()[2].arguments, "*** Begin Patch\n+\"héllo\"\n*** End Patch");
    for (size_t i = 0; i < 3; ++i) EXPECT_EQ(arguments[i], stream.calls()[i].arguments) << "deltas of call " << i;
  }
}

TEST(ToolCallStream, AnXmlCallCutShortOrMalformedIsHandled) {
  ToolCallStream cut(chat::ToolCallSyntax::Xml, kXmlTools);
  std::vector<ToolCallUpdate> updates;
  cut.push("\n<function=write_file>\n<parameter=path>\nsrc/a", updates);
  cut.finish(false, updates);
  EXPECT_TRUE(cut.calls().empty()) << "a call cut short is never finished";
  // Neither a parameter nor the end: the call ends with what arrived (no grammar held it).
  ToolCallStream broken(chat::ToolCallSyntax::Xml, kXmlTools);
  broken.push("\n<function=write_file>\n<parameter=path>\nx\n</parameter>\nhello there", updates);
  ASSERT_EQ(broken.calls().size(), 1u);
  EXPECT_EQ(broken.calls()[0].arguments, R"({"path": "x"})");
  // A JSON call in an XML-syntax stream still parses (a model may slip).
  ToolCallStream json_call(chat::ToolCallSyntax::Xml, kXmlTools);
  json_call.push("\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>", updates);
  ASSERT_EQ(json_call.calls().size(), 1u);
  EXPECT_EQ(json_call.calls()[0].name, "now");
}

// Which XML parameters are text: through $refs, anyOf and type lists (an optional string is
// text, an optional integer JSON, a string-or-integer decided by the value).
TEST(XmlToolSyntax, ValueKindsFollowTheSchema) {
  const chat::ToolSpec tool{chat::ToolSpec::Kind::Function, "f", "", json::parse(R"({"type": "object",
      "properties": {
        "s": {"type": "string"}, "n": {"type": "integer"},
        "opt_s": {"anyOf": [{"type": "string"}, {"type": "null"}]},
        "opt_n": {"anyOf": [{"type": "integer"}, {"type": "null"}]},
        "listed": {"type": ["string", "null"]}, "mixed": {"anyOf": [{"type": "string"}, {"type": "integer"}]},
        "unit": {"$ref": "#/$defs/Unit"}, "addr": {"$ref": "#/$defs/Address"}, "anything": {},
        "colour": {"enum": ["red", "green"]}, "level": {"enum": [1, 2]}, "broken": {"$ref": "#/$defs/~9"}},
      "$defs": {"Unit": {"enum": ["c", "f"]}, "Address": {"type": "object", "properties": {"city": {"type": "string"}}}}})"),
                              "", true};
  using K = chat::XmlValueKind;
  const std::map<std::string, K> expected = {{"s", K::Text},       {"n", K::Json},        {"opt_s", K::Text},
                                             {"opt_n", K::Json},   {"listed", K::Text},   {"mixed", K::Either},
                                             {"unit", K::Text},    {"addr", K::Json},     {"anything", K::Either},
                                             {"colour", K::Text},  {"level", K::Json},    {"broken", K::Either},
                                             {"missing", K::Either}};
  for (const auto& [name, kind] : expected) EXPECT_EQ(chat::xml_value_kind(tool, name), kind) << name;
  // And the call grammar compiles, strict, with the property's $refs resolved from the root.
  ChatRequest request;
  request.tools = {tool};
  request.tool_choice = ToolChoice::Required;
  request.tool_syntax = chat::ToolCallSyntax::Xml;
  request.tools[0].parameters["properties"].erase("broken");
  EXPECT_NO_THROW(compile_output_constraints(request));
}

TEST(XmlToolSyntax, SchemasTheSyntaxCannotFollowAreRefusedWhenStrict) {
  ChatRequest request;
  request.tool_choice = ToolChoice::Required;
  request.tool_syntax = chat::ToolCallSyntax::Xml;
  auto tool = [](json parameters, bool strict) {
    return chat::ToolSpec{chat::ToolSpec::Kind::Function, "f", "", std::move(parameters), "", strict};
  };
  // Parameters that are not plain properties: any names when not strict, refused when strict.
  request.tools = {tool(json::parse(R"({"$ref": "#/$defs/A", "$defs": {"A": {"type": "object"}}})"), false)};
  EXPECT_NO_THROW(compile_output_constraints(request));
  request.tools = {tool(json::parse(R"({"$ref": "#/$defs/A", "$defs": {"A": {"type": "object"}}})"), true)};
  EXPECT_THROW(compile_output_constraints(request), Error);
  // Names and values the layout cannot hold.
  request.tools = {tool(json::parse(R"({"type": "object", "properties": {"a>\nb": {"type": "string"}}})"), false)};
  EXPECT_THROW(compile_output_constraints(request), Error);
  request.tools = {tool(json::parse(R"({"type": "object", "properties": {"a": {"enum": ["x\n</parameter>"]}}})"), false)};
  EXPECT_THROW(compile_output_constraints(request), Error);
  // A strict tool is shown as the template shows one (its function's `strict` key).
  const auto block = chat::xml_tools_system_block(std::vector<chat::ToolSpec>{tool(json{{"type", "object"}}, true)});
  EXPECT_NE(block.find("</parameters>\n<strict>True</strict>\n</function>"), std::string::npos) << block;
}

TEST(ToolPrompt, ToolsJoinTheSystemPromptAndCallsRoundTrip) {
  chat::ToolSpec weather{chat::ToolSpec::Kind::Function, "get_weather", "Weather for a city",
                         json{{"type", "object"}, {"properties", {{"city", {{"type", "string"}}}}}}, "", false};
  chat::ToolSpec patch{chat::ToolSpec::Kind::Custom, "apply_patch", "Edit files", json::object(), "start: \"x\"", false};
  std::vector<chat::ToolSpec> tools{weather, patch};
  chat::ChatMessage assistant{"assistant", "Checking."};
  assistant.tool_calls = {{"call_1", "get_weather", "{\"city\":\"Paris\"}", false}, {"call_2", "apply_patch", "x", true}};
  chat::ChatMessage result1{"tool", "sunny"}, result2{"tool", "ok"};
  result1.tool_call_id = "call_1";
  result2.tool_call_id = "call_2";
  std::vector<chat::ChatMessage> messages{{"system", "Be brief."}, {"user", "Weather?"}, assistant, result1, result2};
  const auto lowered = chat::lower_tool_turns(messages, tools, "default prompt");
  ASSERT_EQ(lowered.size(), 4u);
  EXPECT_EQ(lowered[0].role, "system");
  EXPECT_TRUE(lowered[0].content.starts_with("Be brief.\n\n# Tools"));
  EXPECT_NE(lowered[0].content.find("{\"type\": \"function\", \"function\": {\"name\": \"get_weather\""), std::string::npos);
  EXPECT_NE(lowered[0].content.find("\"syntax\": \"lark\""), std::string::npos);
  EXPECT_EQ(lowered[2].content,
            "Checking.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n"
            "<tool_call>\napply_patch\nx\n</tool_call>");
  // Both results answer one assistant turn: one user turn.
  EXPECT_EQ(lowered[3].role, "user");
  EXPECT_EQ(lowered[3].content, "<tool_response>\nsunny\n</tool_response>\n<tool_response>\nok\n</tool_response>");

  // What the model is shown is what ToolCallStream parses back.
  const std::string rendered = chat::render_tool_call(assistant.tool_calls[0]);
  ToolCallStream stream;
  std::vector<ToolCallUpdate> updates;
  stream.push(std::string_view(rendered).substr(chat::kToolCallOpen.size()), updates);
  ASSERT_EQ(stream.calls().size(), 1u);
  EXPECT_EQ(stream.calls()[0].name, "get_weather");
  EXPECT_EQ(json::parse(stream.calls()[0].arguments), json::parse(assistant.tool_calls[0].arguments));

  // Without a system message, the template's default prompt carries the tools.
  const auto defaulted = chat::lower_tool_turns(std::vector<chat::ChatMessage>{{"user", "hi"}}, tools, "default prompt");
  EXPECT_TRUE(defaulted[0].content.starts_with("default prompt\n\n# Tools"));
}

TEST(BareJsonCall, TheOpeningIsRecognisedWithFencesAndWhitespace) {
  using Match = BareCallOpening::Match;
  // Doubled braces too: Qwen2.5-Coder-1.5B writes its calls as its template's example shows them.
  for (const char* yes : {"{\"name\": \"", "```json\n{\n  \"name\": \"", "  {\"name\":\"", "```\n{ \"name\" : \"",
                          "{{\"name\": \"", "{{ \"name\": \""}) {
    const auto m = match_bare_call_opening(yes);
    EXPECT_EQ(m.match, Match::Yes) << yes;
    EXPECT_EQ(m.end, std::string_view(yes).size()) << yes;
  }
  for (const char* maybe : {"", " ", "`", "```js", "```json\n", "{", "{\n  \"na", "{\"name\"", "{\"name\": ", "{{", "{{\"na"})
    EXPECT_EQ(match_bare_call_opening(maybe).match, Match::Maybe) << maybe;
  for (const char* no : {"Sure", "{\"nam3", "``x", "{\"arguments\"", "[", "```json\nHello", "{\"name\": 5", "{{{\"name\"",
                         "{ {\"name\""})
    EXPECT_EQ(match_bare_call_opening(no).match, Match::No) << no;
  EXPECT_EQ(match_bare_call_opening(std::string(40, ' ')).match, Match::No);  // bounded whitespace
}

TEST(BareJsonCall, StreamParsesTheCallAndStripsItsClosing) {
  for (size_t step : {1, 3, 100}) {
    ToolCallStream stream;
    stream.begin_bare_call();
    std::vector<ToolCallUpdate> updates;
    const std::string rest = "Bash\",\n  \"arguments\": {\n    \"command\": \"ls }\"\n  }\n}\n```";
    for (size_t i = 0; i < rest.size(); i += step) stream.push(rest.substr(i, step), updates);
    stream.finish(true, updates);
    ASSERT_EQ(stream.calls().size(), 1u) << step;
    EXPECT_EQ(stream.calls()[0].name, "Bash");
    EXPECT_EQ(json::parse(stream.calls()[0].arguments), (json{{"command", "ls }"}}));
    std::string deltas;
    for (const auto& u : updates)
      if (u.kind == ToolCallUpdate::Kind::Arguments) deltas += u.arguments;
    EXPECT_EQ(deltas, stream.calls()[0].arguments);
  }
  ToolCallStream cut;  // not complete: no call
  cut.begin_bare_call();
  std::vector<ToolCallUpdate> updates;
  cut.push("Bash\", \"arguments\": {\"command\": \"l", updates);
  cut.finish(false, updates);
  EXPECT_TRUE(cut.calls().empty());
}

TEST(ToolPrompt, NamesThatWouldBreakTheFormatAreRefused) {
  EXPECT_TRUE(chat::is_valid_tool_name("mcp__server__read_file"));
  EXPECT_TRUE(chat::is_valid_tool_name("a.b-c:d"));
  for (const char* bad : {"", "has space", "quo\"te", "new\nline", "<tool_call>", "slash/name"})
    EXPECT_FALSE(chat::is_valid_tool_name(bad)) << bad;
  EXPECT_FALSE(chat::is_valid_tool_name(std::string(129, 'a')));
}

// --- constrained decoding on the real vocabulary and model ----------------------------------

const json kWeatherSchema = {{"type", "object"},
                             {"properties",
                              {{"city", {{"type", "string"}, {"maxLength", 20}}},
                               {"unit", {{"enum", {"celsius", "fahrenheit"}}}},
                               {"days", {{"type", "integer"}, {"minimum", 1}, {"maximum", 7}}}}},
                             {"required", {"city", "unit", "days"}},
                             {"additionalProperties", false}};

void expect_valid_weather(const json& args) {
  ASSERT_TRUE(args.is_object()) << args;
  ASSERT_EQ(args.size(), 3u) << args;
  ASSERT_TRUE(args["city"].is_string());
  size_t characters = 0;  // maxLength counts characters, not bytes
  for (unsigned char c : args["city"].get<std::string>()) characters += (c & 0xC0) != 0x80;
  EXPECT_LE(characters, 20u) << args;
  EXPECT_TRUE(args["unit"] == "celsius" || args["unit"] == "fahrenheit") << args;
  ASSERT_TRUE(args["days"].is_number_integer()) << args;
  EXPECT_GE(args["days"].get<int>(), 1);
  EXPECT_LE(args["days"].get<int>(), 7);
}

class ConstrainedOnModel : public splash::testing::RealModelTest {
 protected:
  void SetUp() override {
    RealModelTest::SetUp();
    if (IsSkipped()) return;
    trie_ = build_token_trie(*tokenizer_);
  }

  ChatRequest weather_request(ToolChoice choice) const {
    ChatRequest request;
    request.messages = {{"user", "What's the weather in Paris for the next 3 days?"}};
    request.tools = {{chat::ToolSpec::Kind::Function, "get_weather", "Weather forecast", kWeatherSchema, "", true},
                     {chat::ToolSpec::Kind::Function, "get_time", "The time", json{{"type", "object"}}, "", false}};
    request.tool_choice = choice;
    return request;
  }

  // A random walk through the mask: each step draws a token the mask allows, until the
  // shaper finishes, the end of generation is drawn or 400 steps pass; then finish(). With
  // prefer_short, a one-byte token is often taken instead (so walks also reach closing quotes
  // and brackets) and allows() is checked against the mask on random tokens.
  void walk(ReplyShaper& shaper, std::mt19937_64& rng, bool prefer_short) const {
    std::vector<ToolCallUpdate> updates;
    std::vector<uint8_t> allowed;
    int steps = 0;
    while (!shaper.finished() && steps++ < 400) {
      shaper.fill_mask(allowed);
      std::vector<int32_t> choices;
      for (size_t id = 0; id < allowed.size(); ++id)
        if (allowed[id]) choices.push_back(static_cast<int32_t>(id));
      ASSERT_FALSE(choices.empty()) << "the grammar left nothing to choose at step " << steps;
      int32_t token = choices[rng() % choices.size()];
      if (prefer_short) {
        if (rng() % 2) {
          for (int32_t c : choices)
            if (tokenizer_->token_bytes(c).size() == 1 && rng() % 3 == 0) token = c;
        }
        for (int probe = 0; probe < 5; ++probe) {  // allows() agrees with the mask
          const auto id = static_cast<int32_t>(rng() % allowed.size());
          ASSERT_EQ(shaper.allows(id), allowed[id] != 0) << "token " << id;
        }
      }
      if (tokenizer_->is_end_of_generation(token)) break;
      shaper.accept(token, updates);
    }
    shaper.finish(updates);
  }

  std::shared_ptr<const grammar::TokenTrie> trie_;
};

// Random walks through the mask (no model): whatever allowed tokens are chosen, the calls
// parse and match the schema. Also checks that allows() agrees with the mask.
TEST_F(ConstrainedOnModel, EveryWalkThroughTheMaskGivesValidCalls) {
  ChatRequest request = weather_request(ToolChoice::Named);
  request.tool_choice_name = "get_weather";
  request.parallel_tool_calls = false;
  const auto constraints = compile_output_constraints(request);
  ASSERT_TRUE(constraints);
  for (uint64_t seed = 1; seed <= 12; ++seed) {
    std::mt19937_64 rng(seed);
    ReplyShaper shaper(constraints, *tokenizer_, trie_);
    ASSERT_NO_FATAL_FAILURE(walk(shaper, rng, /*prefer_short=*/true));
    ASSERT_TRUE(shaper.finished()) << "seed " << seed << ": the call never closed in 400 tokens";
    ASSERT_EQ(shaper.calls().size(), 1u) << "seed " << seed;
    EXPECT_EQ(shaper.calls()[0].name, "get_weather");
    const json args = json::parse(shaper.calls()[0].arguments, nullptr, false);
    ASSERT_FALSE(args.is_discarded()) << shaper.calls()[0].arguments;
    expect_valid_weather(args);
  }
}

TEST_F(ConstrainedOnModel, NoneForbidsOpeningACallAndAutoChecksWhatFollowsTheMarker) {
  const auto open_marker = tokenizer_->encode("<tool_call>", false);
  ASSERT_GT(open_marker.size(), 1u);
  {
    auto constraints = compile_output_constraints(weather_request(ToolChoice::None));
    ReplyShaper shaper(constraints, *tokenizer_, trie_);
    std::vector<ToolCallUpdate> updates;
    for (size_t i = 0; i + 1 < open_marker.size(); ++i) {
      ASSERT_TRUE(shaper.allows(open_marker[i]));
      shaper.accept(open_marker[i], updates);
    }
    EXPECT_FALSE(shaper.allows(open_marker.back())) << "tool_choice none must never open a call";
  }
  {
    auto constraints = compile_output_constraints(weather_request(ToolChoice::Auto));
    ReplyShaper shaper(constraints, *tokenizer_, trie_);
    std::vector<ToolCallUpdate> updates;
    for (int32_t t : tokenizer_->encode("Sure. ", false)) shaper.accept(t, updates);
    for (size_t i = 0; i + 1 < open_marker.size(); ++i) shaper.accept(open_marker[i], updates);
    EXPECT_TRUE(shaper.allows(open_marker.back()));
    EXPECT_TRUE(shaper.in_text());
    shaper.accept(open_marker.back(), updates);
    EXPECT_FALSE(shaper.in_text());
    // Inside the call only the format's bytes are allowed: no end of turn, no free text.
    EXPECT_FALSE(shaper.allows(tokenizer_->eos()));
    EXPECT_FALSE(shaper.allows(tokenizer_->encode(" hello", false)[0]));
    EXPECT_TRUE(shaper.allows(tokenizer_->encode("\n", false)[0]));
  }
}

// What Qwen2.5-Coder-0.5B and SmolLM2 write when left to choose: a fenced JSON object naming
// the tool. It becomes a constrained call, and the fence never reaches the text.
TEST_F(ConstrainedOnModel, AReplyOpeningAsABareJsonCallBecomesACall) {
  auto constraints = compile_output_constraints(weather_request(ToolChoice::Auto));
  ASSERT_TRUE(constraints->bare_call);
  ReplyShaper shaper(constraints, *tokenizer_, trie_);
  std::vector<ToolCallUpdate> updates;
  const auto tokens = tokenizer_->encode(
      "```json\n{\n  \"name\": \"get_weather\",\n  \"arguments\": {\"city\": \"Paris\", \"days\": 3, "
      "\"unit\": \"celsius\"}\n}\n```", false);
  for (int32_t t : tokens) {
    ASSERT_TRUE(shaper.allows(t)) << "token " << tokenizer_->token_bytes(t);
    shaper.accept(t, updates);
  }
  EXPECT_FALSE(shaper.in_text());
  EXPECT_TRUE(shaper.bare_call());
  EXPECT_TRUE(shaper.allows(tokenizer_->eos()));
  shaper.finish(updates);
  ASSERT_EQ(shaper.calls().size(), 1u);
  EXPECT_EQ(shaper.calls()[0].name, "get_weather");
  expect_valid_weather(json::parse(shaper.calls()[0].arguments));

  // A name that is not a tool cannot be written; prose is just text.
  ReplyShaper other(constraints, *tokenizer_, trie_);
  for (int32_t t : tokenizer_->encode("{\"name\": \"", false)) other.accept(t, updates);
  EXPECT_FALSE(other.in_text());
  EXPECT_FALSE(other.allows(tokenizer_->encode("delete", false)[0]));
  ReplyShaper prose(constraints, *tokenizer_, trie_);
  for (int32_t t : tokenizer_->encode("Sure, here", false)) prose.accept(t, updates);
  EXPECT_TRUE(prose.in_text());
  EXPECT_FALSE(prose.undecided());
}

// The XML syntax: random walks through the mask give calls whose parameters come in the
// schema's order, required ones present, each a text value or JSON as its schema says.
TEST_F(ConstrainedOnModel, EveryWalkThroughTheXmlMaskGivesValidCalls) {
  ChatRequest request;
  request.messages = {{"user", "Weather?"}};
  request.tools = {{chat::ToolSpec::Kind::Function, "get_weather", "Weather forecast",
                    json{{"type", "object"},
                         {"properties",
                          {{"city", {{"enum", {"Paris", "Zürich", "New\nYork"}}}},
                           {"days", {{"type", "integer"}, {"minimum", 1}, {"maximum", 7}}},
                           {"unit", {{"type", "string"}, {"enum", {"celsius", "fahrenheit"}}}}}},
                         {"required", {"city", "days"}}},
                    "", true}};
  request.tool_choice = ToolChoice::Required;
  request.parallel_tool_calls = false;
  request.tool_syntax = chat::ToolCallSyntax::Xml;
  const auto constraints = compile_output_constraints(request);
  ASSERT_TRUE(constraints && !constraints->bare_call);
  for (uint64_t seed = 1; seed <= 12; ++seed) {
    std::mt19937_64 rng(seed);
    ReplyShaper shaper(constraints, *tokenizer_, trie_);
    ASSERT_NO_FATAL_FAILURE(walk(shaper, rng, /*prefer_short=*/false));
    ASSERT_TRUE(shaper.finished()) << "seed " << seed;
    ASSERT_EQ(shaper.calls().size(), 1u) << "seed " << seed;
    const json args = json::parse(shaper.calls()[0].arguments, nullptr, false);
    ASSERT_TRUE(args.is_object()) << shaper.calls()[0].arguments;
    EXPECT_TRUE(args["city"] == "Paris" || args["city"] == "Zürich" || args["city"] == "New\nYork") << args;
    ASSERT_TRUE(args["days"].is_number_integer()) << args;
    EXPECT_GE(args["days"].get<int>(), 1);
    EXPECT_LE(args["days"].get<int>(), 7);
    if (args.contains("unit")) {
      EXPECT_TRUE(args["unit"] == "celsius" || args["unit"] == "fahrenheit") << args;
    }
    EXPECT_LE(args.size(), 3u);
  }
  // The text of a free string value can be anything but the closing markup.
  request.tools[0].parameters["properties"]["city"] = {{"type", "string"}};
  const auto free_text = compile_output_constraints(request);
  ReplyShaper shaper(free_text, *tokenizer_, trie_);
  std::vector<ToolCallUpdate> updates;
  for (int32_t t : tokenizer_->encode("<tool_call>\n<function=get_weather>\n<parameter=city>\nLos </parameter Angeles\n", false)) {
    ASSERT_TRUE(shaper.allows(t)) << tokenizer_->token_bytes(t);
    shaper.accept(t, updates);
  }
  for (int32_t t : tokenizer_->encode("</parameter>\n<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>", false)) {
    ASSERT_TRUE(shaper.allows(t)) << tokenizer_->token_bytes(t);
    shaper.accept(t, updates);
  }
  shaper.finish(updates);
  ASSERT_EQ(shaper.calls().size(), 1u);
  EXPECT_EQ(json::parse(shaper.calls()[0].arguments), json::parse(R"({"city": "Los </parameter Angeles", "days": 3})"));
}

// tool_choice auto in the XML syntax: free text, then "<tool_call>" opens a call whose bytes
// only the XML layout allows; a parameter without a type takes text or JSON.
TEST_F(ConstrainedOnModel, AutoOpensAnXmlCallAfterText) {
  ChatRequest request;
  request.messages = {{"user", "Read it"}};
  request.tools = {{chat::ToolSpec::Kind::Function, "read_file", "",
                    json{{"type", "object"}, {"properties", {{"path", json::object()}, {"limit", json::object()}}}}, "", false}};
  request.tool_syntax = chat::ToolCallSyntax::Xml;
  const auto constraints = compile_output_constraints(request);
  ASSERT_FALSE(constraints->bare_call) << "a bare JSON call is the JSON syntax's slip, not this one's";
  ReplyShaper shaper(constraints, *tokenizer_, trie_);
  std::vector<ToolCallUpdate> updates;
  for (int32_t t : tokenizer_->encode("Sure.\n\n<tool_call>", false)) {
    ASSERT_TRUE(shaper.allows(t));
    shaper.accept(t, updates);
  }
  EXPECT_FALSE(shaper.in_text());
  EXPECT_FALSE(shaper.allows(tokenizer_->encode("\n{\"name", false).back())) << "the JSON layout is not this syntax";
  // (The parameters in the schema's order, the order the tools block lists them in.)
  for (int32_t t : tokenizer_->encode("\n<function=read_file>\n<parameter=limit>\n20\n</parameter>\n"
                                      "<parameter=path>\nsrc/main.py\n</parameter>\n</function>\n</tool_call>", false)) {
    ASSERT_TRUE(shaper.allows(t)) << tokenizer_->token_bytes(t);
    shaper.accept(t, updates);
  }
  shaper.finish(updates);
  ASSERT_EQ(shaper.calls().size(), 1u);
  EXPECT_EQ(json::parse(shaper.calls()[0].arguments), json::parse(R"({"path": "src/main.py", "limit": 20})"));
}

TEST_F(ConstrainedOnModel, UnsupportedSchemasAreErrorsOnlyWhenStrict) {
  ChatRequest request = weather_request(ToolChoice::Auto);
  request.tools[0].parameters = {{"type", "object"}, {"if", {{"required", {"a"}}}}};
  request.tools[0].strict = true;
  EXPECT_THROW(compile_output_constraints(request), splash::Error);
  request.tools[0].strict = false;  // degrades to "any JSON object"
  EXPECT_NO_THROW(compile_output_constraints(request));
  request.tool_choice = ToolChoice::Named;
  request.tool_choice_name = "nope";
  EXPECT_THROW(compile_output_constraints(request), splash::Error);
}

TEST_F(ConstrainedOnModel, TheModelsCallsAndStructuredRepliesAreValid) {
  auto loaded = model::load_model(*file_, {.max_context = 1024, .threads = 0});
  model::Sequence model(*loaded);
  // A required call, greedy and sampled.
  for (float temperature : {0.0f, 1.0f}) {
    ChatRequest chat = weather_request(ToolChoice::Required);
    GenerationRequest request;
    request.prompt = chat::encode_prompt(*chat_, *tokenizer_, chat.messages, chat.tools);
    request.sampling.temperature = temperature;
    request.sampling.seed = 7;
    request.max_tokens = 120;
    request.stop = chat_->stop_texts();
    request.constraints = compile_output_constraints(chat);
    request.token_trie = trie_;
    std::string streamed;
    const auto result = generate(model, *tokenizer_, request, [&](const GenerationPiece& piece) {
      if (piece.tool && piece.tool->kind == ToolCallUpdate::Kind::Arguments && piece.tool->index == 0)
        streamed += piece.tool->arguments;
      return true;
    });
    ASSERT_FALSE(result.tool_calls.empty()) << "temperature " << temperature;
    EXPECT_EQ(streamed, result.tool_calls[0].arguments);
    if (result.finish == FinishReason::Length) continue;  // a later call may be cut short
    EXPECT_EQ(result.finish, FinishReason::ToolCalls);
    for (const auto& call : result.tool_calls) {
      const json args = json::parse(call.arguments, nullptr, false);
      ASSERT_FALSE(args.is_discarded()) << call.arguments;
      if (call.name == "get_weather") expect_valid_weather(args);
      else EXPECT_EQ(call.name, "get_time");
    }
  }
  // A JSON Schema reply.
  ChatRequest chat;
  chat.messages = {{"user", "Give the weather in Paris as JSON."}};
  chat.output_format = {OutputFormat::Kind::JsonSchema, kWeatherSchema, {}};
  GenerationRequest request;
  request.prompt = chat::encode_prompt(*chat_, *tokenizer_, chat.messages);
  request.sampling.temperature = 0.0f;
  request.max_tokens = 200;
  request.stop = chat_->stop_texts();
  request.constraints = compile_output_constraints(chat);
  request.token_trie = trie_;
  const auto result = generate(model, *tokenizer_, request, nullptr);
  ASSERT_EQ(result.finish, FinishReason::Stop) << result.text;
  const json reply = json::parse(result.text, nullptr, false);
  ASSERT_FALSE(reply.is_discarded()) << result.text;
  expect_valid_weather(reply);
}

}  // namespace
}  // namespace splash::engine

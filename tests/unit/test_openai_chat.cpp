// OpenAI Chat Completions translation (src/api/openai_chat.h): every accepted field lands in
// the internal request, every bad one is a 400 naming it, and rendering has OpenAI's shape.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "api/openai_chat.h"

namespace splash::api {
namespace {

using nlohmann::json;
const ServedModel kServed{"smol", 49152};

ChatCompletionRequest ok(const json& body) {
  auto parsed = parse_chat_completion_request(body.dump(), kServed);
  if (auto* error = std::get_if<ApiError>(&parsed)) ADD_FAILURE() << error->message;
  return std::get_if<ChatCompletionRequest>(&parsed) ? std::get<ChatCompletionRequest>(parsed) : ChatCompletionRequest{};
}

ApiError bad(std::string_view body) {
  auto parsed = parse_chat_completion_request(body, kServed);
  EXPECT_TRUE(std::holds_alternative<ApiError>(parsed)) << body;
  return std::holds_alternative<ApiError>(parsed) ? std::get<ApiError>(parsed) : ApiError{};
}

const json kHello = json::array({{{"role", "user"}, {"content", "hi"}}});

TEST(OpenAiChat, MinimalRequest) {
  auto r = ok({{"messages", kHello}});
  ASSERT_EQ(r.chat.messages.size(), 1u);
  EXPECT_EQ(r.chat.messages[0].role, "user");
  EXPECT_EQ(r.chat.messages[0].content, "hi");
  EXPECT_FALSE(r.stream);
  EXPECT_EQ(r.chat.top_logprobs, -1);
}

TEST(OpenAiChat, AllSupportedFields) {
  auto r = ok({{"messages", json::array({{{"role", "developer"}, {"content", "be brief"}},
                                         {{"role", "user"}, {"content", json::array({{{"type", "text"}, {"text", "a"}},
                                                                                      {{"type", "text"}, {"text", "b"}}})}},
                                         {{"role", "assistant"}, {"content", nullptr}}})},
               {"model", "smol"}, {"stream", true}, {"stream_options", {{"include_usage", true}}},
               {"max_completion_tokens", 7}, {"temperature", 0.5}, {"top_p", 0.9}, {"seed", 42},
               {"stop", json::array({"x", "y"})}, {"presence_penalty", 0.5}, {"frequency_penalty", -0.5},
               {"logit_bias", {{"15", -100}}}, {"logprobs", true}, {"top_logprobs", 3}, {"n", 1},
               {"user", "u"}, {"metadata", {{"a", "b"}}}, {"response_format", {{"type", "text"}}}});
  EXPECT_EQ(r.chat.messages[0].role, "system");
  EXPECT_EQ(r.chat.messages[1].content, "ab");
  EXPECT_EQ(r.chat.messages[2].content, "");
  EXPECT_TRUE(r.stream);
  EXPECT_TRUE(r.include_usage);
  EXPECT_EQ(r.chat.max_tokens, 7);
  EXPECT_FLOAT_EQ(r.chat.sampling.temperature, 0.5f);
  EXPECT_FLOAT_EQ(r.chat.sampling.top_p, 0.9f);
  EXPECT_EQ(r.chat.sampling.seed, 42u);
  EXPECT_EQ(r.chat.stop, (std::vector<std::string>{"x", "y"}));
  EXPECT_FLOAT_EQ(r.chat.sampling.logit_bias.at(15), -100.0f);
  EXPECT_TRUE(r.logprobs);
  EXPECT_EQ(r.chat.top_logprobs, 3);
}

TEST(OpenAiChat, NullMeansDefault) {
  auto r = ok({{"messages", kHello}, {"temperature", nullptr}, {"max_tokens", nullptr}, {"stop", nullptr}});
  EXPECT_EQ(r.chat.max_tokens, 0);
}

TEST(OpenAiChat, RejectsWithTheParameterNamed) {
  const std::pair<json, std::string> cases[] = {
      {{{"messages", kHello}, {"temperature", 5}}, "temperature"},
      {{{"messages", kHello}, {"temperature", "hot"}}, "temperature"},
      {{{"messages", kHello}, {"top_p", 0}}, "top_p"},
      {{{"messages", kHello}, {"max_tokens", 0}}, "max_tokens"},
      {{{"messages", kHello}, {"max_tokens", -1}}, "max_tokens"},
      {{{"messages", kHello}, {"max_tokens", 1.5}}, "max_tokens"},
      {{{"messages", kHello}, {"top_logprobs", 21}, {"logprobs", true}}, "top_logprobs"},
      {{{"messages", kHello}, {"top_logprobs", 2}}, "top_logprobs"},
      {{{"messages", kHello}, {"n", 2}}, "n"},
      {{{"messages", kHello}, {"tools", "not an array"}}, "tools"},
      {{{"messages", kHello}, {"response_format", {{"type", "yaml"}}}}, "response_format.type"},
      {{{"messages", kHello}, {"frobnicate", 1}}, "frobnicate"},
      {{{"messages", kHello}, {"logit_bias", {{"abc", 1}}}}, "logit_bias"},
      {{{"messages", kHello}, {"logit_bias", {{"49152", 1}}}}, "logit_bias"},
      {{{"messages", kHello}, {"logit_bias", {{"5", 101}}}}, "logit_bias"},
      {{{"messages", kHello}, {"stop", 3}}, "stop"},
      {{{"messages", kHello}, {"stream_options", {{"include_usage", true}}}}, "stream_options"},
      {{{"messages", json::array()}}, "messages"},
      {{{"messages", "hi"}}, "messages"},
      {{{"messages", json::array({{{"role", "wizard"}, {"content", "x"}}})}}, "messages[0].role"},
      {{{"messages", json::array({{{"role", "user"}}})}}, "messages[0].content"},
      {{{"messages", json::array({{{"role", "user"}, {"content", 5}}})}}, "messages[0].content"},
      {{{"messages", json::array({{{"role", "user"}, {"content", json::array({{{"type", "image_url"}}})}}})}},
       "messages[0].content[0].image_url.url"},
      {{{"messages", json::array({{{"role", "user"}, {"content", json::array({{{"type", "image_url"},
                                                                               {"image_url", {{"url", "https://x/y.png"}}}}})}}})}},
       "messages[0].content[0].image_url.url"},  // remote images are not fetched
      {{{"messages", json::array({{{"role", "user"}, {"content", json::array({{{"type", "image_url"},
                                                                               {"image_url", {{"url", "data:image/png;base64,!!"}}}}})}}})}},
       "messages[0].content[0].image_url.url"},  // not base64
      {{{"temperature", 1}}, "messages"},
  };
  for (const auto& [body, param] : cases) {
    const ApiError error = bad(body.dump());
    EXPECT_EQ(error.status, 400) << body.dump();
    EXPECT_EQ(error.param, param) << body.dump() << " -> " << error.message;
    EXPECT_FALSE(error.message.empty());
  }
}

TEST(OpenAiChat, UnknownModelIs404) {
  const ApiError error = bad(json{{"messages", kHello}, {"model", "gpt-4"}}.dump());
  EXPECT_EQ(error.status, 404);
  EXPECT_EQ(error.code, "model_not_found");
}

TEST(OpenAiChat, MalformedBodies) {
  for (std::string_view body : {"", "{", "[]", "null", "42", "{\"messages\": [}", "\xff\xfe", "{\"messages\":\"\xc3\"}"}) {
    const ApiError error = bad(body);
    EXPECT_EQ(error.status, 400) << body;
  }
  // Deep nesting must not overflow the stack.
  std::string deep(100000, '[');
  EXPECT_EQ(bad(deep).status, 400);
}

TEST(OpenAiChat, RendersStreamChunksAndCompletion) {
  ChatCompletionRenderer renderer("smol", /*include_usage=*/true, /*logprobs=*/true);
  std::string sse = renderer.stream_event(engine::ChatEvent::started(5));
  engine::ChatEvent text;
  text.text = "Hi";
  text.logprobs.push_back({7, "Hi", -0.25f, {{"Hi", -0.25f}, {"Hey", -2.0f}}});
  sse += renderer.stream_event(text);
  sse += renderer.stream_event(engine::ChatEvent::finished(engine::FinishReason::Length, 5, 1));
  std::vector<json> chunks;
  size_t pos = 0;
  while ((pos = sse.find("data: ", pos)) != std::string::npos) {
    const size_t end = sse.find("\n\n", pos);
    chunks.push_back(json::parse(sse.substr(pos + 6, end - pos - 6)));
    pos = end;
  }
  ASSERT_EQ(chunks.size(), 4u);
  EXPECT_EQ(chunks[0]["choices"][0]["delta"]["role"], "assistant");
  EXPECT_EQ(chunks[1]["choices"][0]["delta"]["content"], "Hi");
  EXPECT_EQ(chunks[1]["choices"][0]["logprobs"]["content"][0]["top_logprobs"][1]["token"], "Hey");
  EXPECT_EQ(chunks[2]["choices"][0]["finish_reason"], "length");
  EXPECT_TRUE(chunks[3]["choices"].empty());
  EXPECT_EQ(chunks[3]["usage"]["total_tokens"], 6);
  for (const auto& chunk : chunks) {
    EXPECT_EQ(chunk["object"], "chat.completion.chunk");
    EXPECT_EQ(chunk["id"], chunks[0]["id"]);
  }

  ChatCompletionRenderer whole("smol", false, false);
  whole.collect(engine::ChatEvent::started(5));
  whole.collect(text);
  whole.collect(engine::ChatEvent::finished(engine::FinishReason::Stop, 5, 1));
  const json completion = whole.completion();
  EXPECT_EQ(completion["object"], "chat.completion");
  EXPECT_EQ(completion["choices"][0]["message"]["content"], "Hi");
  EXPECT_EQ(completion["choices"][0]["finish_reason"], "stop");
  EXPECT_TRUE(completion["choices"][0]["logprobs"].is_null());
  EXPECT_EQ(completion["usage"]["prompt_tokens"], 5);
}

TEST(OpenAiChat, InvalidUtf8InTokensIsReplacedNotThrown) {
  ChatCompletionRenderer renderer("smol", false, true);
  engine::ChatEvent text;
  text.logprobs.push_back({7, "\xe2\x82", -0.1f, {}});  // half of a 3-byte character
  const std::string sse = renderer.stream_event(text);
  EXPECT_NE(sse.find("bytes"), std::string::npos);
}

}  // namespace
}  // namespace splash::api

namespace splash::api {
namespace {

// Image parts become the message's image files, each recording where it sat in the text.
TEST(OpenAiChat, ImagePartsKeepTheirPlaceInTheText) {
  const json body = {{"model", "m"},
                     {"messages", json::array({{{"role", "user"},
                                                {"content", json::array({
                                                                {{"type", "text"}, {"text", "What"}},
                                                                {{"type", "image_url"}, {"image_url", {{"url", "data:image/png;base64,iVBORw0KGgo="}}}},
                                                                {{"type", "text"}, {"text", " is this?"}},
                                                                {{"type", "image_url"}, {"image_url", "data:image/jpeg;base64,/9j/"}},
                                                            })}}})}};
  auto parsed = parse_chat_completion_request(body.dump(), {"m", 49152});
  ASSERT_TRUE(std::holds_alternative<ChatCompletionRequest>(parsed)) << std::get<ApiError>(parsed).message;
  const auto& message = std::get<ChatCompletionRequest>(parsed).chat.messages.at(0);
  EXPECT_EQ(message.content, "What is this?");
  ASSERT_EQ(message.images.size(), 2u);
  EXPECT_EQ(message.images[0].file, std::string("\x89PNG\r\n\x1a\n", 8));
  EXPECT_EQ(message.images[0].offset, 4u);
  EXPECT_EQ(message.images[1].offset, 13u);
}

}  // namespace
}  // namespace splash::api

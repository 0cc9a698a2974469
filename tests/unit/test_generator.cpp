// The generation loop on the real model: reusing the cached prefix of the previous request
// (next turn, exact replay) gives the same tokens as computing everything afresh.
#include <gtest/gtest.h>

#include "chat/chat_format.h"
#include "engine/generator.h"
#include "formats/gguf.h"
#include "model/model.h"
#include "model_fixture.h"
#include "tokenizer/tokenizer.h"

namespace splash::engine {
namespace {

TEST(ReusablePrefix, NeverTheWholePrompt) {
  const std::vector<int32_t> cached{1, 2, 3, 4}, same{1, 2, 3, 4}, longer{1, 2, 3, 4, 5}, other{1, 9, 3};
  EXPECT_EQ(reusable_prefix(cached, same), 3u);  // the last prompt token is recomputed
  EXPECT_EQ(reusable_prefix(cached, longer), 4u);
  EXPECT_EQ(reusable_prefix(cached, other), 1u);
  EXPECT_EQ(reusable_prefix({}, longer), 0u);
  EXPECT_EQ(reusable_prefix(cached, {}), 0u);
}

class GeneratorOnModel : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string path = splash::testing::test_model_path();
    if (path.empty()) GTEST_SKIP() << "SPLASH_TEST_MODEL is not set";
    file_ = std::make_unique<gguf::File>(gguf::File::open(path));
    tokenizer_ = std::make_unique<tokenizer::Tokenizer>(tokenizer::Tokenizer::from_gguf(*file_));
    chat_ = chat::chat_format_for(*file_);
    model_ = model::load_model(*file_, {.max_context = 512, .threads = 0});
  }

  GenerationResult run(const std::vector<chat::ChatMessage>& messages, CachedSequence* cache) {
    GenerationRequest request;
    request.prompt = chat::encode_prompt(*chat_, *tokenizer_, messages);
    request.sampling.temperature = 0.0f;
    request.max_tokens = 24;
    request.stop = chat_->stop_texts();
    return generate(*model_, *tokenizer_, request, nullptr, nullptr, cache);
  }

  std::unique_ptr<gguf::File> file_;
  std::unique_ptr<tokenizer::Tokenizer> tokenizer_;
  std::unique_ptr<chat::ChatFormat> chat_;
  std::unique_ptr<model::Model> model_;
};

TEST_F(GeneratorOnModel, NextTurnReusesThePreviousTurn) {
  CachedSequence cache;
  std::vector<chat::ChatMessage> chat{{"user", "Name a primary color."}};
  const auto first = run(chat, &cache);
  EXPECT_EQ(first.cached_prompt_tokens, 0);
  chat.push_back({"assistant", first.text});
  chat.push_back({"user", "And another one?"});
  const auto second = run(chat, &cache);
  // Everything of the first turn's prompt is reused; the reply's tokens too, where the
  // re-rendered reply tokenizes the same way.
  EXPECT_GE(second.cached_prompt_tokens, first.prompt_tokens);
  EXPECT_LT(second.cached_prompt_tokens, second.prompt_tokens);

  const auto fresh = run(chat, nullptr);
  EXPECT_EQ(fresh.cached_prompt_tokens, 0);
  EXPECT_EQ(second.tokens, fresh.tokens) << "reused: " << second.text << "\nfresh: " << fresh.text;
}

TEST_F(GeneratorOnModel, ExactReplayRecomputesOnlyTheLastToken) {
  CachedSequence cache;
  const std::vector<chat::ChatMessage> chat{{"user", "Say something about the sea."}};
  const auto first = run(chat, &cache);
  const auto replay = run(chat, &cache);
  EXPECT_EQ(replay.cached_prompt_tokens, replay.prompt_tokens - 1);
  EXPECT_EQ(replay.tokens, first.tokens);
}

TEST_F(GeneratorOnModel, CacheOutOfStepWithTheModelIsNotTrusted) {
  CachedSequence cache;
  const std::vector<chat::ChatMessage> chat{{"user", "Hello there."}};
  const auto first = run(chat, &cache);
  model_->truncate(3);  // someone else moved the model: the cache no longer describes it
  const auto again = run(chat, &cache);
  EXPECT_EQ(again.cached_prompt_tokens, 0);
  EXPECT_EQ(again.tokens, first.tokens);
}

}  // namespace
}  // namespace splash::engine

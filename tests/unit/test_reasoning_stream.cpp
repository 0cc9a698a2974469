// The reasoning part of a thinking model's reply (engine/reasoning_stream.h), token by token
// with the default model's tokenizer, where "<think>" and "</think>" are several tokens each
// (so the markup arrives split, as with any vocabulary without them).
#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

#include "engine/reasoning_stream.h"
#include "formats/gguf.h"
#include "model_fixture.h"
#include "tokenizer/tokenizer.h"

namespace splash::engine {
namespace {

struct Fixture {
  tokenizer::Tokenizer tokenizer;
  explicit Fixture(const std::string& path) : tokenizer(tokenizer::Tokenizer::from_gguf(gguf::File::open(path))) {}
  std::vector<int32_t> tokens(const std::string& text) const { return tokenizer.encode(text, false); }
  ReasoningControl control(int budget = -1) const { return {true, budget, tokens("\n</think>\n\n")}; }
};

// Feeds every token while the stream is not in the reply; returns the reasoning shown and
// the reply's tokens (those handed back, then the rest).
struct Outcome {
  std::string reasoning;
  std::vector<int32_t> reply;
};
Outcome feed(ReasoningStream& stream, const std::vector<int32_t>& tokens) {
  Outcome out;
  for (const int32_t token : tokens) {
    if (stream.phase() == ReasoningStream::Phase::Reply) {
      out.reply.push_back(token);
      continue;
    }
    ReasoningStream::Fed fed = stream.push(token);
    out.reasoning += fed.reasoning;
    out.reply.insert(out.reply.end(), fed.reply_tokens.begin(), fed.reply_tokens.end());
  }
  return out;
}

TEST(ReasoningStream, ThinkBlockIsReasoningWithoutItsNewlinesAndTheRestIsTheReply) {
  SPLASH_REQUIRE_TEST_MODEL(path);
  const Fixture f(path);
  ReasoningStream stream(f.tokenizer, f.control());
  EXPECT_EQ(stream.phase(), ReasoningStream::Phase::Opening);
  const auto tokens = f.tokens("<think>\n\nFirst, add.\n\nThen check.\n\n</think>\n\nThe answer is 4.");
  const Outcome out = feed(stream, tokens);
  EXPECT_EQ(out.reasoning, "First, add.\n\nThen check.");
  EXPECT_EQ(stream.phase(), ReasoningStream::Phase::Reply);
  EXPECT_EQ(f.tokenizer.decode(out.reply), "\n\nThe answer is 4.");  // (the generator drops the newlines)
  EXPECT_GT(stream.thinking_tokens(), 0);
  EXPECT_FALSE(stream.take_forced());
}

TEST(ReasoningStream, AReplyThatDoesNotOpenWithThinkIsAllReply) {
  SPLASH_REQUIRE_TEST_MODEL(path);
  const Fixture f(path);
  for (const std::string reply : {"Hello <think> there", "<thinking> is not the tag", "<", "\n<think>late"}) {
    SCOPED_TRACE(reply);
    ReasoningStream stream(f.tokenizer, f.control());
    const auto tokens = f.tokens(reply);
    Outcome out = feed(stream, tokens);
    if (stream.phase() == ReasoningStream::Phase::Opening) {  // it ended while it still might have opened
      const auto held = stream.take_opening();
      out.reply.insert(out.reply.end(), held.begin(), held.end());
    }
    EXPECT_EQ(stream.phase(), ReasoningStream::Phase::Reply);
    EXPECT_EQ(out.reasoning, "");
    EXPECT_EQ(out.reply, tokens);  // every token, in order
    EXPECT_EQ(stream.thinking_tokens(), 0);
  }
}

// Qwen3.5's reply prompt opens the block itself ("<think>\n"): the reply starts in it, so
// the model's first tokens are reasoning without any "<think>" of its own.
TEST(ReasoningStream, ABlockOpenedByThePromptStartsTheReplyInside) {
  SPLASH_REQUIRE_TEST_MODEL(path);
  const Fixture f(path);
  ReasoningControl control = f.control();
  control.opened = true;
  ReasoningStream stream(f.tokenizer, control);
  EXPECT_EQ(stream.phase(), ReasoningStream::Phase::Thinking);
  const Outcome out = feed(stream, f.tokens("First, add.\n</think>\n\nThe answer is 4."));
  EXPECT_EQ(out.reasoning, "First, add.");
  EXPECT_EQ(stream.phase(), ReasoningStream::Phase::Reply);
  EXPECT_EQ(f.tokenizer.decode(out.reply), "\n\nThe answer is 4.");
  EXPECT_GT(stream.thinking_tokens(), 0);
}

TEST(ReasoningStream, CloseTagSplitAcrossTokensIsNeverShown) {
  SPLASH_REQUIRE_TEST_MODEL(path);
  const Fixture f(path);
  ReasoningStream stream(f.tokenizer, f.control());
  std::string shown;
  // One byte a token where the vocabulary has them: "</" "think" ">" arrive apart.
  for (const int32_t token : f.tokens("<think>a</thi")) shown += stream.push(token).reasoning;
  EXPECT_EQ(shown, "a");  // "</thi" may still be the close tag: held
  for (const int32_t token : f.tokens("nk>")) shown += stream.push(token).reasoning;
  EXPECT_EQ(shown, "a");
  EXPECT_EQ(stream.phase(), ReasoningStream::Phase::Reply);
}

TEST(ReasoningStream, HeldTextIsFlushedWhenTheReplyEndsInsideTheBlock) {
  SPLASH_REQUIRE_TEST_MODEL(path);
  const Fixture f(path);
  ReasoningStream stream(f.tokenizer, f.control());
  const Outcome out = feed(stream, f.tokens("<think>still thinking </th"));
  EXPECT_EQ(stream.phase(), ReasoningStream::Phase::Thinking);
  EXPECT_EQ(out.reasoning + stream.flush(), "still thinking </th");
}

TEST(ReasoningStream, BudgetForcesTheCloseTokensThenTheReplyFollows) {
  SPLASH_REQUIRE_TEST_MODEL(path);
  const Fixture f(path);
  constexpr int kBudget = 5;
  ReasoningStream stream(f.tokenizer, f.control(kBudget));
  feed(stream, f.tokens("<think>"));
  ASSERT_EQ(stream.phase(), ReasoningStream::Phase::Thinking);
  const auto words = f.tokens(" one two three four five six seven eight");
  ASSERT_GT(words.size(), static_cast<size_t>(kBudget));
  std::string reasoning;
  size_t taken = 0;
  std::optional<int32_t> forced;
  while (!(forced = stream.take_forced())) {
    ASSERT_LT(taken, words.size());
    reasoning += stream.push(words[taken++]).reasoning;
  }
  EXPECT_EQ(taken, static_cast<size_t>(kBudget));  // the budget's tokens, then the close
  // Every close token is forced, those after "</think>" (the reply's first newlines) too.
  std::vector<int32_t> all_forced;
  for (; forced; forced = stream.take_forced()) {
    all_forced.push_back(*forced);
    if (stream.phase() != ReasoningStream::Phase::Reply) reasoning += stream.push(*forced).reasoning;
  }
  EXPECT_EQ(all_forced, f.control().close_tokens);
  EXPECT_EQ(stream.phase(), ReasoningStream::Phase::Reply);
  EXPECT_EQ(reasoning, f.tokenizer.decode(std::vector<int32_t>(words.begin(), words.begin() + kBudget)));
}

TEST(ReasoningStream, OffMeansTheReplyFromTheFirstToken) {
  SPLASH_REQUIRE_TEST_MODEL(path);
  const Fixture f(path);
  ReasoningStream stream(f.tokenizer, ReasoningControl{});
  EXPECT_EQ(stream.phase(), ReasoningStream::Phase::Reply);
}

}  // namespace
}  // namespace splash::engine

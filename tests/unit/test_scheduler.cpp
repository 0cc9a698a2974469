// The engine's scheduler on the real model: continuous batching must not change what a
// request gets (greedy output equals the same request run alone, token for token), a next
// turn and an exact replay reuse the cache, a pool far too small for the load forces
// eviction and preemption and still every request completes correctly, and the block
// accounting returns to zero.
#include <gtest/gtest.h>

#include <condition_variable>
#include <mutex>
#include <string>
#include <vector>

#include "chat/chat_format.h"
#include "engine/engine_service.h"
#include "engine/generator.h"
#include "formats/gguf.h"
#include "model/model.h"
#include "model/sequence.h"
#include "engine_fixture.h"
#include "real_model_fixture.h"
#include "tokenizer/tokenizer.h"

namespace splash::engine {
namespace {

class SchedulerOnModel : public splash::testing::RealModelTest {
 protected:

  static ChatRequest request(std::vector<chat::ChatMessage> messages, int max_tokens) {
    ChatRequest r;
    r.messages = std::move(messages);
    r.sampling.temperature = 0.0f;
    r.max_tokens = max_tokens;
    return r;
  }

  // The request run alone on a single sequence: the reference for batched runs.
  std::string alone(const ChatRequest& chat, int context = 512) {
    if (!single_) {
      single_model_ = model::load_model(*file_, {.max_context = context, .threads = 0});
      single_ = std::make_unique<model::Sequence>(*single_model_);
    }
    GenerationRequest g;
    g.prompt = chat::encode_prompt(*chat_, *tokenizer_, chat.messages);
    g.sampling = chat.sampling;
    g.max_tokens = chat.max_tokens;
    g.stop = chat_->stop_texts();
    return generate(*single_, *tokenizer_, g, nullptr).text;
  }

  std::unique_ptr<model::Model> single_model_;
  std::unique_ptr<model::Sequence> single_;
};

const char* kQuestions[] = {
    "Name a primary color.", "What is 2 + 2?", "Write a Python function that reverses a string.",
    "Say something about the sea.", "List three sorting algorithms.", "What does HTTP stand for?",
    "Explain recursion in one sentence.", "Give a synonym for fast.",
};

TEST_F(SchedulerOnModel, BatchedGreedyOutputEqualsEachRequestAlone) {
  auto model = model::load_model(*file_, {.max_context = 512, .threads = 0, .kv_blocks = 256});
  EngineService engine(*model, *tokenizer_, *chat_);
  std::vector<ChatRequest> requests;
  for (int i = 0; i < 6; ++i) requests.push_back(request({{"user", kQuestions[i]}}, 12 + 4 * i));
  const auto outcomes = run_all(engine, requests);
  for (size_t i = 0; i < requests.size(); ++i) {
    ASSERT_TRUE(outcomes[i].finished) << outcomes[i].error;
    EXPECT_EQ(outcomes[i].text, alone(requests[i])) << "request " << i;
  }
  EXPECT_GT(engine.counters().steps, 0u);
  EXPECT_EQ(engine.counters().blocks.in_use, 0);
}

TEST_F(SchedulerOnModel, NextTurnAndExactReplayReuseTheCache) {
  auto model = model::load_model(*file_, {.max_context = 512, .threads = 0, .kv_blocks = 128});
  EngineService engine(*model, *tokenizer_, *chat_);
  std::vector<chat::ChatMessage> chat{{"user", "Name a primary color."}};
  const auto first = run_all(engine, {request(chat, 24)})[0];
  ASSERT_TRUE(first.finished) << first.error;
  EXPECT_EQ(first.cached_prompt_tokens, 0);

  const auto replay = run_all(engine, {request(chat, 24)})[0];
  EXPECT_EQ(replay.cached_prompt_tokens, replay.prompt_tokens - 1);  // only the last token is recomputed
  EXPECT_EQ(replay.text, first.text);
  EXPECT_EQ(engine.counters().replays_from_logits, 1u);  // its first token came from the kept logits

  chat.push_back({"assistant", first.text});
  chat.push_back({"user", "And another one?"});
  const auto second = run_all(engine, {request(chat, 24)})[0];
  // The whole first prompt is reused, and the reply's tokens where it re-tokenizes the same.
  EXPECT_GE(second.cached_prompt_tokens, first.prompt_tokens);
  EXPECT_LT(second.cached_prompt_tokens, second.prompt_tokens);
  EXPECT_EQ(second.text, alone(request(chat, 24)));
  const auto counters = engine.counters();
  EXPECT_EQ(counters.cache_hits, 2u);
  EXPECT_EQ(counters.blocks.in_use, 0);
}

TEST_F(SchedulerOnModel, ThirtyTwoConcurrentRequestsWithSharedPrefixes) {
  auto model = model::load_model(*file_, {.max_context = 512, .threads = 0, .kv_blocks = 512});
  EngineService engine(*model, *tokenizer_, *chat_);
  // Four "agents", each with its own long system prompt, eight requests each; mixed lengths.
  std::vector<ChatRequest> requests;
  for (int agent = 0; agent < 4; ++agent) {
    std::string system = "You are coding agent number " + std::to_string(agent) + ". ";
    for (int line = 0; line < 6 + 4 * agent; ++line)
      system += "Rule " + std::to_string(line) + ": keep answers short and exact; prefer code over prose. ";
    for (int q = 0; q < 8; ++q)
      requests.push_back(request({{"system", system}, {"user", kQuestions[q]}}, 4 + (agent * 8 + q) % 13));
  }
  const auto outcomes = run_all(engine, requests);
  int shared = 0;
  for (size_t i = 0; i < requests.size(); ++i) {
    ASSERT_TRUE(outcomes[i].finished) << outcomes[i].error;
    EXPECT_EQ(outcomes[i].text, alone(requests[i])) << "request " << i;
    shared += outcomes[i].cached_prompt_tokens > 0;
  }
  EXPECT_GE(shared, 16);  // siblings took their agent's system prompt from the cache
  EXPECT_EQ(engine.counters().blocks.in_use, 0);
  EXPECT_EQ(engine.counters().requests_running, 0);
}

TEST_F(SchedulerOnModel, TinyPoolForcesEvictionAndPreemptionYetEveryRequestIsCorrect) {
  // 40 blocks = 640 positions for 8 requests that need ~100-150 positions each.
  auto model = model::load_model(*file_, {.max_context = 256, .threads = 0, .kv_blocks = 40});
  EngineService engine(*model, *tokenizer_, *chat_);
  std::vector<ChatRequest> requests;
  for (int i = 0; i < 8; ++i) {
    std::string prompt = std::string(kQuestions[i]) + " Context:";
    for (int w = 0; w < 12; ++w) prompt += " item" + std::to_string(i * 100 + w);
    auto r = request({{"user", prompt}}, 60);
    requests.push_back(r);
  }
  const auto outcomes = run_all(engine, requests);
  for (size_t i = 0; i < requests.size(); ++i) {
    ASSERT_TRUE(outcomes[i].finished) << outcomes[i].error;
    EXPECT_EQ(outcomes[i].text, alone(requests[i], 256)) << "request " << i;
  }
  const auto counters = engine.counters();
  EXPECT_GT(counters.preemptions, 0u);
  EXPECT_GT(counters.blocks.evictions, 0u);
  EXPECT_EQ(counters.blocks.in_use, 0);
  EXPECT_EQ(counters.blocks.total, 40);
}

TEST_F(SchedulerOnModel, CancelledAndFailedRequestsReleaseTheirBlocks) {
  auto model = model::load_model(*file_, {.max_context = 256, .threads = 0, .kv_blocks = 64});
  EngineService engine(*model, *tokenizer_, *chat_);
  std::mutex mutex;
  std::condition_variable changed;
  int texts = 0;
  bool finished = false;
  // A sink that cancels after a few pieces.
  auto ticket = engine.submit(request({{"user", kQuestions[2]}}, 200), [&](const ChatEvent& e) {
    std::lock_guard lock(mutex);
    if (e.kind == ChatEvent::Kind::Text && ++texts >= 3) {
      finished = true;
      changed.notify_all();
      return false;
    }
    return true;
  });
  {
    std::unique_lock lock(mutex);
    changed.wait(lock, [&] { return finished; });
  }
  // A prompt longer than the context fails in the caller's shape.
  std::string huge;
  for (int i = 0; i < 400; ++i) huge += " word" + std::to_string(i);
  const auto failed = run_all(engine, {request({{"user", huge}}, 8)})[0];
  EXPECT_NE(failed.error.find("prompt is too long"), std::string::npos) << failed.error;
  const auto after = run_all(engine, {request({{"user", kQuestions[0]}}, 8)})[0];
  EXPECT_TRUE(after.finished);
  EXPECT_EQ(engine.counters().blocks.in_use, 0);
}

// Fair prefill: a short prompt that arrives while a long one is being read gets its share of
// the next step instead of waiting behind the whole long prompt, so it finishes (prompt and
// a few tokens) before the long prompt's first token; and the long one still completes, with
// the output it has alone. Checked by the order of events, never by time.
TEST_F(SchedulerOnModel, ShortPromptIsNotQueuedBehindALongOne) {
  auto model = model::load_model(*file_, {.max_context = 4096, .threads = 0, .kv_blocks = 512});
  EngineService engine(*model, *tokenizer_, *chat_);
  std::string long_text;
  for (int i = 0; i < 700; ++i) long_text += " item" + std::to_string(i);  // ~2800 tokens: 6 chunks
  const auto long_request = request({{"user", long_text + "\nSummarise the list."}}, 4);
  std::mutex mutex;
  std::condition_variable changed;
  int order = 0, long_first_text = -1, long_finished = -1, short_finished = -1;
  std::string long_output;
  auto sink = [&](bool is_long) {
    return [&, is_long](const ChatEvent& e) {
      std::lock_guard lock(mutex);
      if (e.kind == ChatEvent::Kind::Text && is_long) {
        if (long_first_text < 0) long_first_text = ++order;
        long_output += e.text;
      }
      if (e.kind == ChatEvent::Kind::Finished || e.kind == ChatEvent::Kind::Failed) {
        (is_long ? long_finished : short_finished) = ++order;
        changed.notify_all();
      }
      return true;
    };
  };
  engine.submit(long_request, sink(true));
  engine.submit(request({{"user", kQuestions[1]}}, 4), sink(false));
  {
    std::unique_lock lock(mutex);
    changed.wait(lock, [&] { return long_finished > 0 && short_finished > 0; });
  }
  EXPECT_GT(long_first_text, 0);
  EXPECT_LT(short_finished, long_first_text) << "the short request waited for the long prompt";
  EXPECT_EQ(long_output, alone(long_request, 4096));
  EXPECT_EQ(engine.counters().blocks.in_use, 0);
}

}  // namespace
}  // namespace splash::engine

#pragma once
// What the engine tests collect of a request's events: its text, token counts, how it ended
// and what speculative decoding did, for many requests at once (Collector waits for all).
#include <gtest/gtest.h>

#include <condition_variable>
#include <mutex>
#include <string>
#include <vector>

#include "engine/engine_service.h"

namespace splash::engine {

struct Outcome {
  std::string text;
  std::vector<int32_t> tokens;  // the reply's token ids, when the request asked for logprobs
  std::string error;
  int prompt_tokens = 0, cached_prompt_tokens = 0, completion_tokens = 0;
  int draft_tokens = 0, accepted_draft_tokens = 0;
  FinishReason finish = FinishReason::Stop;
  std::string stop_sequence;
  bool finished = false;
};

class Collector {
 public:
  explicit Collector(size_t n) : outcomes_(n) {}
  ChatEventSink sink(size_t i) {
    return [this, i](const ChatEvent& e) {
      std::lock_guard lock(mutex_);
      Outcome& o = outcomes_[i];
      switch (e.kind) {
        case ChatEvent::Kind::Text:
          o.text += e.text;
          for (const auto& logprob : e.logprobs) o.tokens.push_back(logprob.id);
          break;
        case ChatEvent::Kind::Started: o.cached_prompt_tokens = e.cached_prompt_tokens; break;
        case ChatEvent::Kind::Finished:
          o.prompt_tokens = e.prompt_tokens;
          o.completion_tokens = e.completion_tokens;
          o.draft_tokens = e.draft_tokens;
          o.accepted_draft_tokens = e.accepted_draft_tokens;
          o.finish = e.finish;
          o.stop_sequence = e.stop_sequence;
          o.finished = true;
          ++done_;
          changed_.notify_all();
          break;
        case ChatEvent::Kind::Failed:
          o.error = e.error;
          ++done_;
          changed_.notify_all();
          break;
        default: break;
      }
      return true;
    };
  }
  const std::vector<Outcome>& wait() {
    std::unique_lock lock(mutex_);
    changed_.wait(lock, [&] { return done_ == outcomes_.size(); });
    return outcomes_;
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<Outcome> outcomes_;
  size_t done_ = 0;
};

// Submits every request to the engine and waits for all of them.
inline std::vector<Outcome> run_all(EngineService& engine, const std::vector<ChatRequest>& requests) {
  Collector collector(requests.size());
  for (size_t i = 0; i < requests.size(); ++i) engine.submit(requests[i], collector.sink(i));
  return collector.wait();
}

}  // namespace splash::engine

#pragma once
// Runs chat requests against one loaded model on a worker thread, in arrival order (the
// scheduler issue replaces this with continuous batching). Callers get their events through
// a callback on the worker thread and can cancel at any time; the service keeps the counters
// /status reports.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

#include "chat/chat_format.h"
#include "engine/chat_request.h"
#include "grammar/token_trie.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace splash::engine {

// Receives the events of one request, on the worker thread. Returning false cancels it.
using ChatEventSink = std::function<bool(const ChatEvent&)>;

class ChatTicket {
 public:
  void cancel() { cancelled_.store(true); }
  bool cancelled() const { return cancelled_.load(); }

 private:
  friend class EngineService;
  ChatRequest request_;
  ChatEventSink sink_;
  std::atomic<bool> cancelled_{false};
};

struct EngineCounters {
  int requests_running = 0;
  int requests_queued = 0;
  uint64_t requests_completed = 0;
  uint64_t prompt_tokens = 0;
  uint64_t generated_tokens = 0;
  uint64_t cache_hits = 0;              // requests that reused part of the cached sequence
  uint64_t reused_prompt_tokens = 0;    // prompt tokens taken from the cache, not computed
};

class EngineService {
 public:
  EngineService(model::Model& model, const tokenizer::Tokenizer& tokenizer, const chat::ChatFormat& chat);
  ~EngineService();  // stops the worker; queued requests fail, the running one finishes early

  // Queues a request; its events arrive through sink. The ticket cancels it.
  std::shared_ptr<ChatTicket> submit(ChatRequest request, ChatEventSink sink);
  // Ends every request soon (queued ones fail with a shutdown message, the running one
  // finishes at its next token) and refuses new ones.
  void shut_down();

  // The prompt tokens of a conversation (chat format + tokenizer + BOS rule).
  std::vector<int32_t> encode_chat(std::span<const chat::ChatMessage> messages,
                                   std::span<const chat::ToolSpec> tools = {}) const;

  EngineCounters counters() const;
  bool accepting() const { return !stopping_.load(); }

 private:
  void worker_loop();
  void run(ChatTicket& ticket);

  model::Model& model_;
  const tokenizer::Tokenizer& tokenizer_;
  const chat::ChatFormat& chat_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::shared_ptr<ChatTicket>> queue_;
  std::atomic<bool> stopping_{false};
  EngineCounters counters_;
  CachedSequence cached_;  // what the model's KV cache holds (worker thread only)
  std::shared_ptr<const grammar::TokenTrie> token_trie_;  // for constrained decoding
  std::thread worker_;
};

}  // namespace splash::engine

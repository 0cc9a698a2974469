#include "engine/engine_service.h"

#include <algorithm>

#include "common/error.h"
#include "engine/output_constraints.h"

namespace splash::engine {

EngineService::EngineService(model::Model& model, const tokenizer::Tokenizer& tokenizer, const chat::ChatFormat& chat)
    : model_(model),
      tokenizer_(tokenizer),
      chat_(chat),
      token_trie_(build_token_trie(tokenizer)),
      worker_([this] { worker_loop(); }) {}

EngineService::~EngineService() {
  shut_down();
  worker_.join();
}

std::vector<int32_t> EngineService::encode_chat(std::span<const chat::ChatMessage> messages,
                                                std::span<const chat::ToolSpec> tools) const {
  return chat::encode_prompt(chat_, tokenizer_, messages, tools);
}

std::shared_ptr<ChatTicket> EngineService::submit(ChatRequest request, ChatEventSink sink) {
  auto ticket = std::make_shared<ChatTicket>();
  ticket->request_ = std::move(request);
  ticket->sink_ = std::move(sink);
  {
    std::lock_guard lock(mutex_);
    if (!stopping_.load()) {
      queue_.push_back(ticket);
      ++counters_.requests_queued;
      wake_.notify_one();
      return ticket;
    }
  }
  ticket->sink_(ChatEvent::failed("the server is shutting down"));
  return ticket;
}

void EngineService::shut_down() {
  std::deque<std::shared_ptr<ChatTicket>> abandoned;
  {
    std::lock_guard lock(mutex_);
    stopping_.store(true);
    abandoned.swap(queue_);
    counters_.requests_queued = 0;
    wake_.notify_all();
  }
  for (auto& ticket : abandoned) {
    ticket->sink_(ChatEvent::failed("the server is shutting down"));
  }
}

EngineCounters EngineService::counters() const {
  std::lock_guard lock(mutex_);
  return counters_;
}

void EngineService::worker_loop() {
  while (true) {
    std::shared_ptr<ChatTicket> ticket;
    {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [&] { return stopping_.load() || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping
      ticket = std::move(queue_.front());
      queue_.pop_front();
      --counters_.requests_queued;
      ++counters_.requests_running;
    }
    run(*ticket);
    std::lock_guard lock(mutex_);
    --counters_.requests_running;
    ++counters_.requests_completed;
  }
}

void EngineService::run(ChatTicket& ticket) {
  auto& sink = ticket.sink_;
  if (ticket.cancelled()) return;
  const ChatRequest& chat = ticket.request_;
  GenerationRequest request;
  try {
    request.prompt = encode_chat(chat.messages, chat.tools);
    const int context = model_.info().context;
    if (static_cast<int>(request.prompt.size()) >= context) {
      // Worded as the Anthropic API words it: Claude Code recognises it and compacts.
      sink(ChatEvent::failed(fmt::format("prompt is too long: {} tokens > {} maximum (the context this server "
                                          "runs the model at, which also holds the reply; raise --max-context "
                                          "or shorten the conversation)",
                                          request.prompt.size(), context - 1)));
      return;
    }
    // max_tokens beyond what the context leaves is clamped: the reply ends with "length".
    const int room = context - static_cast<int>(request.prompt.size());
    request.max_tokens = chat.max_tokens > 0 ? std::min(chat.max_tokens, room) : room;
    request.sampling = chat.sampling;
    request.stop = chat.stop;
    for (const auto& stop : chat_.stop_texts()) request.stop.push_back(stop);
    request.top_logprobs = chat.top_logprobs;
    request.constraints = chat.constraints ? chat.constraints : compile_output_constraints(chat);
    request.token_trie = token_trie_;
    if (auto problem = validate(request.sampling, model_.info().vocab); !problem.empty()) {
      sink(ChatEvent::failed(problem));
      return;
    }
  } catch (const Error& e) {
    sink(ChatEvent::failed(e.what()));
    return;
  }
  const size_t reusable = static_cast<size_t>(model_.position()) == cached_.tokens.size()
                              ? reusable_prefix(cached_.tokens, request.prompt)
                              : 0;
  if (!sink(ChatEvent::started(static_cast<int>(request.prompt.size()), static_cast<int>(reusable)))) return;
  {
    std::lock_guard lock(mutex_);
    counters_.prompt_tokens += request.prompt.size();
  }
  try {
    const auto result = generate(
        model_, tokenizer_, request,
        [&](const GenerationPiece& piece) {
          if (ticket.cancelled()) return false;
          ChatEvent event;
          event.logprobs.assign(piece.logprobs.begin(), piece.logprobs.end());
          if (piece.tool) {
            event.tool_index = piece.tool->index;
            switch (piece.tool->kind) {
              case ToolCallUpdate::Kind::Started:
                event.kind = ChatEvent::Kind::ToolCallStarted;
                event.tool_call = piece.tool->call;
                break;
              case ToolCallUpdate::Kind::Arguments:
                event.kind = ChatEvent::Kind::ToolCallArguments;
                event.text = piece.tool->arguments;
                break;
              case ToolCallUpdate::Kind::Finished:
                event.kind = ChatEvent::Kind::ToolCallFinished;
                event.tool_call = piece.tool->call;
                break;
            }
          } else {
            event.text = std::string(piece.text);
          }
          return sink(event) && !ticket.cancelled();
        },
        &stopping_, &cached_);
    {
      std::lock_guard lock(mutex_);
      counters_.generated_tokens += result.tokens.size();
      counters_.prompt_tokens -= result.cached_prompt_tokens;  // counted as reused instead
      counters_.reused_prompt_tokens += result.cached_prompt_tokens;
      if (result.cached_prompt_tokens > 0) ++counters_.cache_hits;
    }
    if (result.finish != FinishReason::Cancelled || stopping_.load()) {
      ChatEvent done = ChatEvent::finished(result.finish == FinishReason::Cancelled ? FinishReason::Stop : result.finish,
                                           result.prompt_tokens, static_cast<int>(result.tokens.size()),
                                           result.cached_prompt_tokens);
      // Only the caller's own stop strings are reported (not the chat format's end markers).
      if (std::find(chat.stop.begin(), chat.stop.end(), result.stop_sequence) != chat.stop.end())
        done.stop_sequence = result.stop_sequence;
      sink(done);
    }
  } catch (const std::exception& e) {
    // An engine failure must not take the server down: the request fails, the worker lives.
    cached_.tokens.clear();  // the cache's contents are unknown now
    sink(ChatEvent::failed(std::string("generation failed: ") + e.what()));
  }
}

}  // namespace splash::engine

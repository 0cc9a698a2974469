#include "engine/engine_service.h"

#include <fmt/format.h>

#include <algorithm>
#include <optional>

#include "common/error.h"
#include "engine/generator.h"
#include "engine/output_constraints.h"

namespace splash::engine {

// One admitted request: its generation state and its claim on KV blocks.
struct EngineService::Running {
  std::shared_ptr<ChatTicket> ticket;
  std::optional<Generation> generation;
  std::vector<int32_t> tokens;          // the prompt, then each generated token fed back; image
                                        // positions hold their cache keys (engine/image_prompt.h)
  std::vector<const float*> embeddings; // per prompt position: image features, or null (empty: no images)
  int32_t image_token = -1;             // what the model reads at image positions
  int computed = 0;                     // leading tokens whose keys and values are in `blocks`
  std::vector<int32_t> blocks;          // the block table
  std::vector<cache::PrefixKey> keys;   // keys[i]: the prefix before block i
  int published = 0;                    // leading blocks already in the prefix index
  bool started = false;                 // the Started event went out
  bool preempted = false;
  bool ended = false;
  int cached_prompt_tokens = 0;
  uint64_t order = 0;                   // admission order (older runs first, newer is preempted first)
  std::unique_ptr<Drafter> drafter;     // speculative decoding's guesses (null: plain decoding)
  int draft_tokens = 0, accepted_draft_tokens = 0;
  int draft_published = 0;              // leading full blocks whose drafter state is in draft_states_
  int state_slot = -1;                  // a hybrid model's recurrent-state slot (-1: none held)
  int snapshot_at = -1;                 // and where its prompt is cut for a snapshot (-1: nowhere)

  int pending() const { return static_cast<int>(tokens.size()) - computed; }
};

// A sequence's part of one pass: its `count` tokens from `computed` on, of which the last
// `drafted` are guesses being verified.
struct EngineService::Slot {
  Running* sequence;
  int count;
  int drafted = 0;
};

// What one forward pass runs: the slots and the model's slices over them (with the token
// copies of slices that cross images).
struct EngineService::Pass {
  std::vector<Slot> slots;
  std::vector<model::SequenceSlice> batch;
  std::vector<std::vector<int32_t>> image_slices;
  std::vector<std::vector<const float*>> image_rows;
  int tokens = 0;
};

namespace {

ChatEvent event_of(const GenerationPiece& piece) {
  ChatEvent event;
  event.logprobs.assign(piece.logprobs.begin(), piece.logprobs.end());
  if (!piece.tool) {
    if (piece.reasoning) event.kind = ChatEvent::Kind::Reasoning;
    event.text = std::string(piece.text);
    return event;
  }
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
  return event;
}

}  // namespace

EngineService::EngineService(model::Model& model, const tokenizer::Tokenizer& tokenizer, const chat::ChatFormat& chat,
                             ImageInput images, EngineOptions options)
    : model_(model),
      tokenizer_(tokenizer),
      chat_(chat),
      images_(images),
      options_(std::move(options)),
      drafting_(model.info().max_logits_per_slice > 1 && model.info().draft_pass_tokens > 1 &&
                (options_.drafter || options_.draft != DraftMode::None)),
      best_token_rows_(options_.best_token_rows.value_or(model.info().best_tokens_on_device)),
      image_tokens_(images.encoder ? find_image_tokens(tokenizer) : ImageTokenIds{}),
      token_trie_(build_token_trie(tokenizer)),
      blocks_(model.info().kv_blocks, [&model](int from, int to, int tokens) { model.copy_kv_block(from, to, tokens); }),
      states_(model.info().state_slots),
      snapshots_(model.info().state_snapshots),
      worker_([this] { worker_loop(); }) {
  if (const std::string marker = chat.message_start_marker(); !marker.empty())
    message_start_token_ = tokenizer.find_token(marker).value_or(-1);
  std::lock_guard lock(mutex_);
  counters_.snapshots = snapshots_.counters();
  counters_.snapshot_bytes = model.info().recurrent_state_bytes;
}

EngineService::~EngineService() {
  shut_down();
  worker_.join();
}

std::vector<int32_t> EngineService::encode_chat(std::span<const chat::ChatMessage> messages,
                                                std::span<const chat::ToolSpec> tools) const {
  auto prompt = chat::encode_prompt(chat_, tokenizer_, messages, tools);
  if (!images_.encoder) return prompt;
  // Counting: each image's tiles follow from its size, read from its header.
  std::vector<EncodedImage> layouts;
  for (const auto& message : messages)
    for (const auto& [file, offset] : message.images) {
      const auto size = vision::read_image_size(std::span(reinterpret_cast<const uint8_t*>(file.data()), file.size()),
                                                images_.max_pixels);
      layouts.push_back({images_.encoder->layout(size.width, size.height), {}, 0});
    }
  return expand_image_markers(prompt, image_tokens_, images_.encoder->info().tokens_per_view, layouts).tokens;
}

std::string EngineService::encode_images(ChatTicket& ticket) {
  size_t count = 0;
  for (const auto& message : ticket.request_.messages) count += message.images.size();
  if (count == 0) return {};
  if (!images_.encoder)
    return "this model has no vision encoder, so it cannot read the images in the message content; send text instead "
           "(a vision model is served with its --mmproj file)";
  int index = 0;
  const auto cancelled = [&ticket] { return ticket.cancelled(); };
  for (const auto& message : ticket.request_.messages)
    for (const auto& [file, offset] : message.images) {
      try {
        if (ticket.cancelled()) throw vision::EncodingCancelled();
        const uint64_t digest = image_digest(file);
        auto features = image_features_.find(digest, file.size());
        if (!features) {
          const auto bytes = std::span(reinterpret_cast<const uint8_t*>(file.data()), file.size());
          features = images_.encoder->encode(vision::decode_image(bytes, images_.max_pixels), cancelled);
          image_features_.store(digest, file.size(), *features);
        }
        const vision::ImageLayout layout = features->layout;
        ticket.images_.push_back({layout, std::move(*features), digest});
      } catch (const Error& e) {
        return fmt::format("image {} of the conversation: {}", index + 1, e.what());
      }
      ++index;
    }
  return {};
}

std::shared_ptr<ChatTicket> EngineService::submit(ChatRequest request, ChatEventSink sink) {
  auto ticket = std::make_shared<ChatTicket>();
  submit(ticket, std::move(request), std::move(sink));
  return ticket;
}

void EngineService::submit(const std::shared_ptr<ChatTicket>& ticket, ChatRequest request, ChatEventSink sink) {
  // Tool calls are written, parsed and constrained in the model's own syntax; constraints
  // compiled for another are compiled again (prepare).
  request.tool_syntax = chat_.tool_call_syntax();
  if (request.constraints && request.constraints->syntax != request.tool_syntax) request.constraints = nullptr;
  ticket->request_ = std::move(request);
  ticket->sink_ = std::move(sink);
  if (const std::string problem = encode_images(*ticket); !problem.empty()) {
    ticket->sink_(ChatEvent::failed(problem));
    return;
  }
  {
    std::lock_guard lock(mutex_);
    if (!stopping_.load()) {
      queue_.push_back(ticket);
      ++counters_.requests_queued;
      wake_.notify_one();
      return;
    }
  }
  ticket->sink_(ChatEvent::failed("the server is shutting down"));
}

void EngineService::shut_down() {
  std::deque<std::shared_ptr<ChatTicket>> abandoned;
  {
    std::lock_guard lock(mutex_);
    stopping_.store(true);
    abandoned.swap(queue_);
    wake_.notify_all();
  }
  for (auto& ticket : abandoned) ticket->sink_(ChatEvent::failed("the server is shutting down"));
}

EngineCounters EngineService::counters() const {
  std::lock_guard lock(mutex_);
  return counters_;
}

void EngineService::worker_loop() {
  while (true) {
    std::deque<std::shared_ptr<ChatTicket>> arrived;
    {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [&] { return stopping_.load() || !queue_.empty() || !running_.empty() || !waiting_.empty(); });
      arrived.swap(queue_);
    }
    take_new_requests(arrived);
    if (stopping_.load()) {
      // Waiting requests end now; running ones end at their next token (their generation
      // sees the stop flag).
      for (auto& sequence : waiting_) {
        if (sequence->generation) sequence->generation->result().finish = FinishReason::Cancelled;
        finish(*sequence, false);
      }
      waiting_.clear();
      if (running_.empty()) {
        std::lock_guard lock(mutex_);
        counters_.requests_queued = 0;
        counters_.requests_running = 0;
        return;
      }
    }
    step();
    publish_occupancy();
  }
}

void EngineService::publish_occupancy() {
  std::lock_guard lock(mutex_);
  counters_.requests_running = static_cast<int>(running_.size());
  counters_.requests_queued = static_cast<int>(waiting_.size() + queue_.size());
  counters_.blocks = blocks_.counters();
}

void EngineService::take_new_requests(std::deque<std::shared_ptr<ChatTicket>>& arrived) {
  for (auto& ticket : arrived) {
    auto sequence = std::make_unique<Running>();
    sequence->ticket = std::move(ticket);
    waiting_.push_back(std::move(sequence));
  }
}

bool EngineService::prepare(Running& sequence) {
  ChatTicket& ticket = *sequence.ticket;
  const ChatRequest& chat = ticket.request_;
  GenerationRequest request;
  try {
    // A reply constrained from its first token does not think (the constraint would have to
    // wait for the think block's end); the rest think unless switched off or given no budget.
    const bool constrained_from_start = chat.output_format.kind != OutputFormat::Kind::Text ||
                                        chat.tool_choice == ToolChoice::Required || chat.tool_choice == ToolChoice::Named;
    const bool thinking = chat_.thinks() && chat.reasoning.enabled && chat.reasoning.budget_tokens != 0 &&
                          !constrained_from_start;
    request.prompt = chat::encode_prompt(chat_, tokenizer_, chat.messages, chat.tools, thinking);
    if (thinking) {
      request.reasoning.enabled = true;
      request.reasoning.opened = chat_.reply_prompt_opens_thinking();
      request.reasoning.budget = chat.reasoning.budget_tokens;
      request.reasoning.close_tokens = tokenizer_.encode("\n</think>\n\n");
    }
    std::vector<int32_t> cache_keys;
    if (images_.encoder) {
      ImagePrompt expanded = expand_image_markers(request.prompt, image_tokens_,
                                                  images_.encoder->info().tokens_per_view, ticket.images_);
      request.prompt = std::move(expanded.tokens);
      cache_keys = std::move(expanded.cache_keys);
      if (!ticket.images_.empty()) {
        sequence.embeddings = std::move(expanded.embeddings);
        sequence.image_token = image_tokens_.marker;
      }
    }
    const int context = model_.info().context;
    if (static_cast<int>(request.prompt.size()) >= context) {
      // Worded as the Anthropic API words it: Claude Code recognises it and compacts.
      ticket.sink_(ChatEvent::failed(fmt::format("prompt is too long: {} tokens > {} maximum (the context this server "
                                                 "runs the model at, which also holds the reply; raise --max-context "
                                                 "or shorten the conversation)",
                                                 request.prompt.size(), context - 1)));
      return false;
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
      ticket.sink_(ChatEvent::failed(problem));
      return false;
    }
    sequence.tokens = cache_keys.empty() ? request.prompt : std::move(cache_keys);
    auto sink = [&ticket](const GenerationPiece& piece) {
      if (ticket.cancelled()) return false;
      return ticket.sink_(event_of(piece)) && !ticket.cancelled();
    };
    sequence.generation.emplace(tokenizer_, std::move(request), sink, &stopping_, model_.info().vocab, context);
    if (drafting_) {
      try {
        sequence.drafter = options_.drafter ? options_.drafter() : std::make_unique<LookupDrafter>();
      } catch (const std::exception&) {  // (plain decoding for this reply)
        sequence.drafter.reset();
      }
    }
  } catch (const Error& e) {
    ticket.sink_(ChatEvent::failed(e.what()));
    return false;
  }
  return true;
}

bool EngineService::admit(Running& sequence) {
  const int size = static_cast<int>(sequence.tokens.size());
  const bool recurrent = states_.total() > 0;
  if (recurrent && states_.available() == 0) return false;  // a running sequence frees one (there is one)
  // At least the last token is computed: its logits pick the next one. A hybrid model's
  // state is known only where a snapshot holds it: its prefix ends at the deepest snapshot
  // whose KV blocks are all still cached.
  cache::PrefixMatch match;
  int resume_from = -1;  // the snapshot a hybrid sequence resumes from
  if (!recurrent) {
    match = blocks_.acquire_prefix(sequence.tokens, size - 1);
  } else {
    for (const auto& candidate : snapshots_.candidates(sequence.tokens, size - 1)) {
      match = blocks_.acquire_prefix(sequence.tokens, candidate.tokens);
      if (match.tokens == candidate.tokens) {
        resume_from = candidate.snapshot;
        break;
      }
      blocks_.release(match.blocks, std::span(sequence.tokens).first(match.tokens), true);
      match = {};
    }
  }
  const int needed = (size + cache::kBlockTokens - 1) / cache::kBlockTokens - static_cast<int>(match.blocks.size());
  if (needed > blocks_.available()) {
    blocks_.release(match.blocks, std::span(sequence.tokens).first(match.tokens), true);
    if (!running_.empty()) return false;  // waits until running sequences free blocks
    sequence.ticket->sink_(ChatEvent::failed(fmt::format(
        "the request needs {} KV cache blocks but the cache has {} (raise --max-memory or shorten the prompt)",
        needed + match.blocks.size(), blocks_.counters().total)));
    sequence.ended = true;
    return true;
  }
  sequence.blocks = std::move(match.blocks);
  sequence.computed = match.tokens;
  if (recurrent) {
    sequence.state_slot = states_.acquire();
    if (resume_from >= 0) {
      try {
        model_.restore_state(resume_from, sequence.state_slot, match.tokens);
        snapshots_.use(resume_from);
      } catch (const std::exception&) {  // (the snapshot is not what its entry says: start afresh)
        snapshots_.discard(resume_from);
        blocks_.release(sequence.blocks, std::span(sequence.tokens).first(match.tokens), true);
        sequence.blocks.clear();
        sequence.computed = match.tokens = 0;
      }
      std::lock_guard lock(mutex_);
      counters_.snapshots = snapshots_.counters();
    }
    sequence.snapshot_at = next_snapshot_point(sequence);
  }
  sequence.published = match.tokens / cache::kBlockTokens;
  sequence.keys.assign(1, cache::kEmptyPrefix);
  for (int i = 0; i < sequence.published; ++i)
    sequence.keys.push_back(cache::extend_prefix(
        sequence.keys.back(), std::span(sequence.tokens).subspan(i * cache::kBlockTokens, cache::kBlockTokens)));
  sequence.draft_published = sequence.published;
  if (sequence.drafter) {
    try {
      restore_draft_states(sequence);
    } catch (const std::exception&) {  // (as above: no guesses, the reply goes on)
      sequence.drafter.reset();
    }
  }
  sequence.preempted = false;
  sequence.order = ++admissions_;
  if (!sequence.started) {
    sequence.started = true;
    sequence.cached_prompt_tokens = match.tokens;
    sequence.generation->result().cached_prompt_tokens = match.tokens;
    {
      std::lock_guard lock(mutex_);
      counters_.prompt_tokens += size - match.tokens;
      counters_.reused_prompt_tokens += match.tokens;
      if (match.tokens > 0) ++counters_.cache_hits;
      counters_.snapshots = snapshots_.counters();
      // Running before its client hears it started (publish_occupancy settles the counts).
      ++counters_.requests_running;
      if (counters_.requests_queued > 0) --counters_.requests_queued;
    }
    if (!sequence.ticket->sink_(ChatEvent::started(size, match.tokens))) sequence.ticket->cancel();
    // An exact replay whose next-token logits are known samples its first token now; the
    // last prompt token is computed with that token in the next step.
    if (match.tokens == size - 1 && !sequence.ticket->cancelled())
      if (const auto* logits = prompt_logits_.find(sequence.tokens)) {
        {
          std::lock_guard lock(mutex_);
          ++counters_.replays_from_logits;
        }
        LogitsRow row(*logits);
        on_logits(sequence, row);
      }
  }
  return true;
}

bool EngineService::sibling_computing_prefix(const Running& waiting) const {
  if (states_.total() > 0) return false;  // a hybrid model's prefix ends at a snapshot, not at a sibling's blocks
  for (const auto& sibling : running_) {
    if (sibling->pending() <= 1) continue;  // decoding: its prompt is computed and published
    const auto [a, b] = std::mismatch(waiting.tokens.begin(), waiting.tokens.end(), sibling->tokens.begin(),
                                      sibling->tokens.end());
    const int shareable = static_cast<int>(a - waiting.tokens.begin()) / cache::kBlockTokens * cache::kBlockTokens;
    if (shareable > sibling->computed) return true;
  }
  return false;
}

bool EngineService::grow(Running& sequence, int positions) {
  while (static_cast<int>(sequence.blocks.size()) * cache::kBlockTokens < positions) {
    const int block = blocks_.allocate();
    if (block < 0) return false;
    sequence.blocks.push_back(block);
  }
  return true;
}

void EngineService::publish_full_blocks(Running& sequence) {
  while ((sequence.published + 1) * cache::kBlockTokens <= sequence.computed) {
    const int i = sequence.published++;
    const auto tokens = std::span(sequence.tokens).subspan(i * cache::kBlockTokens, cache::kBlockTokens);
    blocks_.publish(sequence.blocks[i], sequence.keys[i], i, tokens);
    sequence.keys.push_back(cache::extend_prefix(sequence.keys[i], tokens));
  }
}

// Where a hybrid sequence's prompt is next cut for a snapshot, past what it has computed
// (-1: nowhere): at options_.snapshot_interval tokens and each doubling of it (interior
// snapshots, replaced before any other), and a few tokens before the end
// (the next turn's prompt, the same conversation less the template's header for the reply,
// resumes there); points a snapshot holds already are passed over. Only while the prompt is
// computed: a sequence taken back after preemption saved its own when it was preempted.
int EngineService::next_snapshot_point(Running& sequence) const {
  if (snapshots_.counters().total == 0 || !sequence.generation->result().tokens.empty()) return -1;
  const int cut = static_cast<int>(sequence.tokens.size()) - kSnapshotBeforePromptEnd;
  const auto held = [&](int point) { return snapshots_.holds(std::span(sequence.tokens).first(point)); };
  std::vector<int> points;  // inside the prompt: the grid, then the message boundaries
  if (const int every = options_.snapshot_interval; every > 0) {
    for (int64_t point = every; point < cut; point *= 2) points.push_back(static_cast<int>(point));
    for (const int point : message_snapshot_points(sequence.tokens)) points.push_back(point);
    std::sort(points.begin(), points.end());
  }
  points.push_back(cut);
  for (const int point : points)
    if (point > sequence.computed && point <= cut && !held(point)) return point;
  return -1;
}

std::vector<int> EngineService::message_snapshot_points(std::span<const int32_t> tokens) const {
  if (message_start_token_ < 0) return {};
  std::vector<int> starts;  // where each message opens
  for (size_t i = 0; i < tokens.size(); ++i)
    if (tokens[i] == message_start_token_) starts.push_back(static_cast<int>(i));
  std::vector<int> points;
  if (starts.size() >= 2) points.push_back(starts[1]);
  for (size_t m = starts.size(); m-- > 1;) {  // the message after the last user query
    const auto head = tokens.subspan(starts[m - 1] + 1, std::min<size_t>(6, tokens.size() - starts[m - 1] - 1));
    if (chat_.opens_user_query(tokenizer_.decode(head))) {
      points.push_back(starts[m]);
      break;
    }
  }
  std::erase_if(points, [](int point) { return point < kMessageSnapshotLeast; });
  return points;
}

void EngineService::save_snapshot(Running& sequence, bool interior) {
  const int computed = std::min(sequence.computed, static_cast<int>(sequence.tokens.size()));
  if (sequence.state_slot < 0 || computed <= 0 || stopping_.load()) return;
  const int snapshot = snapshots_.store(std::span(sequence.tokens).first(computed), interior);
  if (snapshot < 0) return;  // one holds it already
  try {
    // (a reply that ends inside a verify block: its refused guesses out of the state first)
    model_.rewind_state(sequence.state_slot, computed);
    model_.save_state(sequence.state_slot, snapshot);
  } catch (const std::exception&) {  // (a slot whose state is unknown: nothing to keep)
    snapshots_.discard(snapshot);
  }
  std::lock_guard lock(mutex_);
  counters_.snapshots = snapshots_.counters();
}

void EngineService::release_state(Running& sequence) {
  if (sequence.state_slot < 0) return;
  states_.release(sequence.state_slot);
  sequence.state_slot = -1;
}

void EngineService::preempt(Running& sequence) {
  // Its computed blocks stay cached: when it is admitted again, the prefix index gives back
  // whatever was not evicted meanwhile and only the rest is recomputed.
  blocks_.release(sequence.blocks, std::span(sequence.tokens).first(sequence.computed), true);
  save_snapshot(sequence);  // a hybrid's state too, so it resumes where it stopped
  release_state(sequence);
  sequence.blocks.clear();
  sequence.keys.clear();
  sequence.computed = 0;
  sequence.published = 0;
  sequence.preempted = true;
  std::lock_guard lock(mutex_);
  ++counters_.preemptions;
}

void EngineService::fail_reply(Running& sequence, bool keep_blocks, std::string_view why) {
  sequence.ended = true;
  blocks_.release(sequence.blocks,
                  std::span(sequence.tokens).first(std::min<size_t>(sequence.computed, sequence.tokens.size())),
                  keep_blocks);
  release_state(sequence);
  sequence.blocks.clear();
  sequence.ticket->sink_(ChatEvent::failed(fmt::format("generation failed: {}", why)));
}

void EngineService::finish(Running& sequence, bool keep_blocks) {
  sequence.ended = true;
  // The state after the reply (a coding agent's next turn extends this conversation).
  if (keep_blocks && sequence.started) save_snapshot(sequence);
  blocks_.release(sequence.blocks, std::span(sequence.tokens).first(std::min<size_t>(sequence.computed, sequence.tokens.size())),
                  keep_blocks);
  release_state(sequence);
  sequence.blocks.clear();
  if (!sequence.started) {  // only reached at shutdown: it never ran
    if (!sequence.ticket->cancelled()) sequence.ticket->sink_(ChatEvent::failed("the server is shutting down"));
    return;
  }
  GenerationResult& result = sequence.generation->result();
  {
    // Up to date before the client hears of the end (a next request sees them settled).
    std::lock_guard lock(mutex_);
    counters_.generated_tokens += result.tokens.size();
    ++counters_.requests_completed;
    counters_.blocks = blocks_.counters();
    counters_.requests_running = static_cast<int>(
        std::count_if(running_.begin(), running_.end(), [](const auto& r) { return !r->ended; }));
  }
  if (result.finish == FinishReason::Cancelled && stopping_.load()) {
    // Cut by the shutdown: the client hears the reply is incomplete (each protocol's error
    // event or body), never that it finished.
    if (!sequence.ticket->cancelled())
      sequence.ticket->sink_(ChatEvent::failed(fmt::format(
          "the server shut down before the reply was complete ({} tokens generated)", result.tokens.size())));
    return;
  }
  if (result.finish != FinishReason::Cancelled) {
    ChatEvent done = ChatEvent::finished(result.finish, result.prompt_tokens, static_cast<int>(result.tokens.size()),
                                         sequence.cached_prompt_tokens);
    done.reasoning_tokens = result.reasoning_tokens;
    done.draft_tokens = sequence.draft_tokens;
    done.accepted_draft_tokens = sequence.accepted_draft_tokens;
    // Only the caller's own stop strings are reported (not the chat format's end markers).
    const auto& stops = sequence.ticket->request_.stop;
    if (std::find(stops.begin(), stops.end(), result.stop_sequence) != stops.end())
      done.stop_sequence = result.stop_sequence;
    sequence.ticket->sink_(done);
  }
}

std::optional<int32_t> EngineService::sample(Running& sequence, LogitsRow& logits) {
  std::optional<int32_t> token;
  ChatTicket& ticket = *sequence.ticket;
  const auto now = ChatTicket::Clock::now();
  if (ticket.last_token_ == ChatTicket::Clock::time_point{})
    time_to_first_token_.observe(std::chrono::duration<double>(now - ticket.submitted_).count());
  else
    inter_token_.observe(std::chrono::duration<double>(now - ticket.last_token_).count());
  ticket.last_token_ = now;
  try {
    token = sequence.generation->step(logits);
  } catch (const std::exception& e) {
    fail_reply(sequence, /*keep_blocks=*/true, e.what());  // (the computed positions are sound)
    return std::nullopt;
  }
  if (!token) finish(sequence, true);
  return token;
}

void EngineService::on_logits(Running& sequence, LogitsRow& logits) {
  if (const auto token = sample(sequence, logits)) sequence.tokens.push_back(*token);
}

int EngineService::draft(Running& sequence, int room) {
  if (!sequence.drafter) return 0;
  const model::ModelInfo& info = model_.info();
  const GenerationResult& result = sequence.generation->result();
  // The step emits at most drafted + 1 tokens: no more guesses than the reply has room for.
  const int reply_room = sequence.generation->request().max_tokens - static_cast<int>(result.tokens.size()) - 1;
  const int limit = std::min({room, info.max_logits_per_slice - 1, reply_room,
                              info.context - static_cast<int>(sequence.tokens.size())});
  if (limit <= 0) return 0;
  std::vector<int32_t> guesses;
  try {
    guesses = sequence.drafter->propose(sequence.tokens, limit);
  } catch (const std::exception&) {  // (a drafter's failure costs this reply its guesses, never the reply)
    sequence.drafter.reset();
    return 0;
  }
  int drafted = 0;
  for (const int32_t id : guesses) {  // a guess must be a token the model reads (prompts hold image keys)
    if (drafted == limit || id < 0 || id >= info.vocab) break;
    sequence.tokens.push_back(id);
    ++drafted;
  }
  return drafted;
}

void EngineService::verify(Running& sequence, int drafted, std::span<const float> logits) {
  const std::vector<int32_t> guesses(sequence.tokens.end() - drafted, sequence.tokens.end());
  sequence.tokens.resize(sequence.tokens.size() - drafted);
  sequence.computed = static_cast<int>(sequence.tokens.size());  // the fed token; the guesses' positions wait
  sequence.draft_tokens += drafted;  // (counted before a sample can end the reply and report them)
  publish_full_blocks(sequence);
  const VerifiedGuesses verified = verify_guesses(
      guesses, logits, static_cast<size_t>(model_.info().vocab),
      [&](std::span<const float> row) {
        LogitsRow logits(row);
        return sample(sequence, logits);
      },
      [&](int32_t kept) {
        sequence.tokens.push_back(kept);
        ++sequence.computed;  // the guess's keys and values are the sampled token's
        ++sequence.accepted_draft_tokens;
        publish_full_blocks(sequence);
      });
  if (verified.next) sequence.tokens.push_back(*verified.next);
  // A hybrid's recurrent state ran over every guess: the refused ones are taken back out (a
  // reply that ended inside the block gave its slot back already, its snapshot rewound first).
  if (sequence.state_slot >= 0 && verified.kept < drafted) {
    try {
      model_.rewind_state(sequence.state_slot, sequence.computed);
    } catch (const std::exception& e) {  // (a broken invariant fails this reply, not the worker)
      fail_reply(sequence, /*keep_blocks=*/false, e.what());
      return;
    }
  }
  if (sequence.drafter) sequence.drafter->verified(drafted, verified.kept);
  std::lock_guard lock(mutex_);
  ++counters_.verify_steps;
  counters_.draft_tokens += drafted;
  counters_.accepted_draft_tokens += verified.kept;
}

std::vector<int> EngineService::prefill_shares(int budget, const std::vector<bool>& in_batch) const {
  // Water-filling: the sequences with the fewest prompt tokens left are served whole first;
  // each of the others gets an equal share of what remains. While other sequences share the
  // step, a chunk deep into a long prompt is also kept short: its attention over every
  // earlier position makes its tokens dearer the deeper it is, and the step's length is the
  // others' wait for their next token (and a new request's for its first).
  std::vector<int> shares(running_.size(), 0);
  std::vector<size_t> reading;
  int active = 0;
  for (size_t i = 0; i < running_.size(); ++i) {
    const Running& s = *running_[i];
    if (s.preempted || s.ended) continue;
    ++active;
    if (s.pending() > 1 && !in_batch[i]) reading.push_back(i);  // (decoding ones carry their guesses)
  }
  constexpr int kDepthScale = 512, kMinChunk = 32;
  auto depth_cap = [&](const Running& s) {
    if (active < 2) return budget;
    return std::max(kMinChunk, static_cast<int>(int64_t{model::kMaxBatchTokens} * kDepthScale / (kDepthScale + s.computed)));
  };
  std::stable_sort(reading.begin(), reading.end(),
                   [&](size_t a, size_t b) { return running_[a]->pending() < running_[b]->pending(); });
  int left = budget;
  for (size_t k = 0; k < reading.size(); ++k) {
    const int fair = left / static_cast<int>(reading.size() - k);
    const Running& s = *running_[reading[k]];
    const int share = std::min({s.pending(), std::max(fair, 1), depth_cap(s)});
    if (share > left) break;
    shares[reading[k]] = share;
    left -= share;
  }
  return shares;
}

void EngineService::step() {
  admit_waiting();
  // Before the pass: a request admitted now is running by the time its first token is out.
  publish_occupancy();
  if (running_.empty()) return;
  Pass pass = schedule();
  if (!pass.slots.empty()) apply(pass, run(pass));
  retire();
}

void EngineService::admit_waiting() {
  // Oldest first, while the batch has room and the cache has blocks for the whole prompt
  // (preempted sequences are at the front and go first). A request whose prefix a running
  // sibling is still computing waits for those blocks instead of computing them again
  // (sub-agents and title requests arrive together with the same long prefix).
  for (auto it = waiting_.begin(); it != waiting_.end() && static_cast<int>(running_.size()) < model::kMaxBatchSequences;) {
    Running& next = **it;
    if ((next.ticket->cancelled() && !next.started) || (!next.generation && !prepare(next))) {
      it = waiting_.erase(it);
      continue;
    }
    if (sibling_computing_prefix(next)) {
      ++it;
      continue;
    }
    if (!admit(next)) break;
    if (!next.ended) running_.push_back(std::move(*it));
    it = waiting_.erase(it);
  }
}

EngineService::Pass EngineService::schedule() {
  // One token of every decoding sequence, each followed by its drafted guesses, then prefill
  // chunks under the step's token budget, shared max-min fairly among the sequences reading
  // prompts (prefill_shares): a short prompt that arrives while a long one is read
  // completes in the next step instead of waiting for the whole long prompt. A sequence that
  // needs a block when none is left takes it from the newest sequence not yet in this batch
  // (preemption), or waits itself; guesses never take blocks from anyone.
  Pass pass;
  std::vector<bool> in_batch(running_.size(), false);
  const int pass_tokens = model_.info().max_batch_tokens;
  int budget = pass_tokens;
  // Guesses fill what a decode pass takes nearly for free (ModelInfo::draft_pass_tokens),
  // shared among the decoding sequences, and leave prompts at least half the pass.
  int decoding = 0;
  for (const auto& sequence : running_) decoding += !sequence->preempted && !sequence->ended && sequence->pending() == 1;
  int draft_room = drafting_ ? std::clamp(model_.info().draft_pass_tokens - decoding, 0, pass_tokens / 2) : 0;
  auto newest_victim = [&](const Running* asking) -> Running* {
    for (size_t i = running_.size(); i-- > 0;) {
      Running* candidate = running_[i].get();
      if (candidate != asking && !in_batch[i] && !candidate->preempted && !candidate->ended) return candidate;
    }
    return nullptr;
  };
  std::vector<int> shares;  // the prefill pass's tokens per running sequence
  for (const bool decode_pass : {true, false}) {
    if (!decode_pass) shares = prefill_shares(budget, in_batch);
    for (size_t i = 0; i < running_.size() && budget > 0; ++i) {
      Running& sequence = *running_[i];
      if (sequence.preempted || sequence.ended || in_batch[i] || (sequence.pending() == 1) != decode_pass) continue;
      if (!decode_pass && shares[i] == 0) continue;
      // Cancelled, or shutting down while still reading its prompt (a long prefill would
      // hold the shutdown for seconds): it ends now.
      if (sequence.ticket->cancelled() || (stopping_.load() && !decode_pass)) {
        sequence.generation->result().finish = FinishReason::Cancelled;
        finish(sequence, true);
        continue;
      }
      const int share = decoding > 0 ? draft_room / decoding : 0;
      int drafted = decode_pass ? draft(sequence, std::min(share, budget - 1)) : 0;
      decoding -= decode_pass;
      if (drafted > 0 && !grow(sequence, sequence.computed + 1 + drafted)) {
        sequence.tokens.resize(sequence.tokens.size() - drafted);  // no block for guesses: plain decoding
        drafted = 0;
      }
      draft_room -= drafted;
      int count = std::min(decode_pass ? sequence.pending() : shares[i], budget);
      if (!decode_pass && sequence.snapshot_at > sequence.computed)  // the chunk ends where the snapshot is taken
        count = std::min(count, sequence.snapshot_at - sequence.computed);
      bool fits = grow(sequence, sequence.computed + count);
      while (!fits) {
        Running* victim = newest_victim(&sequence);
        if (!victim) break;
        preempt(*victim);
        fits = grow(sequence, sequence.computed + count);
      }
      if (!fits) {
        preempt(sequence);
        continue;
      }
      pass.slots.push_back({&sequence, count, drafted});
      in_batch[i] = true;
      budget -= count;
    }
  }
  pass.tokens = pass_tokens - budget;

  pass.image_slices.reserve(pass.slots.size());
  pass.image_rows.reserve(pass.slots.size());
  for (const Slot& slot : pass.slots) {
    Running& s = *slot.sequence;
    const bool last = s.computed + slot.count == static_cast<int>(s.tokens.size());
    model::SequenceSlice slice{std::span(s.tokens).subspan(s.computed, slot.count), s.computed, s.blocks,
                               slot.drafted > 0 ? slot.count : last ? 1 : 0};
    slice.state_slot = s.state_slot;
    // A decode step's row: its best tokens do (a prompt's end keeps its whole row, which
    // the prompt-logits cache stores for replays under any sampling settings).
    slice.best_only = best_token_rows_ && slot.drafted == 0 && last && !s.generation->result().tokens.empty() &&
                      s.generation->best_tokens_suffice();
    if (s.computed < static_cast<int>(s.embeddings.size())) {
      // Image positions hold cache keys; the model reads the image token there, with the
      // image's features in place of its embedding.
      auto& tokens = pass.image_slices.emplace_back(slice.tokens.begin(), slice.tokens.end());
      for (int32_t& token : tokens)
        if (token & kImageKeyBit) token = s.image_token;
      slice.tokens = tokens;
      // A recomputation after preemption may run past the prompt into generated tokens.
      auto& rows = pass.image_rows.emplace_back(slot.count, nullptr);
      const int covered = std::min(slot.count, static_cast<int>(s.embeddings.size()) - s.computed);
      std::copy_n(s.embeddings.begin() + s.computed, covered, rows.begin());
      slice.embeddings = rows;
    }
    pass.batch.push_back(slice);
  }
  return pass;
}

std::span<const float> EngineService::run(Pass& pass) {
  try {
    return model_.forward(pass.batch);
  } catch (const std::exception& e) {
    // An engine failure must not take the server down: the batch's requests fail (their
    // blocks' contents are unknown, so nothing of them is kept), the worker lives.
    for (const Slot& slot : pass.slots) fail_reply(*slot.sequence, /*keep_blocks=*/false, e.what());
    pass.slots.clear();
    return {};
  }
}

void EngineService::apply(const Pass& pass, std::span<const float> logits) {
  const size_t vocab = static_cast<size_t>(model_.info().vocab);
  const auto best = pass.slots.empty() ? std::span<const model::TokenLogit>{} : model_.best_tokens();
  size_t row = 0, best_row = 0;
  uint64_t whole_reads = 0;
  std::vector<int> first_positions;  // each slot's first position (what a hidden-state reader is given)
  for (const Slot& slot : pass.slots) first_positions.push_back(slot.sequence->computed);
  for (size_t i = 0; i < pass.slots.size(); ++i) {
    const Slot& slot = pass.slots[i];
    Running& s = *slot.sequence;
    if (pass.batch[i].best_only) {  // one row: a decode step (see schedule)
      s.computed += slot.count;
      publish_full_blocks(s);
      LogitsRow row_of_best(best.subspan(best_row * model::kBestTokens, model::kBestTokens),
                            [this, &whole_reads, index = static_cast<int>(best_row)] {
                              ++whole_reads;
                              return model_.whole_row(index);
                            });
      ++best_row;
      on_logits(s, row_of_best);
      continue;
    }
    const auto rows = logits.subspan(vocab * row, vocab * pass.batch[i].logits);
    row += pass.batch[i].logits;
    if (slot.drafted > 0) {
      verify(s, slot.drafted, rows);
      continue;
    }
    s.computed += slot.count;
    publish_full_blocks(s);
    if (s.computed == s.snapshot_at) {
      // (a grid point inside the prompt is an interior snapshot: replaced before the others)
      save_snapshot(s, s.snapshot_at < static_cast<int>(s.tokens.size()) - kSnapshotBeforePromptEnd);
      s.snapshot_at = next_snapshot_point(s);
    }
    if (rows.empty()) continue;
    // The prompt's end (a hybrid model keeps none: a replay resumes from a snapshot before it)
    if (s.generation->result().tokens.empty() && !s.generation->done() && states_.total() == 0)
      prompt_logits_.store(s.tokens, rows);
    LogitsRow whole(rows);
    on_logits(s, whole);
  }
  hand_on_hidden_states(pass, first_positions);
  std::lock_guard lock(mutex_);
  counters_.batch_size = static_cast<int>(pass.batch.size());
  counters_.batch_tokens = pass.tokens;
  ++counters_.steps;
  counters_.best_token_rows += best_row;
  counters_.whole_rows_read += whole_reads;
}

void EngineService::hand_on_hidden_states(const Pass& pass, std::span<const int> first_positions) {
  const auto taps = model_.hidden_taps();
  size_t tokens = 0;
  for (const Slot& slot : pass.slots) tokens += static_cast<size_t>(slot.count);
  if (taps.empty() || tokens == 0) return;
  const size_t row_floats = taps.size() / tokens;
  size_t row = 0;  // the batch's rows: each slot's tokens in batch order
  for (size_t i = 0; i < pass.slots.size(); ++i) {
    Running& s = *pass.slots[i].sequence;
    const int first = first_positions[i];
    const int committed = s.computed - first;  // (a verify block's refused guesses are not)
    if (s.drafter && !s.ended && committed > 0) {
      try {
        s.drafter->observe_hidden(first, taps.subspan(row * row_floats, committed * row_floats));
        keep_draft_states(s);
      } catch (const std::exception&) {  // (a draft's failure costs this reply its guesses, never the reply)
        s.drafter.reset();
      }
    }
    row += static_cast<size_t>(pass.slots[i].count);
  }
}

void EngineService::keep_draft_states(Running& sequence) {
  for (; sequence.draft_published < sequence.published; ++sequence.draft_published) {
    const int i = sequence.draft_published;
    auto state = sequence.drafter->export_state(i * cache::kBlockTokens, cache::kBlockTokens);
    if (!state.empty()) draft_states_.put(sequence.keys[i + 1], std::move(state));
  }
}

void EngineService::restore_draft_states(Running& sequence) {
  const int reach = sequence.drafter->state_positions();
  if (reach <= 0 || sequence.published == 0) return;
  const int first = std::max(0, sequence.published - (reach + cache::kBlockTokens - 1) / cache::kBlockTokens);
  for (int i = first; i < sequence.published; ++i)
    if (const auto* state = draft_states_.find(sequence.keys[i + 1]))  // (one missing: the rest still help)
      sequence.drafter->import_state(i * cache::kBlockTokens, *state);
}

void EngineService::retire() {
  // Preempted sequences go back to the front of the queue, oldest first; ended ones leave.
  std::vector<std::unique_ptr<Running>> still_running, paused;
  for (auto& sequence : running_) {
    if (sequence->ended) continue;
    (sequence->preempted ? paused : still_running).push_back(std::move(sequence));
  }
  running_ = std::move(still_running);
  for (auto it = paused.rbegin(); it != paused.rend(); ++it) waiting_.push_front(std::move(*it));
}

}  // namespace splash::engine

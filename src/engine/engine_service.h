#pragma once
// Runs chat requests against one loaded model on a worker thread with continuous batching:
// every step runs the running sequences' next tokens together in one forward pass, and new
// prompts are read in chunks under a per-step token budget between those decodes, so
// streams keep flowing while a long prompt is read. KV memory is the paged cache
// (cache/block_manager.h): a request starts from the longest cached prefix, siblings share
// blocks, and when blocks run out the newest sequence is preempted (its blocks stay cached,
// it resumes by recomputing what was evicted). Callers get their events through a callback
// on the worker thread and can cancel at any time; the service keeps the counters /status
// reports.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string_view>
#include <thread>
#include <vector>

#include "cache/block_manager.h"
#include "cache/state_slots.h"
#include "cache/state_snapshots.h"
#include "chat/chat_format.h"
#include "engine/chat_request.h"
#include "engine/drafter.h"
#include "engine/image_feature_cache.h"
#include "engine/image_prompt.h"
#include "engine/latency_histogram.h"
#include "engine/draft_state_store.h"
#include "engine/prompt_logits_cache.h"
#include "grammar/token_trie.h"
#include "vision/image_decode.h"
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
  using Clock = std::chrono::steady_clock;
  ChatRequest request_;
  ChatEventSink sink_;
  std::vector<EncodedImage> images_;  // the request's images, encoded at submission
  std::atomic<bool> cancelled_{false};
  // Latency bookkeeping, engine thread only: when the request arrived, when its last token
  // was sampled (none yet: the epoch).
  Clock::time_point submitted_ = Clock::now();
  Clock::time_point last_token_{};
};

// Token latencies as requests see them: from submission to the first sampled token, and
// between consecutive sampled tokens of one request.
struct LatencySnapshots {
  LatencyHistogram::Snapshot time_to_first_token, inter_token;
};

struct EngineCounters {
  int requests_running = 0;
  int requests_queued = 0;
  int batch_size = 0;                   // sequences in the last forward pass
  int batch_tokens = 0;                 // tokens in the last forward pass
  uint64_t steps = 0;                   // forward passes
  uint64_t preemptions = 0;             // sequences paused to free blocks (resumed later)
  cache::BlockCounters blocks;          // the paged KV cache
  uint64_t requests_completed = 0;
  uint64_t prompt_tokens = 0;
  uint64_t generated_tokens = 0;
  uint64_t cache_hits = 0;              // requests that reused part of the cached sequence
  uint64_t reused_prompt_tokens = 0;    // prompt tokens taken from the cache, not computed
  uint64_t replays_from_logits = 0;     // exact replays whose first token needed no forward pass
  // Speculative decoding: decode steps that verified drafted tokens, the drafted tokens, and
  // those the replies kept (each kept token is one the sampler produced from the verified
  // logits; the others cost compute, never output).
  uint64_t verify_steps = 0;
  uint64_t draft_tokens = 0;
  uint64_t accepted_draft_tokens = 0;
  // Decode steps sampled from their rows' best tokens (SequenceSlice::best_only), and of
  // those, the ones whose best tokens could not decide (the whole row was read back).
  uint64_t best_token_rows = 0;
  uint64_t whole_rows_read = 0;
  // A hybrid model's recurrent-state snapshots (cache::StateSnapshots): kept, saved, and
  // the requests that resumed from one (also counted in cache_hits).
  cache::SnapshotCounters snapshots;
  size_t snapshot_bytes = 0;  // of each
};

// Where a hybrid model's sequence saves its state before its prompt's end: this many tokens
// before it, so that the reply's header (ChatML's `<|im_start|>assistant\n`, Qwen3.5's
// `<think>\n` after it), which the next turn's prompt renders differently or not at all, lies
// after the snapshot.
inline constexpr int kSnapshotBeforePromptEnd = 8;
// And inside a longer prompt, at this many tokens and at each doubling of it (4K, 8K, 16K,
// ...: EngineOptions::snapshot_interval): a later prompt that shares only the beginning (an
// edited earlier message, the same long system prompt and tools) resumes from the deepest of
// them instead of from the start, at most half the shared part back, and a 128K-token prompt
// takes five snapshots, not thirty (a state is tens of MiB).
inline constexpr int kSnapshotInterval = 4096;
// And at message boundaries (EngineService::message_snapshot_points) from this many tokens in:
// a shorter shared beginning costs less to recompute than a snapshot's room.
inline constexpr int kMessageSnapshotLeast = 256;

// How the engine decodes.
struct EngineOptions {
  DraftMode draft = DraftMode::Auto;
  // A drafter of the caller's own in place of the one `draft` names (tests: adversarial
  // drafts); null: by `draft`.
  DrafterFactory drafter;
  // Decoding sequences ask the model for their rows' best tokens instead of whole rows
  // (SequenceSlice::best_only); unset: where the model finds them on its device
  // (ModelInfo::best_tokens_on_device). Either way the tokens are the same.
  std::optional<bool> best_token_rows;
  // Where a hybrid model's snapshots inside a prompt start (then at each doubling; 0: only
  // before the prompt's end and at the reply's end, none at message boundaries either); a
  // multiple of the KV block.
  int snapshot_interval = kSnapshotInterval;
  // Bytes of drafter state kept beside the prefix cache (a block draft's context of cached
  // blocks: DraftStateStore).
  size_t draft_state_bytes = kDraftStateBytes;
};

// How requests' images reach the model: a vision encoder (null: the model takes no images)
// and the bound on an image's decoded size.
struct ImageInput {
  vision::VisionEncoder* encoder = nullptr;
  int64_t max_pixels = vision::kDefaultMaxImagePixels;
};

class EngineService {
 public:
  // The model's KV pool (info().kv_blocks) becomes the paged cache. With an image encoder,
  // the vocabulary must have the image tokens (throws splash::Error otherwise).
  EngineService(model::Model& model, const tokenizer::Tokenizer& tokenizer, const chat::ChatFormat& chat,
                ImageInput images = {}, EngineOptions options = {});
  ~EngineService();  // stops the worker; queued requests fail, the running one finishes early

  // Queues a request; its events arrive through sink. The ticket cancels it. Images are
  // decoded and encoded here, on the caller's thread (seconds of work that would otherwise
  // stall every running stream); a bad image fails the request before it is queued.
  std::shared_ptr<ChatTicket> submit(ChatRequest request, ChatEventSink sink);
  // The same with the caller's own ticket, which it may cancel from another thread while
  // this one still encodes the request's images (stopped between views).
  void submit(const std::shared_ptr<ChatTicket>& ticket, ChatRequest request, ChatEventSink sink);
  // Ends every request soon (queued ones fail with a shutdown message, the running one
  // finishes at its next token) and refuses new ones.
  void shut_down();

  // The prompt tokens of a conversation (chat format + tokenizer + BOS rule), each image
  // expanded to the tokens the model reads it as.
  std::vector<int32_t> encode_chat(std::span<const chat::ChatMessage> messages,
                                   std::span<const chat::ToolSpec> tools = {}) const;

  // How the model writes tool calls (its chat format's): requests compiled ahead of submit()
  // (a server's HTTP thread) set ChatRequest::tool_syntax to it.
  chat::ToolCallSyntax tool_call_syntax() const { return chat_.tool_call_syntax(); }

  EngineCounters counters() const;
  LatencySnapshots latencies() const { return {time_to_first_token_.snapshot(), inter_token_.snapshot()}; }
  ImageFeatureCacheCounters image_cache_counters() const { return image_features_.counters(); }
  bool accepting() const { return !stopping_.load(); }

 private:
  struct Running;
  struct Slot;
  struct Pass;
  void worker_loop();
  void take_new_requests(std::deque<std::shared_ptr<ChatTicket>>& arrived);
  bool admit(Running& sequence);
  bool sibling_computing_prefix(const Running& waiting) const;
  bool prepare(Running& sequence);
  // One scheduler step: schedule (admission, then the pass's slices: every decoding
  // sequence's next token with its drafts, prompt chunks under the token budget), run (the
  // forward pass), apply (each slice's logits: sampling, verifying drafts, publishing full
  // blocks), retire (preempted sequences back to the queue, ended ones out).
  void step();
  void admit_waiting();
  void publish_occupancy();  // running, queued and block counts into counters_ (/status)
  Pass schedule();
  std::span<const float> run(Pass& pass);
  void apply(const Pass& pass, std::span<const float> logits);
  void retire();
  // Appends up to `room` drafted tokens after a decoding sequence's sampled one; how many.
  int draft(Running& sequence, int room);
  // Takes a verify block's logits: samples position after position while the sampled token
  // is the drafted one, keeps those, and rolls the computed positions back past the rest.
  void verify(Running& sequence, int drafted, std::span<const float> logits);
  // A block drafter's conditioning: each slot's committed positions' tapped hidden states.
  void hand_on_hidden_states(const Pass& pass, std::span<const int> first_positions);
  // A drafter's state of the sequence's full blocks, kept beside the prefix cache, and taken
  // back by a sequence admitted on a cached prefix (DraftStateStore).
  void keep_draft_states(Running& sequence);
  void restore_draft_states(Running& sequence);
  // Prompt tokens each running sequence reads in this step (max-min fair split of budget).
  std::vector<int> prefill_shares(int budget, const std::vector<bool>& in_batch) const;
  bool grow(Running& sequence, int positions);
  void preempt(Running& sequence);
  void finish(Running& sequence, bool keep_blocks);
  // Ends a reply that went wrong (the model's pass, its sampler, taking guesses back): the
  // client hears why in its protocol's error shape; its blocks are published only when
  // `keep_blocks` (their contents known sound), the worker goes on.
  void fail_reply(Running& sequence, bool keep_blocks, std::string_view why);
  void publish_full_blocks(Running& sequence);
  // A hybrid model's state after the sequence's computed tokens into a snapshot (unless one
  // holds it already).
  void save_snapshot(Running& sequence, bool interior = false);
  int next_snapshot_point(Running& sequence) const;
  // Where the sequence's prompt has message boundaries worth a snapshot (ascending): the end
  // of its first message (a system prompt and tools that other conversations share) and the
  // end of its last user message (a thinking model's template drops the reasoning of the
  // replies after it once the next user message comes, so the next turn's prompt differs
  // from there on).
  std::vector<int> message_snapshot_points(std::span<const int32_t> tokens) const;
  void on_logits(Running& sequence, LogitsRow& logits);
  // The sequence's next token from `logits` (streamed by its generation), or nothing when
  // the generation ended (the sequence is then finished).
  std::optional<int32_t> sample(Running& sequence, LogitsRow& logits);
  std::string encode_images(ChatTicket& ticket);

  model::Model& model_;
  const tokenizer::Tokenizer& tokenizer_;
  const chat::ChatFormat& chat_;
  // The chat format's message-opening token (-1: none).
  int32_t message_start_token_ = -1;
  ImageInput images_;
  EngineOptions options_;
  bool drafting_ = false;  // the model verifies drafts and options_ asks for them
  bool best_token_rows_ = false;  // decoding sequences ask for their rows' best tokens
  ImageTokenIds image_tokens_;  // when images_.encoder is set
  ImageFeatureCache image_features_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::shared_ptr<ChatTicket>> queue_;
  std::atomic<bool> stopping_{false};
  EngineCounters counters_;
  LatencyHistogram time_to_first_token_{{0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120}};
  LatencyHistogram inter_token_{{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5}};
  std::shared_ptr<const grammar::TokenTrie> token_trie_;  // for constrained decoding
  // Worker thread only:
  cache::BlockManager blocks_;
  // A hybrid model's recurrent-state slots, and the snapshots a sequence resumes from: such
  // a sequence reuses a cached prefix only up to a snapshot's end (a state goes back only
  // inside its last verify block), and a preempted one starts again from its deepest snapshot or its first token.
  cache::StateSlots states_;
  cache::StateSnapshots snapshots_;
  void release_state(Running& sequence);
  std::deque<std::unique_ptr<Running>> waiting_;   // admitted in order; preempted ones first
  std::vector<std::unique_ptr<Running>> running_;  // in admission order
  PromptLogitsCache prompt_logits_;
  DraftStateStore draft_states_{options_.draft_state_bytes};
  uint64_t admissions_ = 0;
  std::thread worker_;
};

}  // namespace splash::engine

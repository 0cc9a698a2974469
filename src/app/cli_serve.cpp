// `splash serve`: load the model, print the summary and `Ready <url>`, serve the HTTP API
// until SIGINT/SIGTERM, then stop cleanly (streams end with a final event; exit code 0).
#include <fmt/format.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <thread>

#include "app/commands.h"
#include "api/response_store.h"
#include "app/model_loading.h"
#include "engine/engine_service.h"
#include "server/http_server.h"

namespace splash::app {
namespace {

struct ServeFlags {
  ModelFlags model;
  server::ServerOptions server;
  bool no_webui = false;
  int64_t seed = -1;  // -1: none (CLI11 has no optional<uint64_t>)
  int reasoning_budget = -2;  // -2: the template's default
  engine::DraftMode draft = engine::DraftMode::Auto;
  int snapshot_interval = engine::kSnapshotInterval;
  std::string snapshot_memory;  // "2G", ...; empty: the memory plan's share
};

// How long shutdown waits, once every reply has ended, for connections still open.
constexpr std::chrono::seconds kShutdownGrace{2};

// SIGINT/SIGTERM are blocked in every thread and taken by one thread with sigwait, so a
// signal never interrupts a kernel or a socket write half-way; the first one starts a
// clean shutdown, a second one exits at once.
class SignalWatcher {
 public:
  SignalWatcher() {
    sigemptyset(&set_);
    sigaddset(&set_, SIGINT);
    sigaddset(&set_, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set_, nullptr);  // inherited by every thread created later
  }

  template <typename Fn>
  void start(Fn on_first_signal) {
    thread_ = std::thread([this, on_first_signal] {
      int signal = 0;
      sigwait(&set_, &signal);
      on_first_signal();
      sigwait(&set_, &signal);
      std::fprintf(stderr, "splash: second signal, exiting now\n");
      std::_Exit(130);
    });
    thread_.detach();
  }

 private:
  sigset_t set_;
  std::thread thread_;
};

nlohmann::json caches_json(const engine::MemoryPlan& plan) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& cache : plan.caches)
    out.push_back({{"name", cache.name}, {"budget_bytes", cache.bytes}, {"in_plan", plan.caches_in_budget}});
  return out;
}

void serve(ServeFlags flags) {
  SignalWatcher signals;  // before any thread (model loading starts the compute pool)
  if (flags.server.api_key.empty())
    if (const char* key = std::getenv("SPLASH_API_KEY"); key && *key) flags.server.api_key = key;
  flags.server.webui = !flags.no_webui;
  if (flags.seed >= 0) flags.server.default_seed = static_cast<uint64_t>(flags.seed);
  if (flags.reasoning_budget >= -1)
    flags.server.default_reasoning = engine::ReasoningSettings{flags.reasoning_budget != 0, flags.reasoning_budget == 0 ? -1 : flags.reasoning_budget};

  std::atomic<server::HttpServer*> running{nullptr};
  std::atomic<engine::EngineService*> running_engine{nullptr};
  static std::atomic<bool> stopped{false};  // static: read by the signal thread after serve() returns
  signals.start([&running, &running_engine] {
    if (auto* http = running.load()) {
      std::fprintf(stderr, "splash: stopping\n");
      // The engine first: the running generation ends at its next token, so its stream
      // closes with a final event, queued requests get a 503; then the listener stops.
      running_engine.load()->shut_down();
      http->drain_and_stop(std::chrono::seconds(3));
      // The listener waits for every connection's thread, and one whose client sends its
      // headers a byte at a time holds it for as long as the client likes. Every reply has
      // ended by now, so after a grace period the process ends without them.
      const auto deadline = std::chrono::steady_clock::now() + kShutdownGrace;
      while (!stopped.load() && std::chrono::steady_clock::now() < deadline)
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      if (!stopped.load()) {
        std::fprintf(stderr, "splash: connections still open %lld s after the replies ended (clients still sending); exiting\n",
                     static_cast<long long>(kShutdownGrace.count()));
        std::fflush(stderr);
        std::_Exit(0);
      }
    } else {
      std::_Exit(130);  // still loading: nothing to finish
    }
  });

  server::check_can_listen(flags.server.host, flags.server.port);  // fail fast, before loading
  const auto budget = flags.model.max_memory_bytes();  // checked before any download
  model::LoadOptions load = flags.model.load;
  load.kv_blocks = -1;  // the whole planned KV pool, shared by the scheduler's sequences
  load.drafts = flags.draft != engine::DraftMode::None;
  if (!flags.snapshot_memory.empty()) {
    load.snapshot_memory = flags.snapshot_memory == "0" ? std::optional<size_t>(0)  // (no size parses as 0)
                                                        : engine::parse_memory_size(flags.snapshot_memory);
    if (!load.snapshot_memory)
      fail("--snapshot-memory expects a size such as 2G, 512M or 0, got '{}'", flags.snapshot_memory);
  }
  // The server's own caches: stored Responses, and request bodies while they are read and
  // parsed (body_budget.h).
  const std::vector<engine::CacheBudget> server_caches = {
      {"stored responses", api::ResponseStore::kMaxBytes, "Responses API, store: true; least recently used out"},
      {"request bodies", flags.server.body_budget_bytes, "bodies and their parsed JSON at once; more get a 503"}};
  const auto path = resolve_model_path(flags.model.model);
  const auto draft = open_model_draft(flags.model.draft_model, path, flags.draft, load);
  auto loaded = load_model(path, load, false, budget, flags.model.mmproj, server_caches, draft.get());
  if (draft) draft->attach(*loaded->model, loaded->file);
  print_summary(*loaded, stderr);
  const auto& info = loaded->model->info();
  server::ServedModelInfo served;
  served.id = std::filesystem::path(loaded->path).stem().string();
  served.vocab = info.vocab;
  served.context = info.context;
  served.details = {{"architecture", info.architecture},
                    {"model_name", info.name},
                    {"model_path", loaded->path},
                    {"device", info.isa == "cuda" ? "cuda" : "cpu"},
                    {"device_name", info.device},
                    {"kernels", {{"isa", info.isa}, {"shapes", info.kernel_shapes}, {"threads", info.threads}}},
                    {"memory",
                     {{"budget_bytes", loaded->plan.budget_bytes},
                      {"budget_source", loaded->plan.budget_source},
                      {"weights_bytes", loaded->plan.weight_bytes},
                      {"mapped_weights_bytes", loaded->plan.mapped_bytes},
                      {"activations_bytes", loaded->plan.activation_bytes},
                      {"runtime_bytes", loaded->plan.runtime_bytes},
                      {"caches", caches_json(loaded->plan)},
                      {"kv_cache_bytes", loaded->plan.kv_bytes},
                      {"kv_cache_type", loaded->plan.kv_type},
                      {"kv_blocks", loaded->plan.kv_blocks},
                      {"kv_block_tokens", engine::kBlockTokens},
                      {"max_context_tokens", loaded->plan.max_context},
                      {"max_sequences_at_full_context", loaded->plan.max_sequences},
                      {"max_batch_sequences", model::kMaxBatchSequences},
                      {"max_batch_tokens", loaded->model->info().max_batch_tokens}}}};
  if (loaded->vision) {
    const auto& v = loaded->vision->info();
    served.details["vision"] = {{"projector", v.projector},       {"mmproj_path", loaded->vision_path},
                                {"image_size", v.image_size},     {"tokens_per_view", v.tokens_per_view},
                                {"weights_bytes", v.weight_bytes}, {"max_image_pixels", flags.model.max_image_pixels}};
  }

  const bool verifies = loaded->model->info().max_logits_per_slice > 1 && loaded->model->info().draft_pass_tokens > 1;
  served.details["speculative_decoding"] = {
      {"draft", engine::draft_mode_name(flags.draft)},
      {"drafter", flags.draft == engine::DraftMode::None || !verifies ? std::string("none")
                  : draft ? fmt::format("{} after lookup", draft->kind())
                          : std::string("lookup")},
      {"max_draft_tokens", verifies ? loaded->model->info().max_logits_per_slice - 1 : 0}};
  engine::EngineService engine(*loaded->model, loaded->tokenizer, *loaded->chat,
                               {loaded->vision.get(), flags.model.max_image_pixels},
                               {flags.draft, draft ? engine::DrafterFactory([draft] { return make_drafter(engine::DraftMode::Model, draft); })
                                                   : engine::DrafterFactory{},
                                {}, flags.snapshot_interval});
  server::HttpServer http(flags.server, engine, loaded->tokenizer, *loaded->chat, served);
  http.bind();
  running_engine.store(&engine);
  running.store(&http);
  const std::string host = flags.server.host.find(':') != std::string::npos ? "[" + flags.server.host + "]" : flags.server.host;
  if (!flags.server.api_key.empty()) fmt::print(stderr, "auth         API key required on /v1/* and other API routes\n");
  if (flags.server.default_seed)
    fmt::print(stderr, "sampling     seed {} for every request that names none\n", *flags.server.default_seed);
  if (const auto& r = flags.server.default_reasoning; r && loaded->chat->thinks())
    fmt::print(stderr, "reasoning    {} for every request that sets none\n",
               !r->enabled ? std::string("off") : r->budget_tokens < 0 ? std::string("on, no limit")
                                                                       : fmt::format("at most {} thinking tokens", r->budget_tokens));
  fmt::print("Ready http://{}:{}\n", host, http.bound_port());
  std::fflush(stdout);
  http.run();
  stopped.store(true);
  running.store(nullptr);
  engine.shut_down();
  fmt::print(stderr, "splash: stopped\n");
}

}  // namespace

void add_serve_command(CLI::App& app) {
  auto flags = std::make_shared<ServeFlags>();
  auto* command = app.add_subcommand("serve", "Serve the OpenAI-compatible HTTP API and the chat page");
  add_model_flags(*command, flags->model);
  add_draft_flag(*command, flags->draft, &flags->model.draft_model);
  add_vision_flags(*command, flags->model);
  command->add_option("--host", flags->server.host, "Address to listen on")->capture_default_str();
  command->add_option("--port", flags->server.port, "Port to listen on (0: any free port)")
      ->check(CLI::Range(0, 65535))
      ->capture_default_str();
  command->add_option("--api-key", flags->server.api_key, "Require this key on API routes (default: $SPLASH_API_KEY)");
  command->add_option("--allowed-host", flags->server.allowed_hosts,
                      "Also accept this Host header (repeatable; localhost, 127.0.0.1, [::1] always are)");
  command->add_flag("--no-webui", flags->no_webui, "Do not serve the chat page at /");
  command->add_option("--sse-keep-alive", flags->server.keep_alive_seconds,
                      "Seconds a stream may stay silent (a long prompt being read) before a keep-alive is sent")
      ->check(CLI::Range(1, 3600))
      ->capture_default_str();
  command->add_option("--http-threads", flags->server.http_threads,
                      "Connections served at once (each stream and idle keep-alive holds one); when all are "
                      "taken, the one idle or sending its request longest is dropped for a newcomer")
      ->check(CLI::Range(4, 4096))
      ->capture_default_str();
  command->add_option("--seed", flags->seed,
                      "Sampling seed of every request that names none, so a request alone on the server always "
                      "gets the same reply (default: a random seed each)")
      ->check(CLI::NonNegativeNumber);
  command->add_option("--reasoning-budget", flags->reasoning_budget,
                      "A thinking model's thinking tokens for requests that set none: 0 switches thinking off, -1 "
                      "sets no limit (default: the chat template's own, e.g. Qwen3 thinks without a limit)")
      ->check(CLI::Range(-1, 1 << 30));
  command->add_option("--snapshot-interval", flags->snapshot_interval,
                      "Hybrid models (Qwen3.5): recurrent-state snapshots inside a long prompt at this many tokens "
                      "and each doubling of it, and where the system message and the last user message end, so a "
                      "later prompt sharing only its beginning resumes from the deepest (0: only before each prompt's "
                      "end and at each reply's end; else a multiple of 16, at least 64)")
      ->check([](const std::string& text) -> std::string {
        const long value = std::strtol(text.c_str(), nullptr, 10);
        return value == 0 || (value >= 64 && value % 16 == 0 && value <= (1 << 30))
                   ? ""
                   : "a snapshot interval is 0 or a multiple of 16 from 64 on";
      })
      ->default_str(std::to_string(engine::kSnapshotInterval));
  command->add_option("--snapshot-memory", flags->snapshot_memory,
                      "Hybrid models (Qwen3.5, Qwen3-Next): memory for recurrent-state snapshots, each one "
                      "sequence's whole state (61 MiB for Qwen3.5-35B-A3B), so that many conversations' next turns "
                      "resume where they left off, least recently used out; 0 keeps none (default: two a "
                      "sequence, within a quarter of what one full context's KV cache leaves)");
  command->callback([flags] { serve(*flags); });
}

}  // namespace splash::app

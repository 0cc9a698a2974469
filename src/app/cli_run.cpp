// `splash run "prompt"`: one chat turn with the model, the answer streamed to stdout.
#include <fmt/format.h>

#include <cstdio>
#include <memory>

#include "app/commands.h"
#include "model/sequence.h"
#include "app/model_loading.h"
#include "engine/generator.h"

namespace splash::app {
namespace {

struct RunFlags {
  ModelFlags model;
  SamplingFlags sampling;
  std::string system;
  std::string prompt;
  std::vector<std::string> stop;
  int max_tokens = 512;
  bool ignore_eos = false;
  bool quiet = false;
  engine::DraftMode draft = engine::DraftMode::Auto;
};

void run(const RunFlags& flags) {
  const auto params = sampling_params(flags.sampling);
  const auto budget = flags.model.max_memory_bytes();  // checked before any download
  model::LoadOptions load = flags.model.load;
  load.drafts = flags.draft != engine::DraftMode::None;
  const auto path = resolve_model_path(flags.model.model);
  const auto draft = open_model_draft(flags.model.draft_model, path, flags.draft, load);
  auto loaded = load_model(path, load, false, budget, {}, {}, draft.get());
  if (draft) draft->attach(*loaded->model, loaded->file);
  if (!flags.quiet) print_summary(*loaded, stderr);

  std::vector<chat::ChatMessage> messages;
  if (!flags.system.empty()) messages.push_back({"system", flags.system});
  messages.push_back({"user", flags.prompt});
  engine::GenerationRequest request;
  request.prompt = encode_chat(*loaded, messages);
  request.sampling = params;
  request.max_tokens = flags.max_tokens;
  request.stop = flags.stop;
  request.ignore_end_of_generation = flags.ignore_eos;

  model::Sequence sequence(*loaded->model);
  const auto drafter = make_drafter(flags.draft, draft);
  engine::DecodeStats stats;
  const auto print = [](const engine::GenerationPiece& piece) {
    std::fwrite(piece.text.data(), 1, piece.text.size(), stdout);
    std::fflush(stdout);
    return true;
  };
  // A template whose reply prompt opens the think block (Qwen3.5): the reply printed starts
  // inside it, so the opening is shown too.
  if (loaded->chat->thinks() && loaded->chat->reply_prompt_opens_thinking()) std::fputs("<think>\n", stdout);
  const auto result = engine::generate(sequence, loaded->tokenizer, request, print, nullptr, 0, drafter.get(), &stats);
  std::fputc('\n', stdout);
  if (!flags.quiet) {
    const int generated = static_cast<int>(result.tokens.size());
    fmt::print(stderr, "\nprompt {} tokens in {:.2f} s ({:.1f} tok/s); generated {} tokens in {:.2f} s ({:.1f} tok/s); "
               "finish: {}; seed {}\n",
               result.prompt_tokens, result.prefill_seconds, result.prompt_tokens / std::max(result.prefill_seconds, 1e-9),
               generated, result.decode_seconds, generated / std::max(result.decode_seconds, 1e-9),
               engine::finish_reason_name(result.finish), result.seed);
    if (stats.verify_steps > 0)
      fmt::print(stderr, "drafts  {} of {} guessed tokens kept over {} steps that verified guesses\n",
                 stats.accepted_draft_tokens, stats.draft_tokens, stats.verify_steps);
  }
}

}  // namespace

void add_run_command(CLI::App& app) {
  auto flags = std::make_shared<RunFlags>();
  auto* command = app.add_subcommand("run", "Answer one prompt, streaming the reply to stdout");
  add_model_flags(*command, flags->model);
  add_sampling_flags(*command, flags->sampling);
  command->add_option("-s,--system", flags->system, "System prompt");
  command->add_option("-n,--max-tokens", flags->max_tokens, "Most tokens to generate")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  command->add_option("--stop", flags->stop, "Stop string (repeatable); not printed");
  command->add_flag("--ignore-eos", flags->ignore_eos, "Keep generating past end-of-generation tokens");
  command->add_flag("-q,--quiet", flags->quiet, "Print only the answer");
  add_draft_flag(*command, flags->draft, &flags->model.draft_model);
  command->add_option("prompt", flags->prompt, "The user message")->required();
  command->callback([flags] { run(*flags); });
}

}  // namespace splash::app

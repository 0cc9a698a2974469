#pragma once
// Each subcommand registers its flags and its action on the CLI11 app (one file each).
#include <CLI/CLI.hpp>

#include <memory>
#include <optional>
#include <string_view>
#include <vector>
#include <string>

#include "engine/drafter.h"
#include "engine/sampler.h"
#include "model/model_draft.h"
#include "model/model.h"
#include "vision/image_decode.h"

namespace splash::app {

void add_run_command(CLI::App& app);
void add_tokenize_command(CLI::App& app);
void add_bench_command(CLI::App& app);
void add_eval_command(CLI::App& app);
void add_draft_data_command(CLI::App& app);  // a block draft's training data
void add_pull_command(CLI::App& app);
void add_pack_command(CLI::App& app);
void add_serve_command(CLI::App& app);
void add_launch_commands(CLI::App& app);  // claude, codex, opencode, hermes, aider
// `splash claude ... -- ARGS`: the arguments after "--" are the agent's, whatever they look
// like; main() takes them out before parsing (CLI11 would give them to the top level).
bool is_launch_command(std::string_view name);
std::vector<std::string>& launch_passthrough();

// A command that ran another program ends with that program's exit status (main returns it).
struct ExitCode {
  int code;
};

// Flags shared by the subcommands that load a model.
struct ModelFlags {
  std::string model;
  model::LoadOptions load;
  std::string max_memory;  // "8G", "512M", ...; empty: what the machine can give
  std::string mmproj;      // the vision encoder's GGUF (SmolVLM's mmproj file); empty: none
  int64_t max_image_pixels = vision::kDefaultMaxImagePixels;
  std::string draft_model;  // --draft-model: a block draft (dflash GGUF); empty: none
  std::optional<size_t> max_memory_bytes() const;  // throws splash::Error if malformed
};
void add_model_flags(CLI::App& command, ModelFlags& flags);
// --mmproj and --max-image-pixels (serve, and eval for the reference tests).
void add_vision_flags(CLI::App& command, ModelFlags& flags);

// --draft auto|lookup|model|none: which guesses speculative decoding verifies (serve, run,
// bench, eval), and with draft_model --draft-model FILE, a block draft. The reply is the same
// whichever: `none` is for comparing and checking.
void add_draft_flag(CLI::App& command, engine::DraftMode& mode, std::string* draft_model = nullptr);
// The drafter a mode gives one sequence (null for none): with the model's draft (a block draft
// or its MTP block: open_model_draft) and auto or model, the model drafter.
std::unique_ptr<engine::Drafter> make_drafter(engine::DraftMode mode,
                                              const std::shared_ptr<model::ModelDraft>& draft = nullptr);

// Sampling flags shared by run (and later serve's defaults).
struct SamplingFlags {
  engine::SamplingParams params;
  std::vector<std::string> logit_bias;  // "TOKEN=BIAS"
  int64_t seed = -1;
};
void add_sampling_flags(CLI::App& command, SamplingFlags& flags);
// Completes params from the raw flags; throws splash::Error on malformed values.
engine::SamplingParams sampling_params(const SamplingFlags& flags);

}  // namespace splash::app

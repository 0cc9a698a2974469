// splash: a local inference engine for coding agents. This file wires the subcommands and
// turns every error into one line on stderr and a non-zero exit.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <exception>
#include <string_view>
#include <vector>

#include "app/commands.h"
#include "common/error.h"
#include "engine/memory_plan.h"

namespace splash::app {

void add_model_flags(CLI::App& command, ModelFlags& flags) {
  command.add_option("-m,--model", flags.model,
                     "GGUF model file, or a model to fetch by name (`splash models` lists them; default: "
                     "qwen2.5-coder-1.5b, Qwen2.5-Coder-1.5B-Instruct, fetched on first use)");
  command.add_option("-c,--max-context", flags.load.max_context, "Largest context in tokens (default: the model's)")
      ->check(CLI::Range(16, 1 << 20));
  command.add_option("-t,--threads", flags.load.threads, "Threads (default: all cores)")->check(CLI::Range(1, 1024));
  command.add_option("--max-memory", flags.max_memory,
                     "Memory budget, e.g. 8G or 512M (default: available memory less a reserve)");
  command
      .add_option_function<std::string>(
          "--kv-cache-type",
          [&flags](const std::string& type) {
            flags.load.kv_type = type == "f16" ? model::KvType::F16 : type == "f32" ? model::KvType::F32 : model::KvType::Q8;
          },
          "KV cache precision: q8 (8-bit with a scale per position, the default), f16, or f32 (exact, for checks "
          "against a float reference)")
      ->check(CLI::IsMember({"q8", "f16", "f32"}))
      ->default_str("q8");
  flags.load.device = model::Device::Auto;
  command
      .add_option_function<std::string>(
          "--device",
          [&flags](const std::string& device) {
            flags.load.device = device == "cpu" ? model::Device::Cpu : device == "cuda" ? model::Device::Cuda
                                                                                        : model::Device::Auto;
          },
          "Where the model runs: auto (the GPU when one is visible), cpu, or cuda")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}))
      ->default_str("auto");
}

void add_draft_flag(CLI::App& command, engine::DraftMode& mode, std::string* draft_model) {
  command
      .add_option_function<std::string>(
          "--draft", [&mode](const std::string& name) { mode = engine::parse_draft_mode(name); },
          "Speculative decoding: auto (the best drafts there are: the block draft of --draft-model, else the "
          "model's own MTP block (Qwen3.5) where the model runs on the CPU, after prompt lookup's long matches; "
          "else prompt lookup), lookup (each step verifies the tokens that followed the latest earlier occurrence "
          "of the last three), model (the block draft or MTP block), or none (plain decoding). The output is the "
          "same")
      ->check(CLI::IsMember({"auto", "lookup", "model", "none"}))
      ->default_str("auto");
  if (draft_model)
    command.add_option("--draft-model", *draft_model,
                       "Block draft made for the model (a dflash GGUF: tools/dflash/train.py), CPU: guesses a block "
                       "of tokens from the model's own hidden states")
        ->check(CLI::ExistingFile);
}

std::unique_ptr<engine::Drafter> make_drafter(engine::DraftMode mode,
                                              const std::shared_ptr<model::ModelDraft>& draft) {
  if (mode == engine::DraftMode::None) return nullptr;
  if (draft && mode != engine::DraftMode::Lookup) return std::make_unique<engine::ModelDrafter>(draft);
  return std::make_unique<engine::LookupDrafter>();
}

void add_vision_flags(CLI::App& command, ModelFlags& flags) {
  command.add_option("--mmproj", flags.mmproj,
                     "Vision encoder GGUF of the model (SmolVLM's mmproj file): requests may then carry images")
      ->check(CLI::ExistingFile);
  command.add_option("--max-image-pixels", flags.max_image_pixels,
                     "Largest image (width x height) a request may send; larger ones are refused before decoding")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 40))
      ->capture_default_str();
}

std::optional<size_t> ModelFlags::max_memory_bytes() const {
  if (max_memory.empty()) return std::nullopt;
  auto bytes = engine::parse_memory_size(max_memory);
  if (!bytes) fail("--max-memory expects a size such as 8G, 512M or 1073741824, got '{}'", max_memory);
  return bytes;
}

void add_sampling_flags(CLI::App& command, SamplingFlags& flags) {
  auto& p = flags.params;
  command.add_option("--temperature,--temp", p.temperature, "Sampling temperature; 0 is greedy")
      ->capture_default_str();
  command.add_option("--top-k", p.top_k, "Keep the k most likely tokens (0: off)")->capture_default_str();
  command.add_option("--top-p", p.top_p, "Nucleus sampling mass (1: off)")->capture_default_str();
  command.add_option("--min-p", p.min_p, "Drop tokens below min-p times the best one's probability (0: off)")
      ->capture_default_str();
  command.add_option("--repeat-penalty", p.repetition_penalty, "Repetition penalty (1: off)")->capture_default_str();
  command.add_option("--penalty-window", p.penalty_window, "Tokens the penalties look back at (-1: all)")
      ->capture_default_str();
  command.add_option("--presence-penalty", p.presence_penalty, "Presence penalty")->capture_default_str();
  command.add_option("--frequency-penalty", p.frequency_penalty, "Frequency penalty")->capture_default_str();
  command.add_option("--logit-bias", flags.logit_bias, "TOKEN_ID=BIAS, repeatable");
  command.add_option("--seed", flags.seed, "Random seed (default: random)");
}

engine::SamplingParams sampling_params(const SamplingFlags& flags) {
  engine::SamplingParams params = flags.params;
  if (flags.seed >= 0) params.seed = static_cast<uint64_t>(flags.seed);
  for (const auto& entry : flags.logit_bias) {
    const auto eq = entry.find('=');
    try {
      if (eq == std::string::npos) throw std::invalid_argument("no '='");
      size_t used_id = 0, used_bias = 0;
      const int id = std::stoi(entry.substr(0, eq), &used_id);
      const float bias = std::stof(entry.substr(eq + 1), &used_bias);
      if (used_id != eq || used_bias != entry.size() - eq - 1) throw std::invalid_argument("trailing text");
      params.logit_bias[id] = bias;
    } catch (const std::exception&) {
      fail("--logit-bias expects TOKEN_ID=BIAS, got '{}'", entry);
    }
  }
  // Checked before any model is fetched or loaded; token ids are checked against the
  // vocabulary once it is known.
  if (auto problem = engine::validate(params, 0); !problem.empty()) fail("{}", problem);
  return params;
}

}  // namespace splash::app

int main(int argc, char** argv) {
  CLI::App app{"splash: a local LLM inference engine for coding agents"};
  app.set_version_flag("-V,--version", std::string("splash ") + SPLASH_VERSION);
  app.require_subcommand(1);
  splash::app::add_serve_command(app);
  splash::app::add_run_command(app);
  splash::app::add_tokenize_command(app);
  splash::app::add_bench_command(app);
  splash::app::add_eval_command(app);
  splash::app::add_draft_data_command(app);
  splash::app::add_pull_command(app);
  splash::app::add_pack_command(app);
  splash::app::add_launch_commands(app);
  // An agent launcher's arguments after "--" are the agent's alone.
  std::vector<char*> args(argv, argv + argc);
  if (argc > 1 && splash::app::is_launch_command(argv[1]))
    if (const auto dashes = std::find_if(args.begin() + 2, args.end(), [](const char* a) { return std::string_view(a) == "--"; });
        dashes != args.end()) {
      splash::app::launch_passthrough().assign(dashes + 1, args.end());
      args.erase(dashes, args.end());
    }
  try {
    app.parse(static_cast<int>(args.size()), args.data());
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    // One line, then a pointer to --help, instead of CLI11's multi-line dump.
    std::fprintf(stderr, "splash: error: %s (see splash --help)\n", e.what());
    return e.get_exit_code() == 0 ? 2 : e.get_exit_code();
  } catch (const splash::app::ExitCode& e) {
    return e.code;
  } catch (const splash::Error& e) {
    // On a terminal a progress line may still be open; end it first.
    std::fprintf(stderr, "%ssplash: error: %s\n", isatty(STDERR_FILENO) ? "\n" : "", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%ssplash: internal error: %s\n", isatty(STDERR_FILENO) ? "\n" : "", e.what());
    return 1;
  }
  return 0;
}

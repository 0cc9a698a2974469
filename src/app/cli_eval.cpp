// `splash eval`: a developer command that exposes raw model outputs for the reference tests
// (tests/e2e/test_reference.py): logits after a token sequence, or a greedy continuation.
#include <fmt/format.h>

#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>

#include "app/commands.h"
#include "model/sequence.h"
#include "app/model_loading.h"
#include "common/error.h"

namespace splash::app {
namespace {

struct EvalFlags {
  ModelFlags model;
  std::vector<int32_t> tokens;
  std::string logits_out;
  int greedy = 0;
};

void eval(const EvalFlags& flags) {
  const auto budget = flags.model.max_memory_bytes();  // checked before any download
  auto loaded = load_model(resolve_model_path(flags.model.model), flags.model.load, false, budget);
  model::Sequence model(*loaded->model);
  std::span<const float> logits = model.forward(flags.tokens);
  if (!flags.logits_out.empty()) {
    std::FILE* out = std::fopen(flags.logits_out.c_str(), "wb");
    if (!out) fail("cannot write {}", flags.logits_out);
    const size_t written = std::fwrite(logits.data(), sizeof(float), logits.size(), out);
    if (std::fclose(out) != 0 || written != logits.size()) fail("cannot write {}", flags.logits_out);
  }
  if (flags.greedy > 0) {
    // Plain argmax with no end-of-generation handling, so the reference can compare every step.
    std::vector<int32_t> generated;
    for (int i = 0; i < flags.greedy; ++i) {
      const auto best = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
      generated.push_back(best);
      if (i + 1 < flags.greedy) logits = model.forward({&best, 1});
    }
    fmt::print("{}\n", nlohmann::json{{"generated", generated}}.dump());
  }
}

}  // namespace

void add_eval_command(CLI::App& app) {
  auto flags = std::make_shared<EvalFlags>();
  auto* command = app.add_subcommand("eval", "Developer tool: raw logits or a greedy continuation of token ids");
  command->group("Developer");
  add_model_flags(*command, flags->model);
  command->add_option("--tokens", flags->tokens, "Comma-separated token ids")->delimiter(',')->required();
  command->add_option("--logits-out", flags->logits_out, "Write the last position's logits (float32) here");
  command->add_option("--greedy", flags->greedy, "Print a JSON greedy continuation of N tokens")
      ->check(CLI::Range(0, 1 << 16));
  command->callback([flags] { eval(*flags); });
}

}  // namespace splash::app

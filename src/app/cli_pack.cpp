// `splash pack SRC.gguf [--draft D.gguf] --out DIR`: a model package (hub/model_package.h)
// from a GGUF: the model loaded once to describe it (family, exact shapes, quantization,
// tokenizer, chat template, license) and, unless --no-baseline, to measure the baseline a
// later run can be compared with (prefill and decode on this machine's CPU); then the files
// copied in with their sizes and sha256, the manifest written last.
#include <fmt/chrono.h>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <memory>
#include <string>
#include <thread>

#include "app/commands.h"
#include "app/model_loading.h"
#include "common/error.h"
#include "hub/model_package.h"
#include "hub/sha256.h"
#include "model/sequence.h"

namespace splash::app {
namespace {

struct PackFlags {
  std::string source, draft, out;
  bool baseline = true;
};

nlohmann::json describe(const LoadedModel& loaded) {
  const model::ModelInfo& info = loaded.model->info();
  const auto template_text = loaded.file.opt_string("tokenizer.chat_template");
  nlohmann::json manifest = {
      {"family", info.architecture},
      {"name", info.name},
      {"shapes",
       {{"layers", info.n_layers}, {"d_model", info.d_model}, {"heads", info.n_heads}, {"kv_heads", info.n_kv_heads},
        {"head_dim", info.head_dim}, {"ffn", info.ffn}, {"vocab", info.vocab}, {"native_context", info.native_context}}},
      {"quantization", info.weight_types},
      {"kernels", info.kernel_shapes},
      {"tokenizer", {{"model", loaded.file.opt_string("tokenizer.ggml.model").value_or("")}, {"vocab", info.vocab}}},
      {"chat_template",
       {{"format", loaded.chat->name()},
        {"recognized", loaded.chat->recognized()},
        {"sha256", template_text ? hub::sha256_hex(*template_text) : ""}}},
      {"license", loaded.file.opt_string("general.license").value_or("unknown")},
  };
  if (info.n_experts > 0) {  // ffn is then each expert's width
    manifest["shapes"]["experts"] = info.n_experts;
    manifest["shapes"]["experts_used"] = info.n_experts_used;
  }
  return manifest;
}

// Prefill of 128 tokens and 32 greedy decode steps on the CPU, and what they ran on.
nlohmann::json measure_baseline(LoadedModel& loaded) {
  model::Sequence sequence(*loaded.model);
  const int vocab = loaded.model->info().vocab;
  std::vector<int32_t> prompt(128);
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<int32_t>((i * 7919 + 13) % vocab);
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  auto logits = sequence.forward(prompt);
  const auto prefilled = Clock::now();
  constexpr int kDecode = 32;
  for (int i = 0; i < kDecode; ++i) {
    const auto next = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    logits = sequence.forward({&next, 1});
  }
  const auto end = Clock::now();
  const auto seconds = [](auto a, auto b) { return std::chrono::duration<double>(b - a).count(); };
  const model::ModelInfo& info = loaded.model->info();
  return {{"prefill_128_tok_s", prompt.size() / seconds(start, prefilled)},
          {"decode_tok_s", kDecode / seconds(prefilled, end)},
          {"device", info.device},
          {"isa", info.isa},
          {"threads", info.threads},
          {"measured", fmt::format("{:%Y-%m-%d}", fmt::localtime(std::time(nullptr)))}};
}

void pack(const PackFlags& flags) {
  model::LoadOptions options;
  options.device = model::Device::Cpu;
  options.max_context = 512;  // enough to describe and measure; the package is the file
  auto loaded = load_model(flags.source, options);
  const nlohmann::json model = describe(*loaded);
  nlohmann::json baseline = nlohmann::json::object();
  if (flags.baseline) {
    fmt::print(stderr, "measuring the baseline (prefill 128 tokens, decode 32) on the CPU...\n");
    baseline = measure_baseline(*loaded);
  }
  if (!flags.draft.empty()) load_model(flags.draft, {}, /*tokenizer_only=*/true);  // a GGUF splash reads
  loaded.reset();
  const auto manifest = hub::write_package(flags.out, flags.source,
                                           flags.draft.empty() ? std::nullopt : std::optional<std::filesystem::path>(flags.draft),
                                           model, baseline, hub::terminal_progress("pack"));
  fmt::print("{}\n", flags.out);
  fmt::print(stderr, "packed {} ({}, {}) with {} file(s)\n", model["name"].get<std::string>(),
             model["family"].get<std::string>(), model["quantization"].get<std::string>(), manifest["files"].size());
}

}  // namespace

void add_pack_command(CLI::App& app) {
  auto flags = std::make_shared<PackFlags>();
  auto* command = app.add_subcommand("pack", "Make a model package (a directory with the GGUF and a manifest) from a GGUF");
  command->add_option("source", flags->source, "The model's GGUF")->required()->check(CLI::ExistingFile);
  command->add_option("--draft", flags->draft, "A draft model's GGUF, packed beside it")->check(CLI::ExistingFile);
  command->add_option("--out", flags->out, "The package directory to create")->required();
  command->add_flag("!--no-baseline", flags->baseline, "Do not measure prefill and decode for the manifest");
  command->callback([flags] { pack(*flags); });
}

}  // namespace splash::app

// `splash tokenize "text"`: the model's token ids for a text.
#include <fmt/format.h>

#include <memory>
#include <nlohmann/json.hpp>

#include "app/commands.h"
#include "app/model_loading.h"

namespace splash::app {
namespace {

struct TokenizeFlags {
  std::string model;
  std::string text;
  bool json = false;
  bool no_special = false;
};

void tokenize(const TokenizeFlags& flags) {
  auto loaded = load_model(resolve_model_path(flags.model), {}, /*tokenizer_only=*/true);
  const auto ids = loaded->tokenizer.encode(flags.text, !flags.no_special);
  if (flags.json) {
    fmt::print("{}\n", nlohmann::json(ids).dump());
    return;
  }
  for (int32_t id : ids)
    fmt::print("{:>6} {}\n", id, nlohmann::json(loaded->tokenizer.decode({&id, 1})).dump(-1, ' ', false,
                                                                                         nlohmann::json::error_handler_t::replace));
  fmt::print("{} tokens\n", ids.size());
}

}  // namespace

void add_tokenize_command(CLI::App& app) {
  auto flags = std::make_shared<TokenizeFlags>();
  auto* command = app.add_subcommand("tokenize", "Print the token ids of a text");
  command->add_option("-m,--model", flags->model, "GGUF model file (default: the default model)")->check(CLI::ExistingFile);
  command->add_flag("--json", flags->json, "Print a JSON array of ids");
  command->add_flag("--no-special", flags->no_special, "Treat special-token text as plain text");
  command->add_option("text", flags->text, "Text to tokenize")->required();
  command->callback([flags] { tokenize(*flags); });
}

}  // namespace splash::app

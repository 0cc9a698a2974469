// `splash pull [NAME]`: fetch and verify a model now (instead of on first use) and print
// where it is cached; `splash models`: the catalogue, and which of it is here.
#include <fmt/format.h>

#include <memory>
#include <string>

#include "app/commands.h"
#include "app/model_loading.h"
#include "common/error.h"
#include "hub/model_cache.h"
#include "hub/model_catalogue.h"

namespace splash::app {

void add_pull_command(CLI::App& app) {
  auto name = std::make_shared<std::string>();
  auto* pull = app.add_subcommand(
      "pull", "Fetch and verify a model by name or from the Hugging Face hub (default: the default model, "
              "qwen2.5-coder-1.5b); print its path");
  pull->add_option("name", *name, "A name from `splash models`, or owner/repo[:file.gguf] on the Hugging Face hub");
  pull->callback([name] {
    if (name->empty()) return fmt::print("{}\n", resolve_model_path(""));
    if (const auto* model = hub::find_catalogue_model(*name)) return fmt::print("{}\n", pull_catalogue_model(*model));
    const auto reference = hub::parse_hub_reference(*name);
    if (!reference)
      fail("no model named '{}' can be pulled; the names: {}; or owner/repo[:file.gguf] from the Hugging Face hub",
           *name, hub::catalogue_names());
    fmt::print("{}\n", pull_hub_model(*reference));
  });

  auto* models = app.add_subcommand("models", "List the models `splash pull` and --model fetch by name");
  models->callback([] {
    fmt::print("{:<22} {:>9}  {:<8} {}\n", "name", "size", "here", "model");
    for (const auto& model : hub::model_catalogue())
      fmt::print("{:<22} {:>6} MB  {:<8} {}\n", model.name, model.file_size / 1'000'000,
                 hub::is_cached(model) ? "cached" : "-", model.title);
  });
}

}  // namespace splash::app

// `splash pull`: fetch and verify the default model now (instead of on first use) and
// print where it is cached.
#include <fmt/format.h>

#include "app/commands.h"
#include "app/model_loading.h"

namespace splash::app {

void add_pull_command(CLI::App& app) {
  auto* command = app.add_subcommand("pull", "Fetch and verify the default model; print its path");
  command->callback([] { fmt::print("{}\n", resolve_model_path("")); });
}

}  // namespace splash::app

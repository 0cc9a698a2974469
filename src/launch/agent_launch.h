#pragma once
// `splash claude|codex|opencode|hermes|aider`: how each coding agent is pointed at a running
// splash server. A launch plan is the agent's program, its arguments (ours, then the user's),
// the environment it gets on top of the caller's, and files written into a temporary
// directory (never into the user's own configuration): all of it computed here from what the
// server reports, so it is tested without the agents. app/cli_launch.cpp probes the server and
// runs the plan. Why each setting: ../shared/research/launchers.md.
#include <filesystem>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace splash::launch {

enum class Agent { Claude, Codex, OpenCode, Hermes, Aider };
inline constexpr Agent kAgents[] = {Agent::Claude, Agent::Codex, Agent::OpenCode, Agent::Hermes, Agent::Aider};
std::string_view agent_command(Agent agent);  // "claude": the subcommand and the program's name
std::string_view agent_title(Agent agent);    // "Claude Code"
std::string_view agent_install_hint(Agent agent);

// What the running server says of itself (GET /v1/models) and how to reach it.
struct ServerInfo {
  std::string base_url;  // "http://127.0.0.1:8000", no trailing slash
  std::string model;     // the served model's id
  int context = 0;       // the served window in tokens (prompt + reply)
  std::string api_key;   // SPLASH_API_KEY, empty when the server needs none
};

// The reply budget a launcher gives the agent, and the window left for its prompts: a
// quarter of the window, at most 8192 tokens (agents otherwise ask for 32-64K and the
// server clamps every request to what is left).
int output_tokens(const ServerInfo& server);
int input_tokens(const ServerInfo& server);

struct LaunchPlan {
  std::string program;
  std::vector<std::string> args;                            // after the program: ours, then the user's
  std::vector<std::pair<std::string, std::string>> env;     // set on top of the caller's environment
  std::vector<std::pair<std::string, std::string>> files;   // name in the temporary directory -> contents
  std::vector<std::string> notes;                           // one line each, printed before the agent starts
};

// What the caller found out about the user's setup (app/cli_launch.cpp reads it; this layer
// does no I/O).
struct UserEnvironment {
  std::filesystem::path cwd;
  // Claude Code: whether its configuration (CLAUDE_CONFIG_DIR, else ~/.claude.json) records a
  // finished onboarding; if not, it runs with a temporary configuration instead of the
  // first-run screens.
  bool claude_onboarded = false;
  // Codex: `codex debug models --bundled` (the installed version's own catalogue, JSON), whose
  // first entry with a freeform apply_patch becomes the served model's entry; empty: a
  // catalogue entry of our own.
  std::string codex_bundled_models;
};

// Throws splash::Error when the agent cannot use this server (Hermes below a 64K window).
// `temp_dir` is where the plan's files will be written: paths in args and env point there.
LaunchPlan plan_launch(Agent agent, const ServerInfo& server, const std::vector<std::string>& user_args,
                       const std::filesystem::path& temp_dir, const UserEnvironment& user);

}  // namespace splash::launch

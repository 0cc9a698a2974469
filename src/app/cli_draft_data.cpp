// `splash draft-data`: the training data of a block draft (DFlash, issue 14), made by splash
// itself so the draft learns the shipped model as it really runs (its quantized weights, its
// chat template): each prompt's greedy reply, then the whole conversation run once more with
// the tapped layers' outputs kept for every token (the draft's conditioning). Written as
// numpy files a PyTorch recipe reads without splash:
//   DIR/NAME.tokens.npy  int32 [tokens]                  prompt then reply
//   DIR/NAME.hidden.npy  float16 [tokens][layers][d_model]
//   DIR/manifest.jsonl   one line per sample: its name, token counts, how the reply ended
// NAME is a hash of what makes the sample (the model file's name, the layers, the reply
// limit, the conversation), so a run that stops part-way goes on where it stopped when
// started again on the same DIR, and a prompt edited since (or other flags) gives a new
// sample; the manifest then lists what the prompts file makes now, and the entries it no
// longer makes move to DIR/manifest.stale.jsonl (their files stay: nothing is deleted).
#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>

#include "app/commands.h"
#include "app/model_loading.h"
#include "common/error.h"
#include "engine/generator.h"
#include "hub/sha256.h"
#include "kernels/cpu/half.h"
#include "model/sequence.h"

namespace splash::app {
namespace {

struct DraftDataFlags {
  ModelFlags model;
  std::string prompts;  // JSONL: {"messages": [{"role", "content"}...]} or {"prompt": "user text"}
  std::string out;
  int max_tokens = 512;
  engine::DraftMode draft = engine::DraftMode::Auto;  // (the same greedy reply, sooner)
};

// A .npy file (format 1.0): the header numpy.load reads, then the raw little-endian values.
void write_npy(const std::filesystem::path& path, std::string_view dtype, const std::vector<size_t>& shape,
               const void* data, size_t bytes) {
  std::string dims;
  for (const size_t d : shape) dims += fmt::format("{}, ", d);
  if (shape.size() > 1) dims.resize(dims.size() - 2);
  std::string header = fmt::format("{{'descr': '{}', 'fortran_order': False, 'shape': ({}), }}", dtype, dims);
  header.append(64 - (10 + header.size() + 1) % 64, ' ');  // (the data starts 64-byte aligned)
  header += '\n';
  const auto temporary = std::filesystem::path(path.string() + ".part");
  // (nothing half-written stays behind a failure)
  const auto give_up = [&temporary](const std::string& why) {
    std::error_code ignored;
    std::filesystem::remove(temporary, ignored);
    fail("{}", why);
  };
  std::ofstream file(temporary, std::ios::binary);
  const uint16_t header_bytes = static_cast<uint16_t>(header.size());
  file.write("\x93NUMPY\x01\x00", 8);
  file.write(reinterpret_cast<const char*>(&header_bytes), 2);
  file << header;
  file.write(static_cast<const char*>(data), static_cast<std::streamsize>(bytes));
  file.close();
  if (!file) give_up(fmt::format("cannot write {}", temporary.string()));
  std::error_code error;
  std::filesystem::rename(temporary, path, error);  // (a sample's files appear whole or not at all)
  if (error) give_up(fmt::format("cannot write {}: {}", path.string(), error.message()));
}

// One prompt line as chat messages; a malformed line is refused naming it.
std::vector<chat::ChatMessage> read_messages(const std::string& line, size_t number, const std::string& path) {
  const auto where = [&] { return fmt::format("{} line {}", path, number); };
  const auto json = nlohmann::json::parse(line, nullptr, false);
  if (json.is_discarded() || !json.is_object()) fail("{}: not a JSON object", where());
  std::vector<chat::ChatMessage> messages;
  if (const auto prompt = json.find("prompt"); prompt != json.end()) {
    if (!prompt->is_string()) fail("{}: \"prompt\" must be a string", where());
    messages.push_back({"user", prompt->get<std::string>()});
    return messages;
  }
  const auto list = json.find("messages");
  if (list == json.end() || !list->is_array() || list->empty())
    fail("{}: needs \"messages\" (a non-empty array) or \"prompt\"", where());
  for (const auto& m : *list) {
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string() || !m.contains("content") ||
        !m["content"].is_string())
      fail("{}: each message needs a string \"role\" and a string \"content\"", where());
    messages.push_back({m["role"].get<std::string>(), m["content"].get<std::string>()});
  }
  return messages;
}

void make_draft_data(const DraftDataFlags& flags) {
  const auto& taps = flags.model.load.hidden_taps;
  if (taps.empty()) fail("--hidden-layers: name the layers whose outputs the draft reads");
  std::ifstream prompts(flags.prompts);
  if (!prompts) fail("cannot read {}", flags.prompts);
  std::vector<std::vector<chat::ChatMessage>> conversations;
  std::vector<std::string> names;
  const std::string model_path = resolve_model_path(flags.model.model);
  const std::string recipe = fmt::format("{}\n{}\n{}\n", std::filesystem::path(model_path).filename().string(),
                                         fmt::join(taps, ","), flags.max_tokens);
  size_t number = 0;
  for (std::string line; std::getline(prompts, line);) {
    ++number;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    conversations.push_back(read_messages(line, number, flags.prompts));
    nlohmann::json canonical = nlohmann::json::array();
    for (const auto& m : conversations.back()) canonical.push_back({m.role, m.content});
    names.push_back(hub::sha256_hex(recipe + canonical.dump()).substr(0, 16));
  }
  if (conversations.empty()) fail("{}: no prompts", flags.prompts);

  const auto budget = flags.model.max_memory_bytes();
  model::LoadOptions load = flags.model.load;
  if (load.device == model::Device::Auto) load.device = model::Device::Cpu;  // (taps are kept on the CPU path)
  load.drafts = flags.draft != engine::DraftMode::None;
  auto loaded = load_model(model_path, load, false, budget);  // (before the manifest changes)

  const std::filesystem::path dir(flags.out);
  std::filesystem::create_directories(dir);
  // Samples already written (a run started again goes on after them); the entries of prompts
  // no longer in the file (or made otherwise) move to manifest.stale.jsonl.
  std::set<std::string> done;
  {
    const std::set<std::string> wanted(names.begin(), names.end());
    std::string kept, stale;
    std::ifstream old(dir / "manifest.jsonl");
    for (std::string line; std::getline(old, line);) {
      const auto entry = nlohmann::json::parse(line, nullptr, false);
      if (!entry.is_object() || !entry.contains("name") || !entry["name"].is_string()) continue;
      const std::string name = entry["name"];
      if (!wanted.contains(name)) stale += line + '\n';
      else if (done.insert(name).second) kept += line + '\n';
    }
    const auto write = [](const std::filesystem::path& path, const std::string& text, std::ios::openmode mode) {
      std::ofstream file(path, std::ios::binary | mode);
      file << text;
      file.close();
      if (!file) fail("cannot write {}", path.string());
    };
    if (!stale.empty()) write(dir / "manifest.stale.jsonl", stale, std::ios::app);
    write(dir / "manifest.jsonl.part", kept, std::ios::trunc);
    std::filesystem::rename(dir / "manifest.jsonl.part", dir / "manifest.jsonl");
  }
  std::ofstream manifest(dir / "manifest.jsonl", std::ios::app);
  const size_t d_model = loaded->model->info().d_model;
  model::Sequence sequence(*loaded->model);
  const auto drafter_mode = flags.draft;

  const auto start = std::chrono::steady_clock::now();
  size_t written_tokens = 0, written = 0;
  size_t skipped = 0;
  for (size_t i = 0; i < conversations.size(); ++i) {
    const std::string& name = names[i];
    if (done.contains(name)) continue;
    engine::GenerationRequest request;
    try {
      request.prompt = encode_chat(*loaded, conversations[i]);
      if (static_cast<int>(request.prompt.size()) >= loaded->model->info().context)
        fail("its prompt of {} tokens fills the context of {}", request.prompt.size(), loaded->model->info().context);
    } catch (const Error& e) {  // (one prompt the template cannot write or the context cannot hold)
      fmt::print(stderr, "draft-data: prompt {} skipped: {}\n", i + 1, e.what());
      ++skipped;
      continue;
    }
    request.sampling.temperature = 0.0f;
    request.max_tokens = flags.max_tokens;
    sequence.truncate(0);
    const auto drafter = make_drafter(drafter_mode);
    const auto result = engine::generate(sequence, loaded->tokenizer, request, [](const engine::GenerationPiece&) {
      return true;
    }, nullptr, 0, drafter.get());
    std::vector<int32_t> tokens = request.prompt;
    tokens.insert(tokens.end(), result.tokens.begin(), result.tokens.end());
    if (static_cast<int>(tokens.size()) > loaded->model->info().context)
      tokens.resize(loaded->model->info().context);
    // The conversation once more, every token's taps kept.
    sequence.truncate(0);
    std::vector<float> hidden;
    sequence.forward(tokens, {}, &hidden);
    if (hidden.size() != tokens.size() * taps.size() * d_model)
      fail("draft-data: {} tapped floats for {} tokens", hidden.size(), tokens.size());
    std::vector<uint16_t> halves(hidden.size());
    for (size_t k = 0; k < hidden.size(); ++k) halves[k] = kernels::fp32_to_fp16(hidden[k]);
    write_npy(dir / (name + ".tokens.npy"), "<i4", {tokens.size()}, tokens.data(), tokens.size() * sizeof(int32_t));
    write_npy(dir / (name + ".hidden.npy"), "<f2", {tokens.size(), taps.size(), d_model}, halves.data(),
              halves.size() * sizeof(uint16_t));
    manifest << nlohmann::json{{"name", name},
                               {"tokens", tokens.size()},
                               {"prompt_tokens", request.prompt.size()},
                               {"reply_tokens", tokens.size() - request.prompt.size()},
                               {"finish", engine::finish_reason_name(result.finish)},
                               {"layers", taps}}
                    .dump()
             << '\n'
             << std::flush;
    written_tokens += tokens.size();
    ++written;
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    fmt::print(stderr, "draft-data: {}/{} prompts, {} tokens written ({:.1f} tok/s)\n", i + 1, conversations.size(),
               written_tokens, written_tokens / std::max(seconds, 1e-9));
  }
  fmt::print(stderr, "draft-data: {} samples written to {} ({} already there, {} skipped)\n", written, dir.string(),
             done.size(), skipped);
}

}  // namespace

void add_draft_data_command(CLI::App& app) {
  auto flags = std::make_shared<DraftDataFlags>();
  auto* command = app.add_subcommand(
      "draft-data", "Developer tool: greedy replies and tapped hidden states, a block draft's training data");
  command->group("Developer");
  add_model_flags(*command, flags->model);
  command->add_option("--prompts", flags->prompts,
                      "JSONL file: {\"messages\": [...]} or {\"prompt\": \"...\"} per line")
      ->required()
      ->check(CLI::ExistingFile);
  command->add_option("--hidden-layers", flags->model.load.hidden_taps,
                      "Comma-separated layers whose outputs the draft reads")
      ->delimiter(',')
      ->required();
  command->add_option("--out", flags->out, "Directory the samples go to (a run goes on after those there)")
      ->required();
  command->add_option("-n,--max-tokens", flags->max_tokens, "Most reply tokens per prompt")
      ->check(CLI::Range(1, 1 << 16));
  add_draft_flag(*command, flags->draft);
  command->callback([flags] { make_draft_data(*flags); });
}

}  // namespace splash::app

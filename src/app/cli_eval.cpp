// `splash eval`: a developer command that exposes raw model outputs for the reference tests
// (tests/e2e/test_reference.py): logits after a token sequence, or a greedy continuation.
#include <fmt/format.h>

#include <cstdio>
#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>

#include "app/commands.h"
#include "model/sequence.h"
#include "app/model_loading.h"
#include "common/error.h"
#include "engine/generator.h"

namespace splash::app {
namespace {

struct EvalFlags {
  ModelFlags model;
  std::vector<int32_t> tokens;
  std::string logits_out;
  int greedy = 0;
  std::string image;         // with --mmproj: an image file whose features fill the <image> positions
  std::string features_out;  // write the image's features (float32, tokens x width) here
  std::string pixels;        // a preprocessed [3][S][S] float32 tensor to encode instead of decoding `image`
  engine::DraftMode draft = engine::DraftMode::Auto;
  std::vector<int32_t> guesses;  // --greedy's drafts: guesses of the continuation instead of --draft's
  std::string hidden_out;        // write the --hidden-layers outputs of every token (float32) here
  std::string draft_logits_out;  // the model's draft's logits after the last token (float32)
};

// Guesses read from a given continuation (tests: right and wrong guesses where they choose,
// to check that verification keeps exactly the greedy tokens, refused ones taken back out).
class ListedDrafter final : public engine::Drafter {
 public:
  ListedDrafter(std::vector<int32_t> continuation, size_t prompt) : continuation_(std::move(continuation)), prompt_(prompt) {}
  std::vector<int32_t> propose(std::span<const int32_t> tokens, int max_tokens) override {
    const size_t next = tokens.size() - prompt_;  // the continuation's index of the first guess
    std::vector<int32_t> out;
    for (size_t i = next; i < continuation_.size() && static_cast<int>(out.size()) < max_tokens; ++i)
      out.push_back(continuation_[i]);
    return out;
  }

 private:
  std::vector<int32_t> continuation_;
  size_t prompt_;
};

void write_floats(const std::string& path, std::span<const float> values) {
  std::FILE* out = std::fopen(path.c_str(), "wb");
  if (!out) fail("cannot write {}", path);
  const size_t written = std::fwrite(values.data(), sizeof(float), values.size(), out);
  if (std::fclose(out) != 0 || written != values.size()) fail("cannot write {}", path);
}

std::string read_file(const std::string& path) {
  std::FILE* in = std::fopen(path.c_str(), "rb");
  if (!in) fail("cannot read {}", path);
  std::string bytes;
  char buffer[1 << 16];
  for (size_t n; (n = std::fread(buffer, 1, sizeof buffer, in)) > 0;) bytes.append(buffer, n);
  std::fclose(in);
  return bytes;
}

void eval(const EvalFlags& flags) {
  if (flags.hidden_out.empty() != flags.model.load.hidden_taps.empty())
    fail("--hidden-out and --hidden-layers go together");
  const auto budget = flags.model.max_memory_bytes();  // checked before any download
  model::LoadOptions load = flags.model.load;
  const auto path = resolve_model_path(flags.model.model);
  const auto draft = open_model_draft(flags.model.draft_model, path,
                                      flags.draft_logits_out.empty() ? flags.draft : engine::DraftMode::Model, load);
  auto loaded = load_model(path, load, false, budget, flags.model.mmproj, {}, draft.get());
  if (draft) draft->attach(*loaded->model, loaded->file);
  // The image's feature rows stand at the <image> positions of the token list, in order.
  std::vector<const float*> embeddings;
  vision::ImageFeatures features;
  if (!flags.image.empty() || !flags.pixels.empty()) {
    if (!loaded->vision) fail("--image and --pixels need --mmproj");
    if (!flags.pixels.empty()) {
      const std::string bytes = read_file(flags.pixels);
      std::vector<float> pixels(bytes.size() / sizeof(float));
      std::memcpy(pixels.data(), bytes.data(), pixels.size() * sizeof(float));
      features = loaded->vision->encode_pixels(pixels);
    } else {
      const std::string file = read_file(flags.image);
      features = loaded->vision->encode(vision::decode_image(
          std::span(reinterpret_cast<const uint8_t*>(file.data()), file.size()), flags.model.max_image_pixels), {});
    }
    if (!flags.features_out.empty()) write_floats(flags.features_out, features.values);
    const auto marker = loaded->tokenizer.find_token("<image>");
    int next = 0;
    for (int32_t token : flags.tokens)
      embeddings.push_back(marker && token == *marker && next < features.tokens ? features.row(next++) : nullptr);
  }
  model::Sequence model(*loaded->model);
  std::vector<float> hidden;
  std::span<const float> logits = model.forward(flags.tokens, embeddings, &hidden);
  if (!flags.logits_out.empty()) write_floats(flags.logits_out, logits);
  if (!flags.hidden_out.empty()) write_floats(flags.hidden_out, hidden);
  if (!flags.draft_logits_out.empty()) {
    // The draft's logits after the last token, its context made of every token before it.
    const size_t row = hidden.size() / flags.tokens.size();
    auto context = draft->new_context();
    draft->extend(*context, 0, std::span(hidden).first(row * (flags.tokens.size() - 1)));
    write_floats(flags.draft_logits_out, draft->guess_logits(*context, flags.tokens));
  }
  if (flags.greedy > 0) {
    // Plain argmax with no end-of-generation handling, so the reference can compare every step;
    // with drafts, each step verifies the guesses too (the same tokens, fewer passes).
    const model::ModelInfo& info = model.info();
    std::vector<int32_t> generated, text = flags.tokens;
    const auto argmax = [&](std::span<const float> row) -> std::optional<int32_t> {
      const auto best = static_cast<int32_t>(std::max_element(row.begin(), row.end()) - row.begin());
      generated.push_back(best);
      text.push_back(best);
      if (static_cast<int>(generated.size()) >= flags.greedy) return std::nullopt;
      return best;
    };
    std::unique_ptr<engine::Drafter> drafter;
    if (info.max_logits_per_slice > 1)
      drafter = flags.guesses.empty() ? make_drafter(flags.draft, draft)
                                      : std::make_unique<ListedDrafter>(flags.guesses, flags.tokens.size());
    if (drafter && !hidden.empty()) drafter->observe_hidden(0, hidden);
    // Each pass's committed rows (the last pass's first `committed` rows) go on to the drafter.
    const auto hand_on_hidden = [&](int first, int committed) {
      if (drafter) drafter->observe_committed(first, model.position(), model.hidden_taps(), committed);
    };
    int drafted = 0, accepted = 0;
    std::optional<int32_t> next = argmax(logits);
    while (next) {
      const int room = std::min({info.max_logits_per_slice - 1, info.draft_pass_tokens - 1,
                                 flags.greedy - static_cast<int>(generated.size()) - 1,
                                 info.context - model.position() - 1});
      std::vector<int32_t> block{*next};
      if (drafter && room > 0)
        for (const int32_t guess : drafter->propose(text, room))
          if (static_cast<int>(block.size()) <= room && guess >= 0 && guess < info.vocab) block.push_back(guess);
      if (block.size() == 1) {
        const auto row = model.forward(block);
        hand_on_hidden(model.position() - 1, 1);
        next = argmax(row);
        continue;
      }
      const int fed = model.position();
      const auto verified = engine::verify_guesses(std::span(block).subspan(1), model.verify(block),
                                                   static_cast<size_t>(info.vocab), argmax, [](int32_t) {});
      hand_on_hidden(fed, 1 + verified.kept);
      drafter->verified(static_cast<int>(block.size()) - 1, verified.kept);
      model.truncate(fed + 1 + verified.kept);
      drafted += static_cast<int>(block.size()) - 1;
      accepted += verified.kept;
      next = verified.next;
    }
    fmt::print("{}\n", nlohmann::json{{"generated", generated}, {"drafted", drafted}, {"accepted", accepted}}.dump());
  }
}

}  // namespace

void add_eval_command(CLI::App& app) {
  auto flags = std::make_shared<EvalFlags>();
  auto* command = app.add_subcommand("eval", "Developer tool: raw logits or a greedy continuation of token ids");
  command->group("Developer");
  add_model_flags(*command, flags->model);
  add_vision_flags(*command, flags->model);
  command->add_option("--image", flags->image, "Image file (with --mmproj): its features fill the <image> tokens");
  command->add_option("--pixels", flags->pixels, "Preprocessed [3][S][S] float32 pixels to encode instead of --image");
  command->add_option("--features-out", flags->features_out, "Write the image features (float32) here");
  command->add_option("--tokens", flags->tokens, "Comma-separated token ids")->delimiter(',')->required();
  command->add_option("--logits-out", flags->logits_out, "Write the last position's logits (float32) here");
  command->add_option("--greedy", flags->greedy, "Print a JSON greedy continuation of N tokens")
      ->check(CLI::Range(0, 1 << 16));
  command->add_option("--hidden-layers", flags->model.load.hidden_taps,
                      "Comma-separated layers whose outputs --hidden-out writes (CPU)")->delimiter(',');
  command->add_option("--hidden-out", flags->hidden_out,
                      "Write the --hidden-layers outputs of every token here (float32, [tokens][layers][d_model])");
  add_draft_flag(*command, flags->draft, &flags->model.draft_model);
  command->add_option("--draft-logits-out", flags->draft_logits_out,
                      "Write the logits of the model's draft (--draft-model's block draft: [block][vocab] for the "
                      "block at the last token; else the model's MTP block: [8][vocab], its chained greedy guesses "
                      "after the last token) as float32, its context every token before");
  command->add_option("--guesses", flags->guesses,
                      "With --greedy: comma-separated token ids guessed to follow --tokens, verified in place of --draft's")
      ->delimiter(',');
  command->callback([flags] { eval(*flags); });
}

}  // namespace splash::app

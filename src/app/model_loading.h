#pragma once
// Everything a subcommand needs to use a model: the mapped file, the loaded weights, the
// tokenizer and the chat format, plus the start-up summary printed before work begins.
#include <cstdio>
#include <memory>
#include <optional>
#include <string>

#include "hub/hf_hub.h"
#include "hub/model_catalogue.h"

#include "chat/chat_format.h"
#include "engine/drafter.h"
#include "engine/memory_plan.h"
#include "formats/gguf.h"
#include "model/model_draft.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"
#include "vision/vision_encoder.h"

namespace splash::app {

struct LoadedModel {
  std::string path;
  gguf::File file;
  std::unique_ptr<model::Model> model;
  tokenizer::Tokenizer tokenizer;
  std::unique_ptr<chat::ChatFormat> chat;
  engine::MemoryPlan plan;
  double load_seconds = 0.0;
  std::unique_ptr<vision::VisionEncoder> vision;  // with --mmproj
  std::string vision_path;
};

// The model served when --model is not given: a coding model that can drive an agent (the
// tests name the small SmolLM2-135M, `smollm2-135m`, wherever a small model does the job).
inline constexpr const char* kDefaultModel = "qwen2.5-coder-1.5b";

// The --model flag (a file, a model package directory, a catalogue name or a Hugging Face hub
// owner/repo[:file]: fetched and verified on first use), or the default model.
std::string resolve_model_path(const std::string& model_flag);
// A catalogue model's file, fetched first when missing, with progress on the terminal.
std::string pull_catalogue_model(const hub::CatalogueModel& model);
// A hub GGUF's file in the hub cache, fetched first when missing (hub/hf_hub.h).
std::string pull_hub_model(const hub::HubReference& reference);

// Opens the GGUF and loads tokenizer, chat format and (unless tokenizer_only) the weights,
// with the context the memory plan allows (max_memory: --max-memory, if given), and the
// vision encoder of `mmproj` if one is given (its weights are part of the plan). A model that
// does not fit is refused after printing the plan's breakdown. service_caches: the byte
// budgets of the caller's own caches (a server's stored responses and request bodies), set
// aside in the plan beside the engine's. draft: the draft that will run beside the model
// (open_model_draft), whose weights and contexts the plan counts too.
std::unique_ptr<LoadedModel> load_model(const std::string& path, const model::LoadOptions& options,
                                        bool tokenizer_only = false, std::optional<size_t> max_memory = std::nullopt,
                                        const std::string& mmproj = {},
                                        const std::vector<engine::CacheBudget>& service_caches = {},
                                        const model::ModelDraft* draft = nullptr);

void print_summary(const LoadedModel& loaded, std::FILE* out);

// The draft of the model's own that runs beside it, read before the model loads, since the
// model must then keep the hidden states the draft reads (options.hidden_taps; CPU only for
// now): --draft-model's block draft, else the model's own MTP block (Qwen3.5) where its file
// (model_path) carries one. Null when `mode` uses none, or (auto) where the model has none or
// runs on the GPU; --draft model without one is refused. After the model loads,
// ModelDraft::attach checks that the draft was made for it.
std::shared_ptr<model::ModelDraft> open_model_draft(const std::string& draft_path, const std::string& model_path,
                                                    engine::DraftMode mode, model::LoadOptions& options);

// The prompt tokens of a conversation: rendered by the model's chat format, tokenized with
// special tokens recognised, and BOS prepended when the vocabulary asks for it and the
// template did not write one.
// thinking: a thinking model's reply prompt opens with thinking on, or past an empty block.
std::vector<int32_t> encode_chat(const LoadedModel& loaded, std::span<const chat::ChatMessage> messages,
                                 bool thinking = true);

}  // namespace splash::app

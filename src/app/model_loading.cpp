#include "app/model_loading.h"

#include <fmt/format.h>

#include <chrono>
#include <filesystem>

#include "common/error.h"
#include "engine/draft_state_store.h"
#include "engine/image_feature_cache.h"
#include "model/dflash/block_draft.h"

#include "hub/hf_hub.h"
#include "hub/model_cache.h"
#include "hub/model_package.h"
#include "hub/model_catalogue.h"
#include "hub/model_source.h"
#include "hub/progress.h"
#include "hub/splash_home.h"

namespace splash::app {

std::string pull_catalogue_model(const hub::CatalogueModel& model) {
  return hub::ensure_catalogue_model(model, [](const std::string& label) { return hub::terminal_progress(label); })
      .string();
}

std::string pull_hub_model(const hub::HubReference& reference) {
  const std::string label = reference.file.empty() ? reference.repo : reference.repo + ":" + reference.file;
  return hub::ensure_hub_model(reference, hub::terminal_progress(label)).string();
}

std::string resolve_model_path(const std::string& model_flag) {
  if (model_flag.empty()) {
    const auto* model = hub::find_catalogue_model(kDefaultModel);
    if (!model) fail("the default model '{}' is missing from the catalogue", kDefaultModel);
    return pull_catalogue_model(*model);
  }
  // A model package: its manifest checked, every file's size and sha256 verified.
  if (hub::is_package(model_flag))
    return hub::open_package(model_flag, hub::terminal_progress(model_flag)).model.string();
  std::error_code error;
  if (std::filesystem::exists(model_flag, error)) return model_flag;  // a file named so wins
  if (const auto* model = hub::find_catalogue_model(model_flag)) return pull_catalogue_model(*model);
  // owner/repo[:file] names a GGUF on the Hugging Face hub (a missing dir/model.gguf is a path).
  if (const auto reference = hub::parse_hub_reference(model_flag); reference && !reference->repo.ends_with(".gguf"))
    return pull_hub_model(*reference);
  if (model_flag.find('/') == std::string::npos && !model_flag.ends_with(".gguf"))
    fail("unknown model '{}': no such file, and no model of that name can be pulled (the names: {})", model_flag,
         hub::catalogue_names());
  return model_flag;  // the loader says what is wrong with the path
}

std::unique_ptr<LoadedModel> load_model(const std::string& path, const model::LoadOptions& options,
                                        bool tokenizer_only, std::optional<size_t> max_memory,
                                        const std::string& mmproj, const std::vector<engine::CacheBudget>& service_caches,
                                        const model::ModelDraft* draft) {
  const auto start = std::chrono::steady_clock::now();
  auto file = gguf::File::open(path);
  model::require_supported_architecture(file);  // before tokenizer and chat format complain
  auto tokenizer = tokenizer::Tokenizer::from_gguf(file);
  auto loaded = std::unique_ptr<LoadedModel>(
      new LoadedModel{path, std::move(file), nullptr, std::move(tokenizer), nullptr, {}, 0.0, nullptr, mmproj});
  loaded->chat = chat::chat_format_for(loaded->file);
  if (tokenizer_only) return loaded;
  const model::DeviceChoice device = model::resolve_device(options.device, loaded->file);
  std::optional<engine::GpuMemory> gpu;
  if (device.device == model::Device::Cuda) gpu = engine::GpuMemory{device.summary, device.free_bytes, device.total_bytes};
  model::MemoryNeeds needs = model::estimate_memory(loaded->file, options.kv_type, device.device);
  if (!options.drafts) needs.draft_rewind_bytes = 0;  // (no guesses to take back)
  if (!mmproj.empty()) {
    if (loaded->chat->image_marker().empty())
      fail("{} was given a vision encoder (--mmproj), but its chat format ({}) has no place for images", path,
           loaded->chat->name());
    // The vision encoder runs on the CPU: its memory is in the plan when the plan is this
    // machine's memory (on a GPU it is host memory beside the plan).
    const auto vision_memory = vision::estimate_vision_memory(gguf::File::open(mmproj));
    if (!gpu) {
      needs.weight_bytes += vision_memory.weight_bytes;
      needs.activation_bytes += vision_memory.activation_bytes;  // scratch of one image
    }
  }
  auto caches = engine::engine_caches(/*vision=*/!mmproj.empty());
  caches.insert(caches.end(), service_caches.begin(), service_caches.end());
  if (draft) {
    // The draft runs on the CPU beside the model: its weights and table, the context of each
    // sequence that runs at once (a server's: up to kMaxBatchSequences), and the contexts kept
    // beside the prefix cache.
    const auto memory = draft->memory(loaded->file);
    needs.weight_bytes += memory.weight_bytes;
    needs.mapped_bytes += memory.mapped_bytes;
    const int sequences = options.kv_blocks < 0 ? model::kMaxBatchSequences : 1;
    caches.push_back({fmt::format("{} contexts", draft->kind()), memory.context_bytes * sequences,
                      fmt::format("{} running sequence{}, at most {} positions each", sequences,
                                  sequences == 1 ? "" : "s", draft->most_context_positions())});
    caches.push_back({fmt::format("{} states", draft->kind()), engine::kDraftStateBytes,
                      "the draft's contexts of cached prefixes; least recently used out"});
  }
  // A server runs many sequences (each with a hybrid model's recurrent state; more where the
  // caller asks for state_slots, as bench --parallel does); the other commands one.
  const int sequences = options.kv_blocks < 0 ? std::max(engine::kServerStateSlots, options.state_slots) : 1;
  loaded->plan = engine::plan_memory(needs, max_memory, options.max_context, gpu, std::move(caches), sequences,
                                     options.snapshot_memory);
  loaded->plan.kv_type = kernels::kv_type_name(options.kv_type);
  if (!loaded->plan.fits) {
    std::fputs(loaded->plan.table().c_str(), stderr);
    fail("{} does not fit in the memory budget: {} (free memory or raise --max-memory)", path, loaded->plan.problem);
  }
  model::LoadOptions planned = options;
  planned.device = device.device;
  // On the GPU the kernels' launch shapes are tuned at the first start and remembered.
  planned.tune_kernels = true;
  try {
    planned.tuning_cache_dir = (hub::splash_home() / "tuning").string();
  } catch (const Error&) {  // no home directory: tuned at every start
  }
  planned.max_context = loaded->plan.max_context;
  if (options.kv_blocks < 0) {  // a server: the whole planned pool, shared by its sequences
    planned.kv_blocks = loaded->plan.kv_blocks;
  } else {  // one sequence at a time: a pool for one context
    auto& plan = loaded->plan;
    const size_t per_block = plan.kv_blocks > 0 ? plan.kv_bytes / plan.kv_blocks : 0;
    plan.kv_blocks = (plan.max_context + engine::kBlockTokens - 1) / engine::kBlockTokens;
    plan.kv_bytes = per_block * plan.kv_blocks;
    plan.max_sequences = 1;
    planned.kv_blocks = plan.kv_blocks;
  }
  planned.state_slots = loaded->plan.state_slots;
  planned.state_snapshots = loaded->plan.state_snapshots;
  // The model keeps a reference to the file (embedding rows are read from the mapping), so
  // it is loaded only once the file sits at its final address inside LoadedModel.
  loaded->model = model::load_model(loaded->file, planned);
  if (!mmproj.empty()) {
    loaded->vision = vision::VisionEncoder::load(mmproj, options.threads);
    if (loaded->vision->info().projection_dim != loaded->model->info().d_model)
      fail("{}: the vision encoder projects to width {}, but {} has width {} (a projector of another model?)", mmproj,
           loaded->vision->info().projection_dim, path, loaded->model->info().d_model);
  }
  loaded->load_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return loaded;
}

void print_summary(const LoadedModel& loaded, std::FILE* out) {
  const auto& info = loaded.model->info();
  const double mib = 1024.0 * 1024.0;
  fmt::print(out, "model        {} ({})\n", info.name, loaded.path);
  std::string ffn = info.n_experts > 0
                        ? fmt::format("{} experts of ffn {} ({} per token)", info.n_experts, info.ffn, info.n_experts_used)
                        : fmt::format("ffn {}", info.ffn);
  if (info.shared_expert_ffn > 0) ffn += fmt::format(" and a shared expert of ffn {}", info.shared_expert_ffn);
  fmt::print(out, "architecture {}: {} layers, d_model {}, {} heads / {} kv heads of {}, {}, vocab {}\n",
             info.architecture, info.n_layers, info.d_model, info.n_heads, info.n_kv_heads, info.head_dim, ffn,
             info.vocab);
  fmt::print(out, "weights      {} in file, {:.1f} MiB packed; types {}\n",
             fmt::format("{:.1f} MiB", loaded.file.file_size() / mib), info.packed_weight_bytes / mib,
             info.weight_types);
  if (info.isa == "cuda")
    fmt::print(out, "device       GPU {}; kernels {}{}\n", info.device, info.kernel_shapes,
               info.warm_up_seconds > 0 ? fmt::format("; warmed up in {:.0f} ms", info.warm_up_seconds * 1e3) : "");
  else
    fmt::print(out, "kernels      {} path, {}, {} threads\n", info.isa, info.kernel_shapes, info.threads);
  fmt::print(out, "context      {} tokens (model window {}), KV cache {:.1f} MiB ({} blocks, {})\n", info.context,
             info.native_context, info.kv_cache_bytes / mib, info.kv_blocks, info.kv_type);
  if (info.state_slots > 0)
    fmt::print(out, "recurrent    {} of {} layers Gated DeltaNet: {:.1f} MiB of state a sequence, {} at once\n",
               info.recurrent_layers, info.n_layers, info.recurrent_state_bytes / mib, info.state_slots);
  if (!info.rope_scaling.empty()) fmt::print(out, "rope         {} (reaches {} tokens)\n", info.rope_scaling, info.rope_window);
  if (info.context > info.rope_window)
    fmt::print(out, "warning      the context ({} tokens) exceeds the model's trained window ({}): output quality "
                    "degrades past it\n", info.context, info.rope_window);
  fmt::print(out, "{}", loaded.plan.table());
  fmt::print(out, "chat format  {}\n", loaded.chat->description());
  if (loaded.vision) {
    const auto& v = loaded.vision->info();
    fmt::print(out, "vision       {} encoder ({}): {} layers, width {}; each view (tile or whole image) is {}x{} "
                    "pixels -> {} tokens; {:.1f} MiB, types {}\n",
               v.projector, loaded.vision_path, v.layers, v.width, v.image_size, v.image_size, v.tokens_per_view,
               v.weight_bytes / mib, v.weight_types);
  }
  fmt::print(out, "loaded in    {:.2f} s\n", loaded.load_seconds);
}

}  // namespace splash::app

namespace splash::app {

std::vector<int32_t> encode_chat(const LoadedModel& loaded, std::span<const chat::ChatMessage> messages,
                                 bool thinking) {
  return chat::encode_prompt(*loaded.chat, loaded.tokenizer, messages, {}, thinking);
}

std::shared_ptr<model::ModelDraft> open_model_draft(const std::string& draft_path, const std::string& model_path,
                                                    engine::DraftMode mode, model::LoadOptions& options) {
  if (mode == engine::DraftMode::None || mode == engine::DraftMode::Lookup) return nullptr;
  std::shared_ptr<model::ModelDraft> draft;
  if (!draft_path.empty()) {
    if (options.device == model::Device::Cuda)
      fail("--draft-model: block drafts run with the model on the CPU for now (--device cpu)");
    draft = std::make_shared<model::dflash::BlockDraft>(gguf::File::open(draft_path), options.threads);
  } else {
    const auto file = gguf::File::open(model_path);
    model::require_supported_architecture(file);
    // The MTP block runs on the CPU: auto leaves a model the GPU takes there, without it (and
    // without packing the block's weights only to drop them).
    const bool on_gpu = options.device == model::Device::Cuda ||
                        (options.device == model::Device::Auto &&
                         model::resolve_device(model::Device::Auto, file).device == model::Device::Cuda);
    if (on_gpu && mode == engine::DraftMode::Auto) return nullptr;
    draft = model::open_own_draft(file, options.threads);
    if (!draft && mode == engine::DraftMode::Model)
      fail("--draft model needs a draft: --draft-model FILE (tools/dflash/train.py makes one), or a model with its own "
           "MTP block (Qwen3.5)");
    if (!draft) return nullptr;
    if (options.device == model::Device::Cuda)
      fail("--draft model: the model's MTP block runs with the model on the CPU for now (--device cpu)");
  }
  const auto& taps = draft->target_taps();
  if (!options.hidden_taps.empty() && options.hidden_taps != taps) {
    // (other layers asked for, to be written out: auto then leaves the MTP block out)
    if (draft_path.empty() && mode == engine::DraftMode::Auto) return nullptr;
    fail("the {} reads the outputs of other layers than --hidden-layers names", draft->kind());
  }
  options.hidden_taps = taps;
  // (auto keeps the model where the draft runs: a GPU would refuse the taps)
  if (options.device == model::Device::Auto) options.device = model::Device::Cpu;
  return draft;
}

}  // namespace splash::app

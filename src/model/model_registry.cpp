// The registry of supported architectures: adding a model family is adding a directory
// under model/ and a line here.
#include <fmt/format.h>

#include <string>

#include "common/error.h"
#include "model/llama/llama_model.h"
#include "model/llama/mtp_head.h"
#include "model/model.h"
#include "model/model_draft.h"
#if SPLASH_HAVE_CUDA
#include "kernels/cuda/device.h"
#endif

namespace splash::model {
namespace {

using Loader = std::unique_ptr<Model> (*)(const gguf::File&, const LoadOptions&);
using Estimator = MemoryNeeds (*)(const gguf::File&, KvType);

struct Family {
  const char* architecture;
  Loader load;
  Estimator estimate;
  Loader load_cuda;  // null: the family has no CUDA implementation (or the build has no CUDA)
  Estimator estimate_cuda;
  // Whether --device auto takes the GPU for it: false while its CUDA path has not yet passed
  // its GPU tests on a device (--device cuda still runs it there).
  bool auto_on_gpu = true;
};

#if SPLASH_HAVE_CUDA
#define SPLASH_CUDA_IMPL(load, estimate) load, estimate
#else
#define SPLASH_CUDA_IMPL(load, estimate) nullptr, nullptr
#endif

constexpr Family kFamilies[] = {
    {"llama", llama::load_llama, llama::estimate_llama_memory,
     SPLASH_CUDA_IMPL(llama::load_llama_cuda, llama::estimate_llama_memory_cuda)},
    // llama + q/k/v biases, NEOX RoPE
    {"qwen2", llama::load_llama, llama::estimate_llama_memory,
     SPLASH_CUDA_IMPL(llama::load_llama_cuda, llama::estimate_llama_memory_cuda)},
    // llama + per-head q/k norms, NEOX RoPE
    {"qwen3", llama::load_llama, llama::estimate_llama_memory,
     SPLASH_CUDA_IMPL(llama::load_llama_cuda, llama::estimate_llama_memory_cuda)},
    // qwen3 attention + a mixture-of-experts FFN in every layer
    {"qwen3moe", llama::load_llama, llama::estimate_llama_memory,
     SPLASH_CUDA_IMPL(llama::load_llama_cuda, llama::estimate_llama_memory_cuda)},
    // Qwen3.5: Gated DeltaNet layers (a recurrent state per sequence) between gated
    // full-attention layers with partial RoPE
    {"qwen35", llama::load_llama, llama::estimate_llama_memory,
     SPLASH_CUDA_IMPL(llama::load_llama_cuda, llama::estimate_llama_memory_cuda)},
    // Qwen3.5's hybrid with a mixture-of-experts FFN and a shared expert in every layer
    {"qwen35moe", llama::load_llama, llama::estimate_llama_memory,
     SPLASH_CUDA_IMPL(llama::load_llama_cuda, llama::estimate_llama_memory_cuda)},
    // Qwen3-Next: Qwen3.5-MoE's layers before it, the DeltaNet's value heads grouped by key
    // head and its in-projection stored fused (ssm_ba; ssm_in in older files)
    {"qwen3next", llama::load_llama, llama::estimate_llama_memory,
     SPLASH_CUDA_IMPL(llama::load_llama_cuda, llama::estimate_llama_memory_cuda)},
};

}  // namespace

void Model::save_state(int, int) { fail("save_state: this model keeps no recurrent-state snapshots"); }
void Model::restore_state(int, int, int) { fail("restore_state: this model keeps no recurrent-state snapshots"); }
void Model::rewind_state(int, int) { fail("rewind_state: this model keeps no recurrent state"); }

std::string supported_architectures() {
  std::string names;
  for (const auto& family : kFamilies) names += (names.empty() ? "" : ", ") + std::string(family.architecture);
  return names;
}

namespace {
const Family& family_of(const gguf::File& file) {
  const auto architecture = file.opt_string("general.architecture");
  if (!architecture) fail("{}: no general.architecture in the file; is it a model GGUF?", file.path());
  for (const auto& family : kFamilies)
    if (*architecture == family.architecture) return family;
  fail("{}: architecture '{}' is not supported (supported: {})", file.path(), *architecture, supported_architectures());
}
}  // namespace

void require_supported_architecture(const gguf::File& file) { family_of(file); }

const char* device_name(Device device) {
  switch (device) {
    case Device::Auto: return "auto";
    case Device::Cpu: return "cpu";
    case Device::Cuda: return "cuda";
  }
  return "?";
}

DeviceChoice resolve_device(Device requested) {
  DeviceChoice choice;
  choice.summary = "cpu";
  if (requested == Device::Cpu) return choice;
#if SPLASH_HAVE_CUDA
  std::string why;
  if (const auto gpu = kernels::cuda::find_device(&why)) {
    choice.device = Device::Cuda;
    choice.summary = gpu->summary();
    choice.free_bytes = gpu->free_bytes;
    choice.total_bytes = gpu->total_bytes;
    return choice;
  }
  if (requested == Device::Cuda) fail("--device cuda: {}", why);
  choice.why_not_gpu = why;
#else
  if (requested == Device::Cuda)
    fail("--device cuda: this splash was built without the CUDA backend (no nvcc at build time)");
  choice.why_not_gpu = "built without the CUDA backend";
#endif
  return choice;
}

DeviceChoice resolve_device(Device requested, const gguf::File& file) {
  DeviceChoice choice = resolve_device(requested);
  const Family& family = family_of(file);
  if (requested == Device::Auto && choice.device == Device::Cuda && !family.load_cuda) {
    choice = DeviceChoice{};
    choice.summary = "cpu";
    choice.why_not_gpu = fmt::format("architecture '{}' has no CUDA implementation yet", family.architecture);
  } else if (requested == Device::Auto && choice.device == Device::Cuda && !family.auto_on_gpu) {
    choice = DeviceChoice{};
    choice.summary = "cpu";
    choice.why_not_gpu = fmt::format(
        "architecture '{}' runs on the GPU with --device cuda; its CUDA path has not yet passed its GPU tests on a device",
        family.architecture);
  }
  return choice;
}

std::unique_ptr<Model> load_model(const gguf::File& file, const LoadOptions& options) {
  const Family& family = family_of(file);
  if (options.device == Device::Auto) fail("load_model: resolve the device first");
  if (options.device == Device::Cuda) {
    if (!family.load_cuda) fail("{}: architecture '{}' has no CUDA implementation yet", file.path(), family.architecture);
    if (!options.hidden_taps.empty()) fail("{}: hidden-state taps are kept on the CPU path only (use --device cpu)", file.path());
    return family.load_cuda(file, options);
  }
  return family.load(file, options);
}

std::shared_ptr<ModelDraft> open_own_draft(const gguf::File& file, int threads) {
  family_of(file);
  if (!llama::MtpHead::present(file)) return nullptr;
  return std::make_shared<llama::MtpHead>(file, threads);
}

MemoryNeeds estimate_memory(const gguf::File& file, KvType kv_type, Device device) {
  const Family& family = family_of(file);
  if (device == Device::Cuda) {
    if (!family.estimate_cuda) fail("{}: architecture '{}' has no CUDA implementation yet", file.path(), family.architecture);
    return family.estimate_cuda(file, kv_type);
  }
  return family.estimate(file, kv_type);
}

}  // namespace splash::model

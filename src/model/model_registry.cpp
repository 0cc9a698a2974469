// The registry of supported architectures: adding a model family is adding a directory
// under model/ and a line here.
#include <string>

#include "common/error.h"
#include "model/llama/llama_model.h"
#include "model/model.h"

namespace splash::model {
namespace {

struct Family {
  const char* architecture;
  std::unique_ptr<Model> (*load)(const gguf::File&, const LoadOptions&);
  MemoryNeeds (*estimate)(const gguf::File&, KvType);
};

constexpr Family kFamilies[] = {
    {"llama", llama::load_llama, llama::estimate_llama_memory},
    {"qwen2", llama::load_llama, llama::estimate_llama_memory},  // llama + q/k/v biases, NEOX RoPE
    {"qwen3", llama::load_llama, llama::estimate_llama_memory},  // llama + per-head q/k norms, NEOX RoPE
};

}  // namespace

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

std::unique_ptr<Model> load_model(const gguf::File& file, const LoadOptions& options) {
  return family_of(file).load(file, options);
}

MemoryNeeds estimate_memory(const gguf::File& file, KvType kv_type) { return family_of(file).estimate(file, kv_type); }

}  // namespace splash::model

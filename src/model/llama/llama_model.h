#pragma once
// The llama family (SmolLM2, Llama 2/3 style): RMSNorm, adjacent-pair RoPE, grouped-query
// attention, SwiGLU, optionally tied embeddings.
#include <memory>

#include "model/model.h"

namespace splash::model::llama {

std::unique_ptr<Model> load_llama(const gguf::File& file, const LoadOptions& options);
MemoryNeeds estimate_llama_memory(const gguf::File& file, KvType kv_type);

}  // namespace splash::model::llama

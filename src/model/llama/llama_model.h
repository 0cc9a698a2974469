#pragma once
// The llama family (SmolLM2, Llama 2/3 style): RMSNorm, adjacent-pair RoPE, grouped-query
// attention, SwiGLU, optionally tied embeddings.
#include <memory>

#include "model/model.h"

namespace splash::model::llama {

std::unique_ptr<Model> load_llama(const gguf::File& file, const LoadOptions& options);
MemoryNeeds estimate_llama_memory(const gguf::File& file, KvType kv_type);

#if SPLASH_HAVE_CUDA
// The same family on the GPU (llama_model_cuda.cpp): weights in their GGUF types in device
// memory, the KV pool in device memory, logits copied back once per pass.
std::unique_ptr<Model> load_llama_cuda(const gguf::File& file, const LoadOptions& options);
MemoryNeeds estimate_llama_memory_cuda(const gguf::File& file, KvType kv_type);
#endif

}  // namespace splash::model::llama

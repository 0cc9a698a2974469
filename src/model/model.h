#pragma once
// What the engine sees of a model: load it from a GGUF file, feed it tokens, read logits.
// The model owns one sequence's KV cache for now (the scheduler issue turns this into a
// paged cache shared by many sequences).
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "formats/gguf.h"

namespace splash::model {

struct ModelInfo {
  std::string architecture;  // "llama"
  std::string name;          // general.name
  int n_layers = 0, d_model = 0, n_heads = 0, n_kv_heads = 0, head_dim = 0, ffn = 0, vocab = 0;
  int native_context = 0;    // the model's trained window
  int context = 0;           // what this instance's KV cache holds
  size_t packed_weight_bytes = 0;
  size_t kv_cache_bytes = 0;
  size_t decode_read_bytes = 0;  // weight bytes one decode step streams from memory
  std::string weight_types;  // e.g. "Q4_1 (210), Q8_0 (1), F32 (61)"
  std::string kernel_shapes; // which kernel instantiation runs: exact compile-time shapes or run-time
  std::string isa;           // "avx512" or "avx2"
  int threads = 0;
};

struct LoadOptions {
  int max_context = 0;  // 0: the model's native window
  int threads = 0;      // 0: all cores
};

// What a model needs in memory, known from its file before its weights are loaded (the
// engine's memory plan is built from this).
struct MemoryNeeds {
  size_t weight_bytes = 0;        // packed weights, resident
  size_t mapped_bytes = 0;        // file pages read at run time (e.g. a tied embedding table)
  size_t kv_bytes_per_token = 0;  // keys + values of every layer for one position
  size_t activation_bytes = 0;    // scratch of one prefill chunk
  int native_context = 0;
};

class Model {
 public:
  virtual ~Model() = default;
  virtual const ModelInfo& info() const = 0;
  // Appends tokens to the sequence and returns the logits after the last one. Long inputs
  // are processed in chunks. Throws splash::Error if the context would overflow or a token
  // id is out of range.
  virtual std::span<const float> forward(std::span<const int32_t> tokens) = 0;
  // Tokens in the sequence so far.
  virtual int position() const = 0;
  // Forgets everything after the first n tokens (n <= position()).
  virtual void truncate(int n) = 0;
};

// Loads a GGUF of a supported architecture; refuses others with a message naming the
// supported architectures.
std::unique_ptr<Model> load_model(const gguf::File& file, const LoadOptions& options);
MemoryNeeds estimate_memory(const gguf::File& file);
std::string supported_architectures();
// Throws splash::Error naming the supported architectures unless the file has one of them.
void require_supported_architecture(const gguf::File& file);

}  // namespace splash::model

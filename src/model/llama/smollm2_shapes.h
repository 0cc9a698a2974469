#pragma once
// Exact shapes of the shipped models: SmolLM2-135M-Instruct (the test model) and
// Qwen2.5-Coder-1.5B-Instruct (the default). The llama-family forward pass is instantiated
// with these as compile-time constants; any other llama-family GGUF runs the same code with
// RuntimeShapes.
#include "kernels/cpu/shipped_shapes.h"

namespace splash::model::llama {

struct SmolLM2_135M {
  static constexpr const char* name = "SmolLM2-135M";
  static constexpr int n_layers = 30;
  static constexpr int d_model = 576;
  static constexpr int n_heads = 9;
  static constexpr int n_kv_heads = 3;
  static constexpr int head_dim = 64;
  static constexpr int ffn = 1536;
  static constexpr int vocab = 49152;
};
static_assert(kernels::is_shipped_width(SmolLM2_135M::d_model) && kernels::is_shipped_width(SmolLM2_135M::ffn),
              "SmolLM2-135M widths must have compile-time matmul kernels (kernels/cpu/shipped_shapes.h)");

// Qwen2.5-Coder-1.5B-Instruct (architecture qwen2), the default model of `splash serve`.
struct Qwen25Coder_1_5B {
  static constexpr const char* name = "Qwen2.5-Coder-1.5B";
  static constexpr int n_layers = 28;
  static constexpr int d_model = 1536;
  static constexpr int n_heads = 12;
  static constexpr int n_kv_heads = 2;
  static constexpr int head_dim = 128;
  static constexpr int ffn = 8960;
  static constexpr int vocab = 151936;
};
static_assert(kernels::is_shipped_width(Qwen25Coder_1_5B::d_model) && kernels::is_shipped_width(Qwen25Coder_1_5B::ffn) &&
                  kernels::is_shipped_width(Qwen25Coder_1_5B::n_heads * Qwen25Coder_1_5B::head_dim),
              "Qwen2.5-Coder-1.5B widths must have compile-time matmul kernels (kernels/cpu/shipped_shapes.h)");

struct RuntimeShapes {
  static constexpr const char* name = nullptr;
  int n_layers = 0, d_model = 0, n_heads = 0, n_kv_heads = 0, head_dim = 0, ffn = 0, vocab = 0;
};

}  // namespace splash::model::llama

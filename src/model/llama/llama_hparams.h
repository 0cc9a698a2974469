#pragma once
// What the llama family's backends share: the hyperparameters read from a GGUF (with the
// variants qwen2, qwen3, qwen3moe and the hybrids qwen35, qwen35moe and qwen3next) and the checked lookup of
// its tensors. The CPU model
// (llama_model.cpp) and the CUDA model (llama_model_cuda.cpp) both build on this.
#include <string>
#include <vector>

#include "formats/gguf.h"
#include "kernels/cpu/gated_delta_net.h"
#include "kernels/cpu/packed_weight.h"
#include "model/model.h"
#include "model/rope_scaling.h"
#include "model/llama/smollm2_shapes.h"

namespace splash::model::llama {

using kernels::DeltaNetShape;

struct Hyperparameters {
  std::string architecture;
  RuntimeShapes shapes;
  int native_context = 0;
  float rope_base = 10000.0f;
  // RoPE's stretching: the file's own (`<arch>.rope.scaling.*`), or YaRN chosen at load for a
  // window past the trained one (fit_rope_to_context). rope_window: how far it reaches.
  RopeScaling rope_scaling;
  int rope_window = 0;
  float rms_eps = 1e-5f;
  // The family's variants: Qwen2 adds q/k/v biases, Qwen3 normalises q and k per head; both
  // rotate the two halves of a head (NEOX RoPE) where llama GGUFs rotate adjacent pairs.
  bool neox_rope = false;
  bool qkv_bias = false;
  bool qk_norm = false;
  // Qwen3-MoE: every layer's FFN is a mixture of n_experts SwiGLU experts of width shapes.ffn
  // (expert_feed_forward_length), n_experts_used of them per token, chosen by a softmax
  // router whose top-k weights are renormalised to sum to 1. 0: a dense FFN.
  int n_experts = 0;
  int n_experts_used = 0;
  // Qwen3.5-MoE and Qwen3-Next: a shared expert of this width beside the routed ones, in every layer, its
  // output scaled by sigmoid(x . ffn_gate_inp_shexp). 0: none.
  int shared_expert_ffn = 0;
  // RoPE on the first rope_dims of each head only (Qwen3.5: 64 of 256); = head_dim when whole.
  int rope_dims = 0;
  // Qwen3.5 (qwen35, qwen35moe) and Qwen3-Next (qwen3next, every FFN a mixture of experts), the
  // hybrids: recurrent[l] marks the Gated DeltaNet layers (linear
  // attention with a state per sequence), the rest are full attention whose q projection
  // gives each head's query and an output gate side by side ([q | gate] per head: the
  // attention's output is multiplied by sigmoid(gate) before attn_output). The FFN's norm is
  // post_attention_norm. Empty: every layer is attention (the other variants).
  std::vector<bool> recurrent;
  DeltaNetShape delta_net;
  bool hybrid() const { return !recurrent.empty(); }
  int recurrent_layer_count() const;
  // One sequence's recurrent state, every DeltaNet layer's (0 for an attention-only model).
  size_t recurrent_state_bytes() const { return recurrent_layer_count() * delta_net.state_floats() * sizeof(float); }
  int attention_layer_count() const { return shapes.n_layers - recurrent_layer_count(); }
};

// Reads and checks them; throws splash::Error naming what is inconsistent or unsupported.
Hyperparameters read_hyperparameters(const gguf::File& file);

// A load's context past rope_window stretches RoPE with YaRN for the Qwen families (Qwen's
// recipe: over the 32K pre-training window, by the factor the context needs, at most 4x).
// Files that state their own scaling, other families and contexts within the window are
// left as read.
void fit_rope_to_context(Hyperparameters& h, int context);

// A matrix tensor of the file, checked against the shape [rows][cols] the architecture
// expects (any type; each backend checks the types its kernels read).
const gguf::TensorInfo& matrix_tensor(const gguf::File& file, const std::string& name, int rows, int cols);

// A stack of `count` matrices [count][rows][cols] (the experts of a layer), checked likewise.
const gguf::TensorInfo& matrix_stack_tensor(const gguf::File& file, const std::string& name, int count, int rows,
                                            int cols);

// A matrix tensor as rows of the file's bytes (matrix_tensor's check; any type).
kernels::WeightSource matrix_source(const gguf::File& file, const std::string& name, int rows, int cols);

// A Gated DeltaNet layer's in-projection, rows [q | k | v | z | beta | alpha] (value heads in
// the file's order, DeltaNetShape::mixed_width), as row ranges of the file's tensors (layer
// prefix p): what both backends stack into the one matrix the layer's GEMMs read.
std::vector<kernels::WeightSource> delta_net_in_projection(const gguf::File& file, const std::string& p,
                                                           const DeltaNetShape& d, int d_model);

// A hybrid's gated attention query, attn_q's rows [q0 | gate0 | q1 | gate1 | ...] per head,
// as row ranges: every head's query rows, then every head's gate rows.
std::vector<kernels::WeightSource> gated_query_rows(const gguf::File& file, const std::string& p, int n_heads,
                                                    int head_dim, int d_model);

// An F32 vector of n elements (norm weights, biases), copied out.
std::vector<float> vector_weight(const gguf::File& file, const std::string& name, int n);

// The ModelInfo fields every backend fills alike: architecture, name, shapes, windows.
void fill_model_info(const gguf::File& file, const Hyperparameters& h, int max_context, ModelInfo& info);

// The names of layer l's tensors ("blk.<l>.").
std::string layer_prefix(int layer);

}  // namespace splash::model::llama

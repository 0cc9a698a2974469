#pragma once
// The non-matmul operations of a transformer layer on the CPU, dispatched to the ISA
// kernels picked at start-up.
#include <span>

#include "kernels/cpu/isa_kernels.h"
#include "kernels/cpu/thread_pool.h"

namespace splash::kernels {

void rms_norm(const float* x, const float* weight, float* out, int n, int dim, float eps, ThreadPool& pool);
// out[n][ffn] = silu(gate) * up, where gate_up[n] = [gate(ffn) | up(ffn)].
void silu_mul(const float* gate_up, float* out, int n, int ffn, ThreadPool& pool);
// GELU with the tanh approximation (gelu_pytorch_tanh), in place on n rows of `width`.
void gelu_tanh(float* x, int n, int width, ThreadPool& pool);
// In place on n rows `stride` apart: softmax of scale * x over each row's first `width`
// values; the rest of the row, up to `stride`, becomes 0.
void softmax_rows(float* x, int n, int width, int stride, float scale, ThreadPool& pool);
// Causal grouped-query attention of each sequence's new tokens against its paged cache; the
// sequences of a batch share one parallel pass.
void attention(std::span<const AttentionArgs> sequences, ThreadPool& pool);

// Rotary embedding on adjacent pairs (x[2i], x[2i+1]) (ggml's "normal" RoPE as used by the
// llama family in GGUF), using a precomputed cos/sin table [position][head_dim / 2].
void rope_adjacent(float* x, int n_tokens, int row_stride, int n_heads, int head_dim, const int* positions,
                   const float* cos_table, const float* sin_table);
// The same rotation on the two halves of each head, pairs (x[i], x[i + head_dim/2]): the
// "NEOX" layout of Qwen2/Qwen3 GGUFs. With rotated_dims (< head_dim: Qwen3.5's partial RoPE),
// only each head's first rotated_dims turn, pairs (x[i], x[i + rotated_dims/2]), and the
// table is [position][rotated_dims / 2].
void rope_neox(float* x, int n_tokens, int row_stride, int n_heads, int head_dim, const int* positions,
               const float* cos_table, const float* sin_table, int rotated_dims = 0);
// rope_neox for a few rows (a draft's) without tables: each row's cos and sin of
// positions[t] * inv_freq[i] (rotated_dims / 2 of them) computed here in double, times
// attention_factor.
void rope_neox_at(float* x, int n_tokens, int row_stride, int n_heads, int head_dim, const int* positions,
                  std::span<const double> inv_freq, double attention_factor, int rotated_dims);

}  // namespace splash::kernels

#pragma once
// The table of kernels one instruction-set translation unit provides. matmul.cpp and
// ops.cpp pick a table once (cpu_features.h) and call through it; nothing else sees ISAs.
#include <cstdint>

#include "kernels/cpu/kv_layout.h"
#include "kernels/cpu/packed_weight.h"

namespace splash::kernels {

// Activations for a matmul: N rows of K floats, plus their int8 quantization (per 32
// values one scale; per 16 values the scaled sum of codes, for the m terms).
struct MatmulInput {
  const float* x = nullptr;
  const int8_t* codes = nullptr;
  const float* scales = nullptr;
  const float* sums = nullptr;
  int n = 0;
  int k = 0;
};

// Causal attention of one sequence's new tokens against its paged KV cache (kv_layout.h).
struct AttentionArgs {
  const float* q;        // [n_tokens][q_stride], heads at [h * head_dim]
  int q_stride;
  float* out;            // [n_tokens][n_heads * head_dim]
  int n_tokens;
  int first_position;    // position of q's first token; token i attends to 0..first_position+i
  int n_heads;
  int n_kv_heads;
  int head_dim;
  float scale;
  KvType kv_type;
  const uint8_t* kv;     // this layer's record in block 0 (blocks are block_stride bytes apart)
  size_t block_stride;
  size_t head_stride;    // bytes between the kv heads of one block
  const int32_t* block_table;  // the sequence's blocks, covering positions 0..first_position+n_tokens-1
};

// A work item's share of the keys: tiles [tile_begin, tile_end) of 16 positions. With
// `partial`, the item writes each query head's unnormalised state there instead of the
// output ([head][max, sum, acc[head_dim]], for one query token) and the caller merges the
// parts (split-K: a long context's single decode token keeps every thread busy).
struct AttentionSplit {
  int tile_begin = 0;
  int tile_end = 1 << 30;
  float* partial = nullptr;
};

// One value head of a Gated DeltaNet layer over one sequence's new tokens. The state holds
// head_v rows of head_k floats, row j being column j of the delta rule's S (so each output
// value reads one contiguous row). Per token t: S *= decay[t]; S += k (beta[t] (v - S^T k))^T;
// out = scale * S^T q. q and k are L2-normalised already, [n_tokens][head_k] each.
struct DeltaRuleArgs {
  float* state;
  int head_k, head_v, n_tokens;
  const float* q;
  const float* k;
  const float* v;  // [n_tokens][v_stride], this head's values at v[t * v_stride]
  int v_stride;
  const float* decay;  // [n_tokens], exp(g) in (0, 1]
  const float* beta;   // [n_tokens]
  float* out;          // [n_tokens][out_stride]
  int out_stride;
  float scale;
};

// Query tokens per attention work item; each ISA shares key tiles among as many of them
// as its registers allow (kQueryBlock in its translation unit).
inline constexpr int kAttentionTokenBlock = 4;

struct IsaKernels {
  const char* name;
  void (*quantize_rows)(const float* x, int n, int k, int8_t* codes, float* scales, float* sums);
  // y[token][row] for rows of tiles [tile_begin, tile_end) and tokens [0, in.n).
  void (*matmul_tiles)(const PackedWeight& w, int tile_begin, int tile_end, const MatmulInput& in, float* y,
                       int ldy);
  // One work item of causal attention: the query heads of one kv head, for `tokens` query
  // tokens from first_token on.
  void (*attention_item)(const AttentionArgs& args, int kv_head, int first_token, int tokens,
                         const AttentionSplit& split);
  void (*rms_norm)(const float* x, const float* weight, float* out, int n, int dim, float eps);
  void (*silu_mul)(const float* gate_up, float* out, int n, int ffn);  // gate_up = [n][2*ffn]
  void (*gelu_tanh)(float* x, int n, int width);
  void (*softmax_rows)(float* x, int n, int width, int stride, float scale);
  void (*delta_rule)(const DeltaRuleArgs& args);  // head_k a multiple of 16, at most 256
};

const IsaKernels& avx2_kernels();
const IsaKernels& avx512_kernels();
const IsaKernels& selected_kernels();

}  // namespace splash::kernels

#pragma once
// The CUDA kernels a transformer layer is built from, as host functions over device
// pointers. Each queues its work on the stream and returns; errors of a launch surface at
// the next Stream::synchronize. Activations are float32 rows; weights stay in their GGUF
// block formats on the GPU (exact values, dequantized inside the kernels).
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "formats/ggml_types.h"
#include "kernels/cuda/device.h"

namespace splash::kernels::cuda {

// The weight types the CUDA kernels read (the same set as the CPU path).
bool is_supported_weight_type(GgmlType type);

// The GEMV launch shapes for integer weight types (matmul.cu): `tokens` activation rows per
// weight pass (1, 2, 4, 8), `rows` weight rows per warp (sharing the activation loads), and
// `parts` 32-weight parts a lane loads before decoding any (the bytes it keeps in flight).
// The tuner times them per matrix and records its choice in the DeviceWeight.
struct GemvVariant {
  int tokens, rows, parts;
};
std::span<const GemvVariant> gemv_variants();
constexpr int kGemvBuckets = 4;  // passes of 1, 2, up to 4, up to 8 activation rows
int gemv_bucket(int tokens);     // 0..3

// A row-major matrix [rows][cols] of a GGUF type on the device, in the GPU layout
// (quant_blocks.cuh: each row's blocks split into an aligned quant stream and a header
// stream, the bytes and values GGUF's own; float types as they come), with the GEMV variant
// chosen for each bucket (an index into gemv_variants(), or -1: the built-in default).
struct DeviceWeight {
  GgmlType type = GgmlType::F32;
  const uint8_t* data = nullptr;
  int rows = 0, cols = 0;
  int8_t gemv_choice[kGemvBuckets] = {-1, -1, -1, -1};
  size_t row_bytes() const;
  size_t bytes() const { return row_bytes() * rows; }
};
// The launch shape the GEMV of an integer type takes for a pass of `tokens` rows over w (its
// tuned choice, else the built-in one).
GemvVariant gemv_shape(const DeviceWeight& w, int tokens);
size_t weight_row_bytes(GgmlType type, int cols);  // of the GPU layout
size_t gguf_row_bytes(GgmlType type, int cols);    // of the file
// Repacks a [rows][cols] matrix copied to the device as the file holds it (gguf) into the
// GPU layout (packed, weight_row_bytes * rows bytes; the two must not overlap).
void pack_weight(GgmlType type, int rows, int cols, const void* gguf, void* packed, Stream& stream);

// The int8 copy of activation rows that the GEMV of integer weight types reads: codes
// [n][cols], per group of 16 a scale and the scale times the group's code sum. Made once per
// input (quantize_rows, or by rms_norm / silu_mul as they write the rows) and shared by
// every matmul of that input; valid until the next one is made into the same buffer.
//
// A copy may leave its rows' RMSNorm pending (`sumsq`, written by gemv_residual_norm): the
// codes are those of x * weight, and each group's sum of x^2 lets the GEMV divide its results
// by rms(x) = sqrt(sum / cols + norm_eps) itself (int8 codes do not change with a row's
// scale, so the norm's one per-row factor can wait until the dot products are summed).
struct QuantizedRows {
  const int8_t* codes = nullptr;
  const float* scales = nullptr;
  const float* sums = nullptr;
  int n = 0, cols = 0;
  const float* sumsq = nullptr;  // [n][cols / 16], or null: nothing pending
  float norm_eps = 0.0f;
};
// Bytes of a quantized copy of n rows of cols.
inline size_t quantized_activation_bytes(int n, int cols) {
  return (static_cast<size_t>(n) * cols + 15) / 16 * 16 + 2 * sizeof(float) * static_cast<size_t>(n) * (cols / 16);
}
// Where a quantized copy of n rows of cols lies in `buffer` (grown if needed).
struct QuantizedRowsBuffer {
  int8_t* codes;
  float *scales, *sums;
  float* sumsq = nullptr;  // normed_rows_in only
  QuantizedRows view(int n, int cols) const { return {codes, scales, sums, n, cols}; }
  // The rows with their RMSNorm pending (written by gemv_residual_norm).
  QuantizedRows pending_norm(int n, int cols, float eps) const { return {codes, scales, sums, n, cols, sumsq, eps}; }
};
QuantizedRowsBuffer quantized_rows_in(DeviceBuffer& buffer, int n, int cols);
// The same with room for each group's sum of squares (gemv_residual_norm's output).
QuantizedRowsBuffer normed_rows_in(DeviceBuffer& buffer, int n, int cols);
QuantizedRows quantize_rows(const float* x, int ldx, int n, int cols, DeviceBuffer& into, Stream& stream);

// Scratch a matmul may need: an f16 copy of one matrix and of its activations, for the
// tensor-core path of many-token batches (cuBLAS); the int8 copy of the activations the GEMV
// of integer weight types reads.
struct MatmulScratch {
  DeviceBuffer weight_f16, activations_f16, activations_q8;
  DeviceBuffer split_partials, split_arrivals;  // the small GEMM's split K
};

// Up to this many activation rows a matmul of an integer weight type runs as one GEMV pass
// over the quantized weights (int8 activations, dp4a); more go to the small GEMM, where the
// two meet on the H200 (docs/PERF.md: from 5 rows it is ahead at every Qwen3-8B matrix).
constexpr int kGemvLargestBatch = 4;

// From there up to this many rows, integer weight types go to the small GEMM (small_gemm.cu:
// the quantized weights decoded once per pass into shared memory, f16 tensor cores).
constexpr int kSmallGemmLargestBatch = 64;

// y[t][r] (+)= sum_c w[r][c] * x[t][c] for t < n. Few rows (decode, verify blocks) stream the
// quantized weights once per 8 rows (GEMV: integer types against int8 activations, a scale
// per 16, with dp4a; float types in float); up to kSmallGemmLargestBatch rows of integer
// types take the small GEMM; more dequantize the matrix to f16 and run one cuBLAS GEMM with
// float accumulation. `xq`, when given, is x already quantized (the
// GEMV of integer types reads it instead of quantizing x again). `always_gemv` keeps a huge
// matrix (the output head) off the f16 copy (GEMV passes where the small GEMM cannot serve).
void matmul(const DeviceWeight& w, const float* x, int ldx, int n, float* y, int ldy, bool accumulate,
            MatmulScratch& scratch, Stream& stream, const QuantizedRows* xq = nullptr, bool always_gemv = false);
// The GEMV alone, for tests and the tuner (variant: an index into gemv_variants() matching
// the pass size, or -1 for the weight's choice).
void gemv(const DeviceWeight& w, const float* x, int ldx, int n, float* y, int ldy, bool accumulate,
          MatmulScratch& scratch, Stream& stream, const QuantizedRows* xq = nullptr, int variant = -1);
// The tensor-core path alone: w dequantized to f16, x converted to f16, one cuBLAS GEMM with
// float accumulation (for tests and the benchmark of where it overtakes the GEMV).
void matmul_tensor_cores(const DeviceWeight& w, const float* x, int ldx, int n, float* y, int ldy, bool accumulate,
                         MatmulScratch& scratch, Stream& stream);
// The small GEMM alone, for 1 to kSmallGemmLargestBatch rows of an integer weight type (f16
// operands, float accumulation); `splits` of K (0: chosen for the GPU's SMs). Two kernels:
// the streamed one (Q4_K and Q6_K: each warp's weights straight into its mma fragments)
// where it serves, else the staged one (every type: weights decoded into shared memory);
// `kernel` Staged keeps to the second (tests and the benchmark compare them).
enum class SmallGemmKernel { Auto, Staged };
constexpr int kSmallGemmStreamedLargestBatch = kSmallGemmLargestBatch;
bool small_gemm_reads(GgmlType type);
void small_gemm(const DeviceWeight& w, const float* x, int ldx, int n, float* y, int ldy, bool accumulate,
                MatmulScratch& scratch, Stream& stream, int splits = 0, SmallGemmKernel kernel = SmallGemmKernel::Auto);
// Sizes the small GEMM's split-K scratch for any matrix up to `widest_rows` rows now (waits
// for the stream), so that no pass allocates (a recorded one could not).
void reserve_small_gemm(MatmulScratch& scratch, int widest_rows, Stream& stream);
size_t small_gemm_scratch_bytes(int widest_rows);  // what reserve_small_gemm holds
// w as f16 [rows][cols] (the tensor-core path's first half; tests check it exactly).
void dequantize_to_f16(const DeviceWeight& w, void* out_f16, Stream& stream);

// GEMVs of an integer weight type with the kernel that would follow them fused in, so a
// decode layer is fewer launches (gemv_fused.cu), in the launch shape of the weight's plain
// batch-1 GEMV (gemv_shape), for 1 to kFusedLargestBatch activation rows (in.n): batch-1
// decode, and verify rows, each of which comes out the very bits it would alone.
constexpr int kFusedLargestBatch = 8;
//
// x += w . in (the residual stream: in.n rows of w.rows, one after another); then, with
// `norm`, the int8 copy of x * norm into `next` (normed_rows_in, in.n rows of w.rows) with
// each group's sum of x^2: the next RMSNorm, left pending for the GEMV that reads `next`
// (QuantizedRows::sumsq). w.rows must be a multiple of 16.
void gemv_residual_norm(const DeviceWeight& w, const QuantizedRows& in, float* x, const float* norm,
                        const QuantizedRowsBuffer* next, Stream& stream);
// `out` (ffn wide) = the int8 copy of silu(gate . in) * (up . in), w = [gate; up]
// stacked (2 ffn rows), in's pending norm applied. ffn must be a multiple of 16.
void gemv_swiglu(const DeviceWeight& w, const QuantizedRows& in, const QuantizedRowsBuffer& out, Stream& stream);
// Whether those serve w (an integer weight type, rows a multiple of 16 or 32).
bool gemv_fused_reads(const DeviceWeight& w);

// out[t] = x[t] * weight / sqrt(mean(x[t]^2) + eps), rows of width d, each row alone. With
// `quantized` (n <= kFusedLargestBatch, d a multiple of 16), also writes out's int8 copy there.
void rms_norm(const float* x, const float* weight, float* out, int n, int d, float eps, Stream& stream,
              const QuantizedRowsBuffer* quantized = nullptr);
// out[t][i] = silu(gate_up[t][i]) * gate_up[t][ffn + i]; with `quantized` (laid out for n
// rows of ffn: quantized_rows_in; ffn a multiple of 16), also out's int8 copy.
void silu_mul(const float* gate_up, float* out, int n, int ffn, Stream& stream,
              const QuantizedRowsBuffer* quantized = nullptr);
// Qwen3.5's gated attention output: x[t][i] *= sigmoid(gate[t][i]) for t < n, i < width.
void sigmoid_gate(float* x, int ldx, const float* gate, int ldg, int n, int width, Stream& stream);
// A shared expert's output added in, gated per row: x[t] += sigmoid(normed[t] . gate) * y[t]
// (rows of d floats, t < n).
void add_gated_rows(float* x, const float* y, const float* normed, const float* gate, int n, int d, Stream& stream);
// x[t] = row ids[t] of the table, dequantized.
void embed(const DeviceWeight& table, const int32_t* ids, int n, float* x, Stream& stream);
// out[i] = x[rows[i]] (d floats each), for i < n.
void gather_rows(const float* x, const int32_t* rows, int n, int d, float* out, Stream& stream);

// The paged KV pool on the GPU: per layer, per block, keys then values, each
// [kv head][kKvBlockTokens positions][head_dim] elements; for 8-bit pools one float scale per
// (position, kv head) in a separate array of the same order.
enum class KvElement : uint8_t { I8, F16, F32 };
struct KvPool {
  KvElement element = KvElement::I8;
  uint8_t* data = nullptr;
  float* scales = nullptr;  // I8 only
  int blocks = 0, n_layers = 0, n_kv_heads = 0, head_dim = 0;
  size_t element_bytes() const { return element == KvElement::I8 ? 1 : element == KvElement::F16 ? 2 : 4; }
  // One layer's keys or values of one block: n_kv_heads * kKvBlockTokens * head_dim elements.
  size_t half_block_elements() const;
  size_t block_elements() const { return 2 * half_block_elements(); }  // keys + values
  size_t bytes() const;         // data
  size_t scale_bytes() const;   // scales
};
size_t kv_pool_bytes_per_block(KvElement element, int n_layers, int n_kv_heads, int head_dim);
// Copies the first `tokens` positions of a block of every layer to another block.
void copy_kv_block(const KvPool& pool, int from, int to, Stream& stream);

// The batch as the attention kernels see it, in device memory: per token its absolute
// position and the offset of its sequence's block table in `block_tables`; and how attention
// walks it (attention_work below): the tokens of single-token slices (decode) one by one,
// split along their context; the tokens of longer slices (prompt chunks, verify blocks) in
// tiles of consecutive tokens of one sequence that share every K/V block they read.
struct BatchLayout {
  const int32_t* positions = nullptr;
  const int32_t* table_offsets = nullptr;
  const int32_t* block_tables = nullptr;
  int n_tokens = 0;
  const int32_t* decode_tokens = nullptr;  // token indices
  int n_decode = 0;
  int decode_context = 0;                  // the longest context among them (first_position + 1)
  const int32_t* tiles = nullptr;          // pairs {first token, token count}
  int n_tiles = 0;
  // Each decode token split along its context as a pass of that token alone would split it
  // (every other choice of the launch is the same for one token as for many), so its row
  // is the bits batch-1 decode gives: verify rows. The caller gives tokens of one context
  // bucket (decode_context_bucket) a launch, and at most kFusedLargestBatch of them.
  bool splits_as_alone = false;
};

// The index lists of BatchLayout, built on the host from the batch's slices (first token
// index, token count, first position): `decode` token indices, `tiles` pairs.
struct SliceSpan {
  int first_token, count, first_position;
};
struct AttentionWork {
  std::vector<int32_t> decode, tiles;
  int decode_context = 0;
};
AttentionWork attention_work(std::span<const SliceSpan> slices, int n_heads, int n_kv_heads, int head_dim);
// The context the decode launch is shaped for: decode_context rounded up to a power of two
// (256 at least). Attention's launches are the same for every context of one bucket, so a
// recorded decode step (a CUDA graph) is kept per bucket; a split past a token's length
// comes out empty.
int decode_context_bucket(int context);

// After the QKV projection, in place on qkv rows [q heads | k heads | v heads]: adds the
// biases (Qwen2), normalises each q and k head (Qwen3), rotates q and k (adjacent pairs, or
// NEOX halves), and stores k and v into the pool at each token's position.
struct QkvPostArgs {
  float* qkv = nullptr;
  int ld = 0;
  int n_heads = 0, n_kv_heads = 0, head_dim = 0;
  const float* bias = nullptr;      // [q | k | v] widths, or null
  const float* q_norm = nullptr;    // [head_dim], or null
  const float* k_norm = nullptr;
  float norm_eps = 1e-6f;
  bool neox_rope = false;
  // Pair i at position p turns by p * rope_inv_freq[i] (head_dim / 2 doubles on the device;
  // model/rope_scaling.h), its cosine and sine scaled by rope_attention_factor.
  const double* rope_inv_freq = nullptr;
  double rope_attention_factor = 1.0;
  // NEOX RoPE on the first rope_dims values of each head only (Qwen3.5: 64 of 256; its table
  // then has rope_dims / 2 frequencies); 0: the whole head.
  int rope_dims = 0;
  int layer = 0;
  constexpr int rotated_dims(int head_dim) const { return rope_dims > 0 ? rope_dims : head_dim; }
};
void qkv_post(const QkvPostArgs& args, const BatchLayout& batch, const KvPool& pool, Stream& stream);
// Whether the epilogue turns args.rope_dims of a head (the whole head always; a part with
// NEOX pairs whose partners sit a power of two lanes apart, as Qwen3.5's 64 of 256).
bool rope_dims_supported(const QkvPostArgs& args);

// Causal attention of every token's q heads over its sequence's cached positions 0..pos
// (grouped-query: query head h reads kv head h / (n_heads / n_kv_heads)), split along the
// context for long sequences and merged by log-sum-exp. out: [n_tokens][n_heads * head_dim].
struct AttentionScratch {
  DeviceBuffer partials;
  DeviceBuffer arrivals;  // zeroed once; each launch leaves them zero
};
size_t attention_scratch_bytes(int n_heads, int head_dim);
// Allocates the scratch (never during a recorded pass).
void reserve_attention(AttentionScratch& scratch, int head_dim, Stream& stream);
// With `quantized`, in a pass of decode tokens only whose splits are merged, out's int8 copy
// too (as quantize_rows makes it, n_heads x head_dim wide); returns whether it was written.
// With `post` (only where attention_takes_qkv_post), qkv_post's work is done inside the
// attention kernel (the raw QKV rows in, the new keys and values appended): one launch a
// layer less, the same bits.
bool attention(const float* qkv, int ld, float* out, int n_heads, const BatchLayout& batch, const KvPool& pool,
               int layer, AttentionScratch& scratch, Stream& stream, const QuantizedRowsBuffer* quantized = nullptr,
               const QkvPostArgs* post = nullptr);
// Whether attention() can take qkv_post's work in this pass: decode tokens only, on the
// tensor-core decode kernel. SPLASH_CUDA_FOLD_QKV=0 says no (to compare).
bool attention_takes_qkv_post(const BatchLayout& batch, const KvPool& pool, int n_heads);

// The best tokens of logits rows (best_tokens.cu): for each of `rows` rows of `vocab`
// logits, its kBestTokenCount best (id, logit), best first; equal logits rank by the lower id
// (NaN below every number; a vocabulary shorter than kBestTokenCount is padded with id -1).
constexpr int kBestTokenCount = 64;
constexpr int kBestSegment = 8192;  // logits a block of the first kernel takes
struct BestToken {
  int32_t id;
  float logit;
};
int best_token_segments(int vocab);
size_t best_tokens_scratch_bytes(int rows, int vocab);
void best_tokens(const float* logits, int rows, int vocab, int32_t* scratch, BestToken* best, Stream& stream);

}  // namespace splash::kernels::cuda

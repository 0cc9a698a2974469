#include "kernels/cpu/ops.h"

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

namespace splash::kernels {

namespace {
// Splits n rows into at most pool.size() contiguous ranges; small inputs stay on one thread.
template <typename Fn>
void for_row_ranges(int n, int min_rows_per_task, ThreadPool& pool, Fn&& fn) {
  const int tasks = std::clamp(n / std::max(1, min_rows_per_task), 1, pool.size());
  if (tasks == 1) return fn(0, n);
  pool.run(tasks, [&](int task) { fn(n * task / tasks, n * (task + 1) / tasks); });
}
}  // namespace

void rms_norm(const float* x, const float* weight, float* out, int n, int dim, float eps, ThreadPool& pool) {
  const auto& kernels = selected_kernels();
  for_row_ranges(n, 8, pool, [&](int begin, int end) {
    kernels.rms_norm(x + static_cast<size_t>(begin) * dim, weight, out + static_cast<size_t>(begin) * dim,
                     end - begin, dim, eps);
  });
}

void silu_mul(const float* gate_up, float* out, int n, int ffn, ThreadPool& pool) {
  const auto& kernels = selected_kernels();
  for_row_ranges(n, 4, pool, [&](int begin, int end) {
    kernels.silu_mul(gate_up + static_cast<size_t>(begin) * 2 * ffn, out + static_cast<size_t>(begin) * ffn,
                     end - begin, ffn);
  });
}

void gelu_tanh(float* x, int n, int width, ThreadPool& pool) {
  const auto& kernels = selected_kernels();
  for_row_ranges(n, 4, pool, [&](int begin, int end) {
    kernels.gelu_tanh(x + static_cast<size_t>(begin) * width, end - begin, width);
  });
}

void softmax_rows(float* x, int n, int width, int stride, float scale, ThreadPool& pool) {
  const auto& kernels = selected_kernels();
  for_row_ranges(n, 4, pool, [&](int begin, int end) {
    kernels.softmax_rows(x + static_cast<size_t>(begin) * stride, end - begin, width, stride, scale);
  });
}

namespace {
// Split-K for a single query token over a long context: parts of at least this many key
// tiles (512 positions), at most kMaxAttentionParts of them.
constexpr int kMinTilesPerPart = 32;
constexpr int kMaxAttentionParts = 8;

// Merges the parts of a split key range into the normalised output of one query token.
void merge_parts(const AttentionArgs& a, const float* partial, int parts) {
  const int stride = a.head_dim + 2;
  for (int h = 0; h < a.n_heads; ++h) {
    float top = -INFINITY;
    for (int p = 0; p < parts; ++p) top = std::max(top, partial[(static_cast<size_t>(p) * a.n_heads + h) * stride]);
    float* out = a.out + static_cast<size_t>(h) * a.head_dim;
    std::fill(out, out + a.head_dim, 0.0f);
    float total = 0.0f;
    for (int p = 0; p < parts; ++p) {
      const float* part = partial + (static_cast<size_t>(p) * a.n_heads + h) * stride;
      const float weight = std::exp(part[0] - top);
      total += weight * part[1];
      for (int d = 0; d < a.head_dim; ++d) out[d] += weight * part[2 + d];
    }
    const float inverse = 1.0f / total;
    for (int d = 0; d < a.head_dim; ++d) out[d] *= inverse;
  }
}
}  // namespace

void attention(std::span<const AttentionArgs> sequences, ThreadPool& pool) {
  const auto& kernels = selected_kernels();
  // Work items: (sequence, kv head, block of query tokens, range of key tiles). Later
  // queries see more keys, so each sequence's biggest items come first, and sequences with
  // many new tokens (prefill chunks) before single decode tokens; smaller items then fill
  // the gaps between threads. A single token over a long context is split by key range.
  struct Item {
    int sequence, kv_head, first, tokens;
    AttentionSplit split;
  };
  std::vector<Item> items;
  std::vector<int> order(sequences.size()), parts(sequences.size(), 1);
  std::vector<size_t> partial_offset(sequences.size(), 0);
  size_t partial_floats = 0;
  for (size_t i = 0; i < order.size(); ++i) {
    order[i] = static_cast<int>(i);
    const AttentionArgs& a = sequences[i];
    const int tiles = (a.first_position + a.n_tokens + 15) / 16;
    if (a.n_tokens == 1 && tiles >= 2 * kMinTilesPerPart) {
      parts[i] = std::min(kMaxAttentionParts, tiles / kMinTilesPerPart);
      partial_offset[i] = partial_floats;
      partial_floats += static_cast<size_t>(parts[i]) * a.n_heads * (a.head_dim + 2);
    }
  }
  std::vector<float> partial(partial_floats);
  std::stable_sort(order.begin(), order.end(),
                   [&](int a, int b) { return sequences[a].n_tokens > sequences[b].n_tokens; });
  for (int s : order) {
    const AttentionArgs& args = sequences[s];
    if (parts[s] > 1) {
      const int tiles = (args.first_position + 1 + 15) / 16;
      for (int p = 0; p < parts[s]; ++p)
        for (int h = 0; h < args.n_kv_heads; ++h) {
          float* part = partial.data() + partial_offset[s] + static_cast<size_t>(p) * args.n_heads * (args.head_dim + 2);
          items.push_back({s, h, 0, 1, {tiles * p / parts[s], tiles * (p + 1) / parts[s], part}});
        }
      continue;
    }
    const int blocks = (args.n_tokens + kAttentionTokenBlock - 1) / kAttentionTokenBlock;
    for (int block = blocks - 1; block >= 0; --block) {
      const int first = block * kAttentionTokenBlock;
      for (int h = 0; h < args.n_kv_heads; ++h)
        items.push_back({s, h, first, std::min(kAttentionTokenBlock, args.n_tokens - first), {}});
    }
  }
  pool.run(static_cast<int>(items.size()), [&](int i) {
    const Item& item = items[i];
    kernels.attention_item(sequences[item.sequence], item.kv_head, item.first, item.tokens, item.split);
  });
  for (size_t s = 0; s < sequences.size(); ++s)
    if (parts[s] > 1) merge_parts(sequences[s], partial.data() + partial_offset[s], parts[s]);
}

namespace {
// Rotates the pairs (v[first(i)], v[second(i)]) of every head by the table's angles.
template <typename Pair>
void rope(float* x, int n_tokens, int row_stride, int n_heads, int head_dim, const int* positions,
          const float* cos_table, const float* sin_table, Pair pair, int rotated_dims = 0) {
  const int half = (rotated_dims > 0 ? rotated_dims : head_dim) / 2;
  for (int t = 0; t < n_tokens; ++t) {
    const float* c = cos_table + static_cast<size_t>(positions[t]) * half;
    const float* s = sin_table + static_cast<size_t>(positions[t]) * half;
    for (int h = 0; h < n_heads; ++h) {
      float* v = x + static_cast<size_t>(t) * row_stride + static_cast<size_t>(h) * head_dim;
      for (int i = 0; i < half; ++i) {
        const auto [first, second] = pair(i, half);
        const float a = v[first], b = v[second];
        v[first] = a * c[i] - b * s[i];
        v[second] = a * s[i] + b * c[i];
      }
    }
  }
}
}  // namespace

void rope_adjacent(float* x, int n_tokens, int row_stride, int n_heads, int head_dim, const int* positions,
                   const float* cos_table, const float* sin_table) {
  rope(x, n_tokens, row_stride, n_heads, head_dim, positions, cos_table, sin_table,
       [](int i, int) { return std::pair{2 * i, 2 * i + 1}; });
}

void rope_neox(float* x, int n_tokens, int row_stride, int n_heads, int head_dim, const int* positions,
               const float* cos_table, const float* sin_table, int rotated_dims) {
  rope(x, n_tokens, row_stride, n_heads, head_dim, positions, cos_table, sin_table,
       [](int i, int half) { return std::pair{i, i + half}; }, rotated_dims);
}

void rope_neox_at(float* x, int n_tokens, int row_stride, int n_heads, int head_dim, const int* positions,
                  std::span<const double> inv_freq, double attention_factor, int rotated_dims) {
  const size_t half = inv_freq.size();
  std::vector<float> cos_table(static_cast<size_t>(n_tokens) * half), sin_table(cos_table.size());
  std::vector<int> rows(n_tokens);  // (each row's own entry of the tables)
  for (int t = 0; t < n_tokens; ++t) {
    rows[t] = t;
    for (size_t i = 0; i < half; ++i) {
      const double angle = positions[t] * inv_freq[i];
      cos_table[t * half + i] = static_cast<float>(std::cos(angle) * attention_factor);
      sin_table[t * half + i] = static_cast<float>(std::sin(angle) * attention_factor);
    }
  }
  rope_neox(x, n_tokens, row_stride, n_heads, head_dim, rows.data(), cos_table.data(), sin_table.data(), rotated_dims);
}

}  // namespace splash::kernels

#include "kernels/cpu/ops.h"

#include <algorithm>
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

void attention(std::span<const AttentionArgs> sequences, ThreadPool& pool) {
  const auto& kernels = selected_kernels();
  // Work items: (sequence, kv head, block of query tokens). Later queries see more keys, so
  // each sequence's biggest items come first, and sequences with many new tokens (prefill
  // chunks) before single decode tokens; smaller items then fill the gaps between threads.
  struct Item {
    int sequence, kv_head, first, tokens;
  };
  std::vector<Item> items;
  std::vector<int> order(sequences.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int>(i);
  std::stable_sort(order.begin(), order.end(),
                   [&](int a, int b) { return sequences[a].n_tokens > sequences[b].n_tokens; });
  for (int s : order) {
    const AttentionArgs& args = sequences[s];
    const int blocks = (args.n_tokens + kAttentionTokenBlock - 1) / kAttentionTokenBlock;
    for (int block = blocks - 1; block >= 0; --block) {
      const int first = block * kAttentionTokenBlock;
      for (int h = 0; h < args.n_kv_heads; ++h)
        items.push_back({s, h, first, std::min(kAttentionTokenBlock, args.n_tokens - first)});
    }
  }
  pool.run(static_cast<int>(items.size()), [&](int i) {
    const Item& item = items[i];
    kernels.attention_item(sequences[item.sequence], item.kv_head, item.first, item.tokens);
  });
}

namespace {
// Rotates the pairs (v[first(i)], v[second(i)]) of every head by the table's angles.
template <typename Pair>
void rope(float* x, int n_tokens, int row_stride, int n_heads, int head_dim, const int* positions,
          const float* cos_table, const float* sin_table, Pair pair) {
  const int half = head_dim / 2;
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
               const float* cos_table, const float* sin_table) {
  rope(x, n_tokens, row_stride, n_heads, head_dim, positions, cos_table, sin_table,
       [](int i, int half) { return std::pair{i, i + half}; });
}

}  // namespace splash::kernels

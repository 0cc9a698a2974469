// CPU kernels against the gguf package's dequantization (tests/golden/quant, made by
// tools/make_quant_golden.py) and against double-precision dot products.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "common/error.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/isa_kernels.h"
#include "kernels/cpu/kv_layout.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/cpu/packed_weight.h"
#include "kernels/cpu/quant_formats.h"
#include "model_fixture.h"

namespace splash::kernels {
namespace {

constexpr int kRows = 18, kCols = 512;

std::vector<uint8_t> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << path;
  return {std::istreambuf_iterator<char>(in), {}};
}

struct Golden {
  GgmlType type;
  std::vector<uint8_t> raw;
  std::vector<float> dequantized;
};

Golden load_golden(const std::string& name, GgmlType type) {
  Golden g{type, read_file(splash::testing::golden_path("quant/" + name + ".raw")), {}};
  const auto f = read_file(splash::testing::golden_path("quant/" + name + ".f32"));
  g.dequantized.resize(f.size() / 4);
  std::memcpy(g.dequantized.data(), f.data(), f.size());
  return g;
}

const std::pair<const char*, GgmlType> kTypes[] = {
    {"F32", GgmlType::F32},   {"F16", GgmlType::F16},   {"BF16", GgmlType::BF16}, {"Q8_0", GgmlType::Q8_0},
    {"Q4_0", GgmlType::Q4_0}, {"Q4_1", GgmlType::Q4_1}, {"Q4_K", GgmlType::Q4_K}, {"Q6_K", GgmlType::Q6_K},
    {"Q5_0", GgmlType::Q5_0}, {"Q5_1", GgmlType::Q5_1},
};

class KernelFormat : public ::testing::TestWithParam<std::pair<const char*, GgmlType>> {};

// Our scalar dequantizer equals gguf-py's up to float rounding order (1 ulp-ish).
TEST_P(KernelFormat, DequantizeMatchesGgufPackage) {
  const auto golden = load_golden(GetParam().first, GetParam().second);
  ASSERT_EQ(golden.dequantized.size(), static_cast<size_t>(kRows * kCols));
  std::vector<float> row(kCols);
  const size_t row_bytes = golden.raw.size() / kRows;
  for (int r = 0; r < kRows; ++r) {
    dequantize_row(golden.type, golden.raw.data() + r * row_bytes, row.data(), kCols);
    for (int c = 0; c < kCols; ++c) {
      const float want = golden.dequantized[r * kCols + c];
      ASSERT_NEAR(row[c], want, 1e-6f * std::max(1.0f, std::fabs(want))) << "row " << r << " col " << c;
    }
  }
}

// Packing is lossless: every packed row reads back as the dequantized row.
TEST_P(KernelFormat, PackingIsLossless) {
  const auto golden = load_golden(GetParam().first, GetParam().second);
  const auto packed = pack_weight({golden.type, golden.raw.data(), kRows, kCols});
  EXPECT_EQ(packed.tiles, 2);
  for (int r = 0; r < kRows; ++r) {
    const auto row = unpack_row(packed, r);
    for (int c = 0; c < kCols; ++c) {
      const float want = golden.dequantized[r * kCols + c];
      ASSERT_NEAR(row[c], want, 1e-6f * std::max(1.0f, std::fabs(want))) << "row " << r << " col " << c;
    }
  }
}

// A fused matrix taken apart (row_range) and stacked in another order packs exactly the rows
// named, in that order (how a Qwen3-Next in-projection is regrouped at load); a range past
// the matrix is refused.
TEST_P(KernelFormat, RowRangesStackInTheOrderGiven) {
  const auto golden = load_golden(GetParam().first, GetParam().second);
  const WeightSource whole{golden.type, golden.raw.data(), kRows, kCols};
  const std::vector<WeightSource> pieces = {row_range(whole, kRows - 3, 3), row_range(whole, 0, 2),
                                            row_range(whole, 5, kRows - 8)};
  const auto packed = pack_weights(pieces);
  ASSERT_EQ(packed.rows, kRows - 3);
  std::vector<int> order = {kRows - 3, kRows - 2, kRows - 1, 0, 1};
  for (int r = 5; r < kRows - 3; ++r) order.push_back(r);
  for (size_t i = 0; i < order.size(); ++i) {
    const auto row = unpack_row(packed, static_cast<int>(i));
    for (int c = 0; c < kCols; ++c) {
      const float want = golden.dequantized[order[i] * kCols + c];
      ASSERT_NEAR(row[c], want, 1e-6f * std::max(1.0f, std::fabs(want))) << "packed row " << i << " col " << c;
    }
  }
  EXPECT_THROW(row_range(whole, kRows - 2, 3), splash::Error);
  EXPECT_THROW(row_range(whole, -1, 2), splash::Error);
  EXPECT_THROW(row_range(whole, 0, -1), splash::Error);
}

// The matmul kernels of both instruction sets against a double-precision product with the
// exact weights. Integer kernels quantize activations to int8 per 32 values, so each
// product carries at most |w| * d_x / 2 of rounding error (d_x = block max / 127): the
// tolerance is that bound summed over the row, computed exactly here, plus float slack.
TEST_P(KernelFormat, MatmulMatchesDoublePrecision) {
  const auto golden = load_golden(GetParam().first, GetParam().second);
  const auto packed = pack_weight({golden.type, golden.raw.data(), kRows, kCols});
  const bool integer = is_integer_quantized(golden.type);
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<const IsaKernels*> paths{&avx2_kernels()};
  const auto features = detect_cpu_features();
  if (features.avx512f && features.avx512bw && features.avx512vl && features.avx512dq && features.avx512vnni)
    paths.push_back(&avx512_kernels());
  for (int n : {1, 2, 3, 5, 8, 13}) {
    std::vector<float> x(static_cast<size_t>(n) * kCols);
    for (auto& v : x) v = normal(rng);
    x[3] = 40.0f;  // an outlier, as real activations have
    std::vector<int8_t> codes(x.size());
    std::vector<float> scales(x.size() / 32), sums(x.size() / 16);
    for (const IsaKernels* kernels : paths) {
      kernels->quantize_rows(x.data(), n, kCols, codes.data(), scales.data(), sums.data());
      const MatmulInput input{x.data(), codes.data(), scales.data(), sums.data(), n, kCols};
      std::vector<float> y(static_cast<size_t>(n) * kRows, -1.0f);
      kernels->matmul_tiles(packed, 0, packed.tiles, input, y.data(), kRows);
      for (int t = 0; t < n; ++t)
        for (int r = 0; r < kRows; ++r) {
          double exact = 0.0, bound = 0.0, magnitude = 0.0;
          for (int c = 0; c < kCols; ++c) {
            const double w = golden.dequantized[r * kCols + c];
            exact += w * x[t * kCols + c];
            magnitude += std::fabs(w * x[t * kCols + c]);
            if (integer) bound += std::fabs(w) * scales[t * (kCols / 32) + c / 32] * 0.5;
          }
          const double tolerance = bound + 1e-5 * magnitude + 1e-6;
          ASSERT_NEAR(y[t * kRows + r], exact, tolerance)
              << kernels->name << " n=" << n << " token " << t << " row " << r;
        }
    }
  }
}

// Codes at their largest against activations at +-127 everywhere: the kernels' integer sums
// are then at their largest too (the AVX2 path adds several k-groups' products in 16 bits
// before widening, which must not wrap or saturate). Every code byte of the golden blocks is
// set to all ones (Q4_K's 6-bit scales and mins too), their fp16 factors kept.
TEST_P(KernelFormat, MatmulHoldsAtTheLargestCodes) {
  auto golden = load_golden(GetParam().first, GetParam().second);
  if (!is_integer_quantized(golden.type)) GTEST_SKIP() << "float weights";
  // [first, end) byte ranges of codes within one block, per type (ggml's block layouts).
  const std::vector<std::pair<int, int>> codes = [&]() -> std::vector<std::pair<int, int>> {
    switch (golden.type) {
      case GgmlType::Q4_0: case GgmlType::Q5_0: case GgmlType::Q8_0: return {{2, 0}};
      case GgmlType::Q4_1: case GgmlType::Q5_1: return {{4, 0}};
      case GgmlType::Q4_K: return {{4, 0}};
      case GgmlType::Q6_K: return {{0, 192}};
      default: return {};
    }
  }();
  ASSERT_FALSE(codes.empty()) << "no code layout for this type";
  const size_t block_bytes = type_traits(static_cast<uint32_t>(golden.type))->block_bytes;
  for (size_t block = 0; block < golden.raw.size(); block += block_bytes)
    for (auto [first, end] : codes)
      std::memset(golden.raw.data() + block + first, golden.type == GgmlType::Q8_0 ? 0x7F : 0xFF,
                  (end ? end : block_bytes) - first);
  const auto packed = pack_weight({golden.type, golden.raw.data(), kRows, kCols});
  std::vector<float> w(static_cast<size_t>(kRows) * kCols);
  const size_t row_bytes = golden.raw.size() / kRows;
  for (int r = 0; r < kRows; ++r) dequantize_row(golden.type, golden.raw.data() + r * row_bytes, &w[r * kCols], kCols);
  std::vector<const IsaKernels*> paths{&avx2_kernels()};
  const auto features = detect_cpu_features();
  if (features.avx512f && features.avx512bw && features.avx512vl && features.avx512dq && features.avx512vnni)
    paths.push_back(&avx512_kernels());
  for (float sign : {1.0f, -1.0f}) {
    constexpr int n = 5;  // a block of 4 tokens and one alone
    std::vector<float> x(static_cast<size_t>(n) * kCols, sign);
    std::vector<int8_t> x_codes(x.size());
    std::vector<float> scales(x.size() / 32), sums(x.size() / 16);
    for (const IsaKernels* kernels : paths) {
      kernels->quantize_rows(x.data(), n, kCols, x_codes.data(), scales.data(), sums.data());
      ASSERT_EQ(std::abs(x_codes[0]), 127);
      const MatmulInput input{x.data(), x_codes.data(), scales.data(), sums.data(), n, kCols};
      std::vector<float> y(static_cast<size_t>(n) * kRows, 0.0f);
      kernels->matmul_tiles(packed, 0, packed.tiles, input, y.data(), kRows);
      for (int t = 0; t < n; ++t)
        for (int r = 0; r < kRows; ++r) {
          double exact = 0.0, magnitude = 0.0;
          for (int c = 0; c < kCols; ++c) {
            exact += static_cast<double>(w[r * kCols + c]) * sign;
            magnitude += std::fabs(w[r * kCols + c]);
          }
          ASSERT_NEAR(y[t * kRows + r], exact, 1e-4 * magnitude + 1e-6)
              << kernels->name << " sign " << sign << " token " << t << " row " << r;
        }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllTypes, KernelFormat, ::testing::ValuesIn(kTypes),
                         [](const auto& info) { return std::string(info.param.first); });

TEST(KernelQuantize, CodesReconstructWithinHalfAStep) {
  std::vector<float> x(64);
  for (int i = 0; i < 64; ++i) x[i] = std::sin(i * 0.37f) * (i + 1);
  x[40] = 0.0f;
  std::vector<float> zeros(32, 0.0f);
  for (const IsaKernels* kernels : {&avx2_kernels()}) {
    std::vector<int8_t> codes(64);
    std::vector<float> scales(2), sums(4);
    kernels->quantize_rows(x.data(), 1, 64, codes.data(), scales.data(), sums.data());
    for (int i = 0; i < 64; ++i) EXPECT_NEAR(codes[i] * scales[i / 32], x[i], scales[i / 32] * 0.5f + 1e-6f);
    for (int h = 0; h < 4; ++h) {
      int sum = 0;
      for (int i = 0; i < 16; ++i) sum += codes[h * 16 + i];
      EXPECT_FLOAT_EQ(sums[h], sum * scales[h / 2]);
    }
    kernels->quantize_rows(zeros.data(), 1, 32, codes.data(), scales.data(), sums.data());
    EXPECT_EQ(scales[0], 0.0f);
    EXPECT_EQ(codes[0], 0);
  }
}

// Attention of 6 queries against keys and values in a paged cache (blocks scattered in the
// pool, in both precisions), both ISAs, against a direct softmax in double over the values
// the cache holds (read back with load_kv_position, so the attention arithmetic is checked
// at 1e-5 independent of the storage rounding, which is checked on its own below), for
// groups of 2, 3 and 5 query heads per kv head (5 = one block of 4 plus a single).
class KernelAttention : public ::testing::TestWithParam<std::pair<int, int>> {};

TEST_P(KernelAttention, MatchesDirectSoftmax) {
  const int kHeads = GetParam().first, kKvHeads = GetParam().second;
  // 6 query tokens: one block of 4 sharing key tiles, then 2 alone.
  constexpr int kHeadDim = 64, kPositions = 37, kTokens = 6, kPoolBlocks = 7;
  const std::vector<int32_t> table{5, 0, 3};  // positions 0-15 in block 5, 16-31 in 0, 32-36 in 3
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> keys(kPositions * kKvHeads * kHeadDim), values(keys.size());
  for (auto& v : keys) v = normal(rng);
  for (auto& v : values) v = normal(rng) * 3.0f;
  std::vector<float> q(kTokens * kHeads * kHeadDim);
  for (auto& v : q) v = normal(rng) * 2.0f;
  for (const KvType type : {KvType::Q8, KvType::F16, KvType::F32}) {
    const KvHeadLayout layout{type, kHeadDim};
    const size_t block_stride = layout.bytes() * kKvHeads;
    std::vector<uint8_t> pool(block_stride * kPoolBlocks, 0xFF);  // garbage (NaN floats) where nothing is stored
    std::vector<float> held_keys(keys.size()), held_values(values.size());
    for (int p = 0; p < kPositions; ++p) {
      uint8_t* record = pool.data() + table[p / 16] * block_stride;
      const size_t row = static_cast<size_t>(p) * kKvHeads * kHeadDim;
      store_kv_position(layout, record, layout.bytes(), kKvHeads, p % 16, &keys[row], &values[row]);
      load_kv_position(layout, record, layout.bytes(), kKvHeads, p % 16, &held_keys[row], &held_values[row]);
    }
    for (const IsaKernels* kernels : {&avx2_kernels(), &avx512_kernels()}) {
      if (kernels == &avx512_kernels() && selected_cpu_path() != CpuPath::Avx512) continue;
      std::vector<float> out(q.size(), 0.0f);
      const AttentionArgs args{q.data(), kHeads * kHeadDim, out.data(), kTokens, kPositions - kTokens, kHeads,
                               kKvHeads, kHeadDim, 0.125f, type, pool.data(), block_stride, layout.bytes(),
                               table.data()};
      for (int kv = 0; kv < kKvHeads; ++kv) kernels->attention_item(args, kv, 0, kTokens, {});
      for (int token = 0; token < kTokens; ++token)
        for (int h = 0; h < kHeads; ++h) {
          const int kv = h / (kHeads / kKvHeads), visible = kPositions - kTokens + token + 1;
          auto at = [&](int p, int d) { return (static_cast<size_t>(p) * kKvHeads + kv) * kHeadDim + d; };
          std::vector<double> scores(visible);
          double top = -1e30, total = 0.0;
          for (int p = 0; p < visible; ++p) {
            double s = 0.0;
            for (int d = 0; d < kHeadDim; ++d) s += q[(token * kHeads + h) * kHeadDim + d] * held_keys[at(p, d)];
            scores[p] = s * 0.125;
            top = std::max(top, scores[p]);
          }
          for (auto& s : scores) total += (s = std::exp(s - top));
          for (int d = 0; d < kHeadDim; ++d) {
            double want = 0.0;
            for (int p = 0; p < visible; ++p) want += scores[p] / total * held_values[at(p, d)];
            ASSERT_NEAR(out[(token * kHeads + h) * kHeadDim + d], want, 1e-4)
                << kernels->name << " " << kv_type_name(type);
          }
        }
    }
  }
}

// A single query token over a long context is split by key range across threads (split-K)
// and merged: the result must equal one pass over all keys, for sequences of a batch that
// are split and ones that are not.
TEST(KernelAttentionSplit, SplitKeyRangeMatchesOnePass) {
  constexpr int kHeads = 9, kKvHeads = 3, kHeadDim = 64, kPositions = 16200, kBlocks = (kPositions + 15) / 16;
  const KvHeadLayout layout{KvType::Q8, kHeadDim};
  const size_t head_stride = layout.bytes() * kBlocks;
  std::vector<uint8_t> pool(head_stride * kKvHeads);
  std::vector<int32_t> table(kBlocks);
  for (int b = 0; b < kBlocks; ++b) table[b] = (b * 37) % kBlocks;  // scattered
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> k(kKvHeads * kHeadDim), v(k.size());
  for (int p = 0; p < kPositions; ++p) {
    for (auto& x : k) x = normal(rng);
    for (auto& x : v) x = normal(rng);
    store_kv_position(layout, pool.data() + table[p / 16] * layout.bytes(), head_stride, kKvHeads, p % 16, k.data(),
                      v.data());
  }
  std::vector<float> q(kHeads * kHeadDim);
  for (auto& x : q) x = normal(rng) * 2.0f;
  ThreadPool threads(2);
  for (int position : {kPositions - 1, 9000, 1500, 700}) {  // split in 8, 8, 2 parts; not split (44 tiles)
    std::vector<float> whole(q.size()), split(q.size());
    AttentionArgs args{q.data(), kHeads * kHeadDim, whole.data(), 1, position, kHeads, kKvHeads, kHeadDim, 0.125f,
                       KvType::Q8, pool.data(), layout.bytes(), head_stride, table.data()};
    for (int h = 0; h < kKvHeads; ++h) selected_kernels().attention_item(args, h, 0, 1, {});
    args.out = split.data();
    const AttentionArgs batch[] = {args};
    attention(batch, threads);
    for (size_t i = 0; i < q.size(); ++i) ASSERT_NEAR(split[i], whole[i], 1e-5) << "position " << position << " " << i;
  }
}

// What the cache keeps of a vector: 8-bit within half a step (amax / 254) per element,
// 16-bit within half precision's rounding, 32-bit exactly.
TEST(KvLayout, StorageRoundingIsBounded) {
  constexpr int kHeadDim = 128, kKvHeads = 2;
  std::mt19937 rng(9);
  std::normal_distribution<float> normal(0.0f, 4.0f);
  std::vector<float> k(kKvHeads * kHeadDim), v(k.size()), k2(k.size()), v2(k.size());
  for (auto& x : k) x = normal(rng);
  for (auto& x : v) x = normal(rng);
  k[5] = 80.0f;  // an outlier channel sets the 8-bit step
  for (const KvType type : {KvType::Q8, KvType::F16, KvType::F32}) {
    const KvHeadLayout layout{type, kHeadDim};
    std::vector<uint8_t> block(layout.bytes() * kKvHeads);
    for (int slot : {0, 7, 15}) {
      store_kv_position(layout, block.data(), layout.bytes(), kKvHeads, slot, k.data(), v.data());
      load_kv_position(layout, block.data(), layout.bytes(), kKvHeads, slot, k2.data(), v2.data());
      for (int h = 0; h < kKvHeads; ++h) {
        float kmax = 0, vmax = 0;
        for (int d = 0; d < kHeadDim; ++d) {
          kmax = std::max(kmax, std::fabs(k[h * kHeadDim + d]));
          vmax = std::max(vmax, std::fabs(v[h * kHeadDim + d]));
        }
        for (int d = 0; d < kHeadDim; ++d) {
          const size_t i = h * kHeadDim + d;
          const float k_bound = type == KvType::Q8 ? kmax / 254.0f * 1.001f
                                : type == KvType::F16 ? std::fabs(k[i]) / 1024.0f : 0.0f;
          const float v_bound = type == KvType::Q8 ? vmax / 254.0f * 1.001f
                                : type == KvType::F16 ? std::fabs(v[i]) / 1024.0f : 0.0f;
          ASSERT_LE(std::fabs(k2[i] - k[i]), k_bound) << kv_type_name(type) << " key " << i;
          ASSERT_LE(std::fabs(v2[i] - v[i]), v_bound) << kv_type_name(type) << " value " << i;
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Groups, KernelAttention,
                         ::testing::Values(std::pair{4, 2}, std::pair{9, 3}, std::pair{10, 2}));

}  // namespace
}  // namespace splash::kernels

namespace splash::kernels {
namespace {

std::vector<const IsaKernels*> available_paths() {
  std::vector<const IsaKernels*> paths{&avx2_kernels()};
  if (selected_cpu_path() == CpuPath::Avx512) paths.push_back(&avx512_kernels());
  return paths;
}

// The vision encoder's element-wise kernels against double-precision formulas: GELU with the
// tanh approximation (relative 1e-5: the exp polynomial's ~2 ulp, through a division), and a
// scaled row softmax whose padding becomes 0 (1e-6 absolute on probabilities).
TEST(KernelVisionOps, GeluTanhMatchesTheFormula) {
  std::vector<float> x;
  for (int i = -600; i <= 600; ++i) x.push_back(i * 0.02f);  // -12 .. 12, both tails
  x.push_back(-100.0f);
  x.push_back(100.0f);
  x.resize(1232, 0.5f);
  for (const IsaKernels* kernels : available_paths()) {
    SCOPED_TRACE(kernels->name);
    std::vector<float> y = x;
    kernels->gelu_tanh(y.data(), 2, static_cast<int>(y.size() / 2));
    for (size_t i = 0; i < x.size(); ++i) {
      const double u = x[i];
      const double want = 0.5 * u * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (u + 0.044715 * u * u * u)));
      EXPECT_NEAR(y[i], want, 1e-5 * std::max(1.0, std::fabs(want))) << "u = " << u;
    }
  }
}

// The MLP's SiLU(gate) * up against the double-precision formula (relative 1e-5, as GELU
// above), over rows whose width leaves a tail after the vector lanes (1003 = 62 * 16 + 11),
// both tails of the sigmoid, and gates past exp's range.
TEST(KernelMlpOps, SiluMulMatchesTheFormula) {
  constexpr int kFfn = 1003, kRows = 3;
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> uniform(-12.0f, 12.0f);
  std::vector<float> gate_up(static_cast<size_t>(kRows) * 2 * kFfn);
  for (float& v : gate_up) v = uniform(rng);
  gate_up[0] = -100.0f, gate_up[1] = 100.0f, gate_up[2] = 0.0f, gate_up[3] = -0.0f, gate_up[kFfn - 1] = -90.0f;
  for (const IsaKernels* kernels : available_paths()) {
    SCOPED_TRACE(kernels->name);
    std::vector<float> out(static_cast<size_t>(kRows) * kFfn, -1.0f);
    kernels->silu_mul(gate_up.data(), out.data(), kRows, kFfn);
    for (int row = 0; row < kRows; ++row)
      for (int i = 0; i < kFfn; ++i) {
        const double g = gate_up[static_cast<size_t>(row) * 2 * kFfn + i];
        const double up = gate_up[static_cast<size_t>(row) * 2 * kFfn + kFfn + i];
        const double want = g / (1.0 + std::exp(-g)) * up;
        ASSERT_NEAR(out[static_cast<size_t>(row) * kFfn + i], want, 1e-5 * std::max(1.0, std::fabs(want)))
            << "row " << row << ", gate " << g;
      }
  }
}

TEST(KernelVisionOps, SoftmaxRowsMatchesTheFormulaAndZeroesPadding) {
  constexpr int kWidth = 1000, kStride = 1024, kRows = 3;
  std::mt19937 rng(5);
  std::normal_distribution<float> dist(0.0f, 8.0f);
  std::vector<float> x(static_cast<size_t>(kRows) * kStride);
  for (auto& v : x) v = dist(rng);
  for (const IsaKernels* kernels : available_paths()) {
    SCOPED_TRACE(kernels->name);
    std::vector<float> y = x;
    kernels->softmax_rows(y.data(), kRows, kWidth, kStride, 0.125f);
    for (int r = 0; r < kRows; ++r) {
      const float* in = x.data() + static_cast<size_t>(r) * kStride;
      const float* out = y.data() + static_cast<size_t>(r) * kStride;
      double max = -1e300, sum = 0.0;
      for (int i = 0; i < kWidth; ++i) max = std::max(max, 0.125 * in[i]);
      for (int i = 0; i < kWidth; ++i) sum += std::exp(0.125 * in[i] - max);
      double total = 0.0;
      for (int i = 0; i < kWidth; ++i) {
        EXPECT_NEAR(out[i], std::exp(0.125 * in[i] - max) / sum, 1e-6) << r << "," << i;
        total += out[i];
      }
      EXPECT_NEAR(total, 1.0, 1e-5);
      for (int i = kWidth; i < kStride; ++i) EXPECT_EQ(out[i], 0.0f);
    }
  }
}

// The Gated DeltaNet rule of one value head against the recurrence written out in double
// (transformers' torch_recurrent_gated_delta_rule, S [head_k][head_v]): 40 tokens of random
// normalised q/k, decays in [0.3, 1] and rates in [0, 1], the state carried in from a
// non-zero start; outputs and final state within 2e-5 relative to their scale. head_k 128
// (Qwen3.5's) and 48 (a head of vectors not a power of two), head_v 64.
TEST(KernelDeltaRule, MatchesTheRecurrenceInDouble) {
  for (const int head_k : {128, 48}) {
    constexpr int kHeadV = 64, kTokens = 40, kVStride = 80, kOutStride = 72;
    std::mt19937 rng(head_k);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::uniform_real_distribution<float> uniform(0.0f, 1.0f);
    auto unit_rows = [&](int rows) {
      std::vector<float> x(static_cast<size_t>(rows) * head_k);
      for (int r = 0; r < rows; ++r) {
        double norm = 0.0;
        for (int i = 0; i < head_k; ++i) norm += std::pow(x[r * head_k + i] = normal(rng), 2);
        for (int i = 0; i < head_k; ++i) x[r * head_k + i] /= static_cast<float>(std::sqrt(norm));
      }
      return x;
    };
    const std::vector<float> q = unit_rows(kTokens), k = unit_rows(kTokens);
    std::vector<float> v(static_cast<size_t>(kTokens) * kVStride), decay(kTokens), beta(kTokens);
    for (auto& x : v) x = normal(rng);
    for (int t = 0; t < kTokens; ++t) {
      decay[t] = 0.3f + 0.7f * uniform(rng);
      beta[t] = uniform(rng);
    }
    std::vector<float> start(static_cast<size_t>(kHeadV) * head_k);  // row j = column j of S
    for (auto& x : start) x = 0.1f * normal(rng);
    // The reference: S[i][j] in double.
    std::vector<double> S(static_cast<size_t>(head_k) * kHeadV), want(static_cast<size_t>(kTokens) * kHeadV);
    for (int i = 0; i < head_k; ++i)
      for (int j = 0; j < kHeadV; ++j) S[i * kHeadV + j] = start[j * head_k + i];
    const double scale = 1.0 / std::sqrt(static_cast<double>(head_k));
    for (int t = 0; t < kTokens; ++t) {
      for (auto& s : S) s *= decay[t];
      for (int j = 0; j < kHeadV; ++j) {
        double remembered = 0.0;
        for (int i = 0; i < head_k; ++i) remembered += S[i * kHeadV + j] * k[t * head_k + i];
        const double delta = (v[t * kVStride + j] - remembered) * beta[t];
        for (int i = 0; i < head_k; ++i) S[i * kHeadV + j] += k[t * head_k + i] * delta;
        double read = 0.0;
        for (int i = 0; i < head_k; ++i) read += S[i * kHeadV + j] * q[t * head_k + i];
        want[t * kHeadV + j] = read * scale;
      }
    }
    for (const IsaKernels* kernels : available_paths()) {
      SCOPED_TRACE(std::string(kernels->name) + ", head_k " + std::to_string(head_k));
      std::vector<float> state = start, out(static_cast<size_t>(kTokens) * kOutStride, -7.0f);
      kernels->delta_rule({state.data(), head_k, kHeadV, kTokens, q.data(), k.data(), v.data(), kVStride, decay.data(),
                           beta.data(), out.data(), kOutStride, static_cast<float>(scale)});
      for (int t = 0; t < kTokens; ++t) {
        for (int j = 0; j < kHeadV; ++j)
          EXPECT_NEAR(out[t * kOutStride + j], want[t * kHeadV + j], 2e-5 * std::max(1.0, std::fabs(want[t * kHeadV + j])))
              << "token " << t << ", value " << j;
        for (int j = kHeadV; j < kOutStride; ++j) EXPECT_EQ(out[t * kOutStride + j], -7.0f);  // between rows: untouched
      }
      for (int i = 0; i < head_k; ++i)
        for (int j = 0; j < kHeadV; ++j)
          EXPECT_NEAR(state[j * head_k + i], S[i * kHeadV + j], 2e-5 * std::max(1.0, std::fabs(S[i * kHeadV + j])));
    }
  }
}

TEST(KernelMatmul, FloatActivationsServeFloatWeightsAndAreRefusedByIntegerOnes) {
  ThreadPool pool(2);
  std::vector<float> w(32 * 64), x(3 * 64);
  for (size_t i = 0; i < w.size(); ++i) w[i] = std::sin(0.1f * static_cast<float>(i));
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::cos(0.07f * static_cast<float>(i));
  const PackedWeight packed = pack_weight({GgmlType::F32, reinterpret_cast<const uint8_t*>(w.data()), 32, 64});
  QuantizedActivations acts;
  acts.use_floats(x.data(), 3, 64);
  std::vector<float> y(3 * 32);
  matmul(packed, acts, y.data(), 32, pool);
  for (int t = 0; t < 3; ++t)
    for (int r = 0; r < 32; ++r) {
      double want = 0.0;
      for (int k = 0; k < 64; ++k) want += static_cast<double>(w[r * 64 + k]) * x[t * 64 + k];
      EXPECT_NEAR(y[t * 32 + r], want, 1e-4);
    }
  std::vector<uint8_t> q8(32 * 64 / 32 * 34, 0);  // Q8_0 blocks: fp16 scale + 32 codes, all zero
  const PackedWeight integer = pack_weight({GgmlType::Q8_0, q8.data(), 32, 64});
  EXPECT_THROW(matmul(integer, acts, y.data(), 32, pool), Error);
}

}  // namespace
}  // namespace splash::kernels

// The llama forward pass on the real default model: processing a prompt in one call, in
// 512-token chunks, or one token at a time must give the same logits; truncating the
// sequence must behave like never having seen the dropped tokens; sequences batched in one
// pass must get what each gets alone; a prefix copied block-wise (the paged cache's reuse)
// must give the logits of recomputing it; and the 8-bit KV cache must stay close to the
// 16-bit one. (Agreement with an independent numpy forward pass is tests/e2e/test_reference.py.)
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "common/error.h"
#include "formats/gguf.h"
#include "model/model.h"
#include "model/sequence.h"
#include "model_fixture.h"

namespace splash::model {
namespace {

std::vector<int32_t> prompt_tokens(int n) {
  std::vector<int32_t> ids(n);
  for (int i = 0; i < n; ++i) ids[i] = 100 + (i * 7919) % 40000;
  return ids;
}

// A model with one sequence on its pool, used like the old single-sequence model.
struct SingleSequence {
  std::unique_ptr<Model> model;
  std::unique_ptr<Sequence> sequence;
  Sequence* operator->() { return sequence.get(); }
};
SingleSequence load_single(const gguf::File& file, LoadOptions options) {
  SingleSequence s{load_model(file, options), nullptr};
  s.sequence = std::make_unique<Sequence>(*s.model);
  return s;
}

float max_abs_difference(std::span<const float> a, std::span<const float> b) {
  float worst = 0.0f;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::fabs(a[i] - b[i]));
  return worst;
}

// The same token sees the same weights and keys whether it arrives alone or in a batch;
// only float summation order inside attention differs, so the logits agree to ~1e-4.
constexpr float kSameComputationTolerance = 2e-3f;

std::vector<float> copy(std::span<const float> logits) { return {logits.begin(), logits.end()}; }

TEST(LlamaModel, BatchedChunkedAndIncrementalPrefillAgree) {
  SPLASH_REQUIRE_TEST_MODEL(path);
  auto file = gguf::File::open(path);
  auto model = load_single(file, {.max_context = 1024, .threads = 0});
  const auto tokens = prompt_tokens(600);  // longer than one 512-token chunk

  const auto whole = copy(model->forward(tokens));
  EXPECT_EQ(model->position(), 600);

  model->truncate(0);
  model->forward(std::span(tokens).first(590));
  std::vector<float> incremental;
  for (int i = 590; i < 600; ++i) incremental = copy(model->forward(std::span(tokens).subspan(i, 1)));
  EXPECT_LT(max_abs_difference(whole, incremental), kSameComputationTolerance);
  EXPECT_EQ(std::max_element(whole.begin(), whole.end()) - whole.begin(),
            std::max_element(incremental.begin(), incremental.end()) - incremental.begin());
}

TEST(LlamaModel, TruncateForgetsTheDroppedTokens) {
  SPLASH_REQUIRE_TEST_MODEL(path);
  auto file = gguf::File::open(path);
  auto model = load_single(file, {.max_context = 256, .threads = 0});
  const auto a = prompt_tokens(40);
  std::vector<int32_t> b{500, 600, 700, 800};

  std::vector<int32_t> fresh_input(a.begin(), a.begin() + 20);
  fresh_input.insert(fresh_input.end(), b.begin(), b.end());
  const auto fresh = copy(model->forward(fresh_input));

  model->truncate(0);
  model->forward(a);
  model->truncate(20);
  const auto reused = copy(model->forward(b));
  EXPECT_EQ(model->position(), 24);
  EXPECT_LT(max_abs_difference(fresh, reused), kSameComputationTolerance);
}

TEST(LlamaModel, RejectsOverflowAndBadTokens) {
  SPLASH_REQUIRE_TEST_MODEL(path);
  auto file = gguf::File::open(path);
  auto model = load_single(file, {.max_context = 32, .threads = 1});
  EXPECT_EQ(model->info().context, 32);
  EXPECT_THROW(model->forward(prompt_tokens(33)), Error);
  std::vector<int32_t> bad{1, 2, 49152};
  EXPECT_THROW(model->forward(bad), Error);
  std::vector<int32_t> negative{-1};
  EXPECT_THROW(model->forward(negative), Error);
  EXPECT_THROW(model->truncate(5), Error);
  EXPECT_EQ(model->position(), 0);
  EXPECT_NO_THROW(model->forward(prompt_tokens(32)));
}

TEST(LlamaModel, SummaryNamesTheSpecialisedKernels) {
  SPLASH_REQUIRE_TEST_MODEL(path);
  auto file = gguf::File::open(path);
  auto model = load_single(file, {.max_context = 64, .threads = 1});
  const auto& info = model->info();
  EXPECT_EQ(info.architecture, "llama");
  EXPECT_EQ(info.n_layers, 30);
  EXPECT_EQ(info.vocab, 49152);
  EXPECT_NE(info.kernel_shapes.find("SmolLM2-135M"), std::string::npos) << info.kernel_shapes;
}

}  // namespace
}  // namespace splash::model

namespace splash::model {
namespace {

std::vector<float> logits_of(Model& model, std::span<const int32_t> tokens, std::span<const int32_t> blocks) {
  std::vector<float> out;
  for (size_t start = 0; start < tokens.size(); start += kMaxBatchTokens) {
    const size_t n = std::min<size_t>(kMaxBatchTokens, tokens.size() - start);
    const SequenceSlice slice{tokens.subspan(start, n), static_cast<int>(start), blocks, true};
    out = copy(model.forward({&slice, 1}));
  }
  return out;
}

std::vector<int32_t> block_range(int first, int count) {
  std::vector<int32_t> blocks(count);
  for (int i = 0; i < count; ++i) blocks[i] = first + i;
  return blocks;
}

TEST(PagedModel, BatchedSequencesGetWhatEachGetsAlone) {
  SPLASH_REQUIRE_TEST_MODEL(path);
  auto file = gguf::File::open(path);
  auto model = load_model(file, {.max_context = 256, .threads = 0, .kv_blocks = 64});
  const auto a = prompt_tokens(70), b = prompt_tokens(33);
  // Alone, each on its own blocks (b's in reverse order: a block table need not be sorted).
  auto b_blocks = block_range(40, 16);
  std::reverse(b_blocks.begin(), b_blocks.end());
  const auto a_alone = logits_of(*model, a, block_range(0, 16));
  const auto b_alone = logits_of(*model, std::span(b), b_blocks);
  // Together: a's last 5 tokens and b's last token after their prefixes are cached.
  logits_of(*model, std::span(a).first(65), block_range(0, 16));
  logits_of(*model, std::span(b).first(32), b_blocks);
  const auto a_blocks = block_range(0, 16);
  const SequenceSlice batch[] = {{std::span(a).subspan(65), 65, a_blocks, true},
                                 {std::span(b).subspan(32), 32, b_blocks, true}};
  const auto both = copy(model->forward(batch));
  ASSERT_EQ(both.size(), 2u * model->info().vocab);
  const size_t vocab = model->info().vocab;
  EXPECT_LT(max_abs_difference(a_alone, std::span(both).first(vocab)), kSameComputationTolerance);
  EXPECT_LT(max_abs_difference(b_alone, std::span(both).subspan(vocab)), kSameComputationTolerance);
}

// Hidden-state taps (a block draft's conditioning): every token of a pass gets each tapped
// layer's output, in batch order, the same rows it gets alone (the layers' values are checked
// against the numpy reference in tests/e2e/test_reference.py); a model without taps keeps
// none, and taps outside the model's layers or asked twice are refused.
TEST(PagedModel, HiddenTapsFollowTheBatchOrder) {
  SPLASH_REQUIRE_TEST_MODEL(path);
  auto file = gguf::File::open(path);
  auto model = load_model(file, {.max_context = 256, .threads = 0, .kv_blocks = 64, .hidden_taps = {29, 0}});
  const size_t d_model = model->info().d_model, row = 2 * d_model;
  const auto a = prompt_tokens(70), b = prompt_tokens(33);
  const auto a_blocks = block_range(0, 16), b_blocks = block_range(40, 16);
  auto taps_of_last = [&](std::span<const int32_t> tokens, std::span<const int32_t> blocks, size_t last) {
    logits_of(*model, tokens.first(tokens.size() - last), blocks);
    const SequenceSlice slice{tokens.last(last), static_cast<int>(tokens.size() - last), blocks, true};
    model->forward({&slice, 1});
    const auto taps = model->hidden_taps();
    EXPECT_EQ(taps.size(), last * row);
    return std::vector<float>(taps.begin(), taps.end());
  };
  const auto a_alone = taps_of_last(a, a_blocks, 5), b_alone = taps_of_last(b, b_blocks, 1);
  const SequenceSlice batch[] = {{std::span(a).subspan(65), 65, a_blocks, true},
                                 {std::span(b).subspan(32), 32, b_blocks, true}};
  model->forward(batch);
  const auto both = model->hidden_taps();
  ASSERT_EQ(both.size(), 6 * row);
  EXPECT_LT(max_abs_difference(a_alone, both.first(5 * row)), kSameComputationTolerance * 10);
  EXPECT_LT(max_abs_difference(b_alone, both.subspan(5 * row)), kSameComputationTolerance * 10);
  // Layer 29's rows first (the order asked), and they are not layer 0's.
  EXPECT_GT(max_abs_difference(both.first(d_model), both.subspan(d_model, d_model)), 1.0f);

  auto plain = load_model(file, {.max_context = 256, .threads = 0, .kv_blocks = 64});
  plain->forward({batch, 1});
  EXPECT_TRUE(plain->hidden_taps().empty());
  for (const auto& taps : {std::vector<int>{30}, std::vector<int>{-1}, std::vector<int>{3, 3}})
    EXPECT_THROW(load_model(file, {.max_context = 256, .threads = 0, .kv_blocks = 64, .hidden_taps = taps}),
                 splash::Error);
}

// A slice asking for its best tokens only (SequenceSlice::best_only): the pass returns the
// other slice's whole row, the best tokens of the asking slice's row (the host selection of
// that row) and its whole row on request; a verify-style slice's rows all get best tokens.
TEST(PagedModel, BestOnlySlicesGetTheirRowsBestTokens) {
  SPLASH_REQUIRE_TEST_MODEL(path);
  auto file = gguf::File::open(path);
  auto model = load_model(file, {.max_context = 256, .threads = 0, .kv_blocks = 64});
  const size_t vocab = model->info().vocab;
  EXPECT_FALSE(model->info().best_tokens_on_device);
  const auto a = prompt_tokens(40), b = prompt_tokens(21);
  const auto a_blocks = block_range(0, 16), b_blocks = block_range(20, 16);
  SequenceSlice batch[] = {{a, 0, a_blocks, 3}, {b, 0, b_blocks, 1}};
  const auto whole = copy(model->forward(batch));
  ASSERT_EQ(whole.size(), 4 * vocab);
  EXPECT_TRUE(model->best_tokens().empty());
  batch[0].best_only = true;  // the same pass again: the same keys and values rewritten
  const auto rest = copy(model->forward(batch));
  EXPECT_EQ(rest, std::vector<float>(whole.begin() + 3 * vocab, whole.end()));
  const auto best = model->best_tokens();
  ASSERT_EQ(best.size(), 3u * kBestTokens);
  for (int r = 0; r < 3; ++r) {
    std::vector<TokenLogit> want(kBestTokens);
    select_best_tokens(std::span(whole).subspan(r * vocab, vocab), want);
    EXPECT_TRUE(std::equal(want.begin(), want.end(), best.begin() + r * kBestTokens)) << "row " << r;
    const auto row = model->whole_row(r);
    EXPECT_TRUE(std::equal(row.begin(), row.end(), whole.begin() + r * vocab, whole.begin() + (r + 1) * vocab));
  }
  EXPECT_THROW(model->whole_row(3), Error);
}

TEST(PagedModel, CopiedPrefixBlocksGiveTheLogitsOfRecomputing) {
  SPLASH_REQUIRE_TEST_MODEL(path);
  auto file = gguf::File::open(path);
  auto model = load_model(file, {.max_context = 256, .threads = 0, .kv_blocks = 64});
  const auto tokens = prompt_tokens(60);
  const auto fresh = logits_of(*model, tokens, block_range(0, 8));
  // Another sequence shares blocks 0-1 (32 positions), copies 7 positions of block 2 into its
  // own block 20 (copy-on-write), and computes from position 39 on.
  std::vector<int32_t> shared{0, 1, 20, 21};
  model->copy_kv_block(2, 20, 7);
  const SequenceSlice rest{std::span(tokens).subspan(39), 39, shared, true};
  const auto reused = copy(model->forward({&rest, 1}));
  EXPECT_LT(max_abs_difference(fresh, reused), kSameComputationTolerance);
}

TEST(PagedModel, RefusesShortBlockTablesAndBadBlocks) {
  SPLASH_REQUIRE_TEST_MODEL(path);
  auto file = gguf::File::open(path);
  auto model = load_model(file, {.max_context = 256, .threads = 1, .kv_blocks = 8});
  const auto tokens = prompt_tokens(40);
  const std::vector<int32_t> short_table{0, 1}, outside{0, 1, 8};
  const SequenceSlice too_short{tokens, 0, short_table, true}, bad{tokens, 0, outside, true};
  EXPECT_THROW(model->forward({&too_short, 1}), Error);
  EXPECT_THROW(model->forward({&bad, 1}), Error);
  EXPECT_THROW(model->copy_kv_block(0, 8, 4), Error);
  EXPECT_THROW(model->copy_kv_block(0, 1, 17), Error);
}

// 8-bit keys and values (a scale per position and head) against 16-bit, on a real prompt
// of 1,500 tokens: the distributions must stay close. Measured: KL ~0.001 at 300 tokens and
// ~0.007 at 1,500; max |dlogit| ~0.9; top-1 equal. Bound: KL 0.03 (the reference test's
// rounding-noise tolerance for the weights is 0.06).
TEST(PagedModel, EightBitCacheStaysCloseToSixteenBit) {
  SPLASH_REQUIRE_TEST_MODEL(path);
  auto file = gguf::File::open(path);
  const auto tokens = prompt_tokens(1500);
  std::vector<float> logits[2];
  for (const KvType type : {KvType::F16, KvType::Q8}) {
    auto model = load_model(file, {.max_context = 1536, .threads = 0, .kv_type = type});
    logits[type == KvType::Q8] = logits_of(*model, tokens, block_range(0, 96));
  }
  auto log_softmax = [](std::vector<float> x) {
    const float top = *std::max_element(x.begin(), x.end());
    double total = 0.0;
    for (float v : x) total += std::exp(static_cast<double>(v - top));
    for (auto& v : x) v = static_cast<float>(v - top - std::log(total));
    return x;
  };
  const auto p = log_softmax(logits[0]), q = log_softmax(logits[1]);
  double kl = 0.0;
  for (size_t i = 0; i < p.size(); ++i) kl += std::exp(static_cast<double>(p[i])) * (p[i] - q[i]);
  EXPECT_LT(kl, 0.03);
  EXPECT_EQ(std::max_element(p.begin(), p.end()) - p.begin(), std::max_element(q.begin(), q.end()) - q.begin());
}

}  // namespace
}  // namespace splash::model

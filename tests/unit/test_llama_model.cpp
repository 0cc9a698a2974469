// The llama forward pass on the real default model: processing a prompt in one call, in
// 512-token chunks, or one token at a time must give the same logits, and truncating the
// sequence must behave like never having seen the dropped tokens. (Agreement with an
// independent numpy forward pass is tests/e2e/test_reference.py.)
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "common/error.h"
#include "formats/gguf.h"
#include "model/model.h"
#include "model_fixture.h"

namespace splash::model {
namespace {

std::vector<int32_t> prompt_tokens(int n) {
  std::vector<int32_t> ids(n);
  for (int i = 0; i < n; ++i) ids[i] = 100 + (i * 7919) % 40000;
  return ids;
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
  auto model = load_model(file, {.max_context = 1024, .threads = 0});
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
  auto model = load_model(file, {.max_context = 256, .threads = 0});
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
  auto model = load_model(file, {.max_context = 32, .threads = 1});
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
  auto model = load_model(file, {.max_context = 64, .threads = 1});
  const auto& info = model->info();
  EXPECT_EQ(info.architecture, "llama");
  EXPECT_EQ(info.n_layers, 30);
  EXPECT_EQ(info.vocab, 49152);
  EXPECT_NE(info.kernel_shapes.find("SmolLM2-135M"), std::string::npos) << info.kernel_shapes;
}

}  // namespace
}  // namespace splash::model

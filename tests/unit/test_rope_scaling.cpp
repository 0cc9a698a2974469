// RoPE's frequencies (model/rope_scaling.h) and the choice of a stretch for a window past the
// trained one (llama_hparams.h fit_rope_to_context). The values are checked against what the
// definitions say pair by pair (float64): unscaled base^(-2i/d); linear divided by the
// factor; YaRN keeps the pairs that turn more than beta_fast times over the original window,
// divides those that turn fewer than beta_slow times, ramps linearly between, and scales
// cos/sin by 0.1 ln(factor) + 1. The whole-model numerics against transformers' formulas are
// tests/e2e/test_random_qwen.py (CPU) and the GPU oracle (tools/hf_oracle.py).
#include <gtest/gtest.h>

#include <cmath>
#include <numbers>

#include "common/error.h"
#include "model/llama/llama_hparams.h"
#include "model/rope_scaling.h"

namespace splash::model {
namespace {

constexpr double kBase = 1e6;
constexpr int kHeadDim = 128;

double plain(int i) { return std::pow(kBase, -2.0 * i / kHeadDim); }

// How many times pair i turns over `context` positions.
double turns(double inv_freq, int context) { return inv_freq * context / (2 * std::numbers::pi); }

TEST(RopeFrequencies, UnscaledAndLinear) {
  const auto none = rope_frequencies(kBase, kHeadDim, {});
  ASSERT_EQ(none.inv_freq.size(), 64u);
  EXPECT_EQ(none.attention_factor, 1.0);
  for (int i = 0; i < 64; ++i) EXPECT_NEAR(none.inv_freq[i] / plain(i), 1.0, 1e-14) << i;
  RopeScaling linear;
  linear.kind = RopeScaling::Kind::Linear;
  linear.factor = 4.0;
  const auto stretched = rope_frequencies(kBase, kHeadDim, linear);
  EXPECT_EQ(stretched.attention_factor, 1.0);
  for (int i = 0; i < 64; ++i) EXPECT_NEAR(stretched.inv_freq[i] * 4.0 / plain(i), 1.0, 1e-14) << i;
}

TEST(RopeFrequencies, YarnKeepsFastPairsStretchesSlowOnesAndRampsBetween) {
  RopeScaling yarn;
  yarn.kind = RopeScaling::Kind::Yarn;
  yarn.factor = 4.0;
  yarn.original_context = 32768;
  const auto f = rope_frequencies(kBase, kHeadDim, yarn);
  EXPECT_NEAR(f.attention_factor, 0.1 * std::log(4.0) + 1.0, 1e-15);
  int kept = 0, stretched = 0, ramped = 0;
  double previous_share = 1.0;
  for (int i = 0; i < 64; ++i) {
    const double t = turns(plain(i), yarn.original_context);
    const double share = (f.inv_freq[i] - plain(i) / 4.0) / (plain(i) - plain(i) / 4.0);  // 1 kept, 0 stretched
    EXPECT_GE(share, -1e-12) << i;
    EXPECT_LE(share, 1.0 + 1e-12) << i;
    EXPECT_LE(share, previous_share + 1e-12) << "the ramp only falls, pair " << i;
    previous_share = share;
    if (t > 32.0 * 1.5) {
      EXPECT_NEAR(share, 1.0, 1e-12) << "a fast pair is kept: " << i;
    }
    if (t < 1.0 / 1.5) {
      EXPECT_NEAR(share, 0.0, 1e-12) << "a slow pair is stretched: " << i;
    }
    kept += share > 1.0 - 1e-12, stretched += share < 1e-12, ramped += share > 1e-12 && share < 1.0 - 1e-12;
  }
  // At base 1e6 over 32K, head size 128: pairs 0..23 turn more than 32 times (kept), pairs
  // from 40 on less than once (stretched), the 16 between ramp.
  EXPECT_EQ(kept, 24);
  EXPECT_EQ(stretched, 24);
  EXPECT_EQ(ramped, 16);
}

// Golden values where the ramp's ends are not whole pairs (base 1e4, head size 64, YaRN x8
// over 4096: the correction range 10.47 .. 22.55 truncated to 10 .. 23), from
// tests/reference/llama_ref.py's rope_frequencies (transformers' yarn formulas, in float64).
TEST(RopeFrequencies, YarnMatchesTransformersFormulasWithTruncatedRampEnds) {
  RopeScaling yarn;
  yarn.kind = RopeScaling::Kind::Yarn;
  yarn.factor = 8.0;
  yarn.original_context = 4096;
  const double want[32] = {
      1.0, 0.7498942093324559, 0.5623413251903491, 0.4216965034285823, 0.31622776601683794, 0.23713737056616555,
      0.1778279410038923, 0.1333521432163324, 0.1, 0.07498942093324558, 0.056234132519034905, 0.03933130849285815,
      0.02736586436684174, 0.018925386304799747, 0.01299511876566905, 0.008847401809545132, 0.005961538461538462,
      0.003965786683969718, 0.002595421500878534, 0.0016624573692857571, 0.0010338215427473547,
      0.0006156450966621605, 0.00034197680962286974, 0.0001666901790204155, 0.000125, 9.373677616655697e-05,
      7.029266564879364e-05, 5.2712062928572786e-05, 3.952847075210474e-05, 2.9642171320770692e-05,
      2.2228492625486534e-05, 1.666901790204155e-05};
  const auto f = rope_frequencies(1e4, 64, yarn);
  ASSERT_EQ(f.inv_freq.size(), 32u);
  for (int i = 0; i < 32; ++i) EXPECT_NEAR(f.inv_freq[i] / want[i], 1.0, 1e-13) << i;
  EXPECT_NEAR(f.attention_factor, 1.2079441541679836, 1e-15);
  yarn.attention_multiplier = 0.5;  // a file's attn_factor multiplies YaRN's own
  EXPECT_NEAR(rope_frequencies(1e4, 64, yarn).attention_factor, 0.5 * 1.2079441541679836, 1e-15);
}

TEST(RopeFrequencies, BadScalingsAreRefused) {
  RopeScaling bad;
  bad.kind = RopeScaling::Kind::Yarn;
  bad.factor = 2.0;
  EXPECT_THROW(rope_frequencies(kBase, kHeadDim, bad), Error) << "YaRN without its original window";
  bad.original_context = 4096;
  bad.factor = 0.5;
  EXPECT_THROW(rope_frequencies(kBase, kHeadDim, bad), Error);
  bad.factor = NAN;
  EXPECT_THROW(rope_frequencies(kBase, kHeadDim, bad), Error);
}

llama::Hyperparameters hyperparameters(const char* arch, int native) {
  llama::Hyperparameters h;
  h.architecture = arch;
  h.native_context = h.rope_window = native;
  return h;
}

TEST(FitRopeToContext, QwenPastItsWindowGetsTheYarnItNeeds) {
  auto h = hyperparameters("qwen2", 32768);
  llama::fit_rope_to_context(h, 65536);
  EXPECT_EQ(h.rope_scaling.kind, RopeScaling::Kind::Yarn);
  EXPECT_EQ(h.rope_scaling.factor, 2.0);
  EXPECT_EQ(h.rope_scaling.original_context, 32768);
  EXPECT_EQ(h.rope_window, 65536);
  EXPECT_EQ(h.rope_scaling.describe(), "YaRN x2 over an original 32768-token window");

  // Qwen3 files say 40960; the cards stretch the 32K pre-training window, at most 4x.
  auto qwen3 = hyperparameters("qwen3", 40960);
  llama::fit_rope_to_context(qwen3, 40960);
  EXPECT_EQ(qwen3.rope_scaling.kind, RopeScaling::Kind::None);
  llama::fit_rope_to_context(qwen3, 65536);
  EXPECT_EQ(qwen3.rope_scaling.factor, 2.0);
  EXPECT_EQ(qwen3.rope_scaling.original_context, 32768);
  auto far = hyperparameters("qwen3moe", 40960);
  llama::fit_rope_to_context(far, 1'000'000);  // past 4x: stretched 4x, no further
  EXPECT_EQ(far.rope_scaling.factor, 4.0);
  EXPECT_EQ(far.rope_window, 131072);
  // A window that is no whole multiple reaches exactly the context asked for.
  auto odd = hyperparameters("qwen2", 1000);
  llama::fit_rope_to_context(odd, 1001);
  EXPECT_EQ(odd.rope_window, 1001);
  EXPECT_EQ(odd.rope_scaling.factor, 1.001);
}

TEST(FitRopeToContext, WithinTheWindowOtherFamiliesAndStatedScalingsStayAsRead) {
  auto within = hyperparameters("qwen2", 32768);
  llama::fit_rope_to_context(within, 32768);
  llama::fit_rope_to_context(within, 0);
  EXPECT_EQ(within.rope_scaling.kind, RopeScaling::Kind::None);
  auto llama = hyperparameters("llama", 8192);
  llama::fit_rope_to_context(llama, 16384);
  EXPECT_EQ(llama.rope_scaling.kind, RopeScaling::Kind::None);
  EXPECT_EQ(llama.rope_window, 8192);
  auto stated = hyperparameters("qwen2", 32768);
  stated.rope_scaling.kind = RopeScaling::Kind::Linear;
  stated.rope_scaling.factor = 2.0;
  llama::fit_rope_to_context(stated, 131072);
  EXPECT_EQ(stated.rope_scaling.kind, RopeScaling::Kind::Linear);
  EXPECT_EQ(stated.rope_scaling.factor, 2.0);
}

}  // namespace
}  // namespace splash::model

// Sampler: greedy, seeded reproducibility, top-k / top-p / min-p / temperature against the
// softmax they should produce, penalties, logit bias, parameter validation; drawing from a
// row's best tokens gives the tokens (and random draws) of the whole row; the best-token
// selection itself.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "engine/sampler.h"

namespace splash::engine {
namespace {

SamplingParams plain(float temperature, uint64_t seed = 1) {
  SamplingParams p;
  p.temperature = temperature;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  p.seed = seed;
  return p;
}

SamplingParams greedy_params() { return plain(0.0f); }

std::vector<float> random_logits(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<float> logits(n);
  for (auto& l : logits) l = normal(rng);
  return logits;
}

int32_t argmax(const std::vector<float>& logits) {
  return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

std::vector<double> softmax(const std::vector<float>& logits, double temperature) {
  std::vector<double> p(logits.size());
  const double best = *std::max_element(logits.begin(), logits.end());
  double total = 0.0;
  for (size_t i = 0; i < logits.size(); ++i) total += p[i] = std::exp((logits[i] - best) / temperature);
  for (auto& x : p) x /= total;
  return p;
}

std::vector<double> frequencies(Sampler& sampler, const std::vector<float>& logits, int draws,
                                const std::vector<int32_t>& history = {}) {
  std::vector<double> counts(logits.size(), 0.0);
  for (int i = 0; i < draws; ++i) {
    const int32_t id = sampler.sample(logits, history);
    EXPECT_GE(id, 0);
    EXPECT_LT(id, static_cast<int32_t>(logits.size()));
    if (id >= 0 && id < static_cast<int32_t>(logits.size())) counts[id] += 1.0;
  }
  for (auto& c : counts) c /= draws;
  return counts;
}

// Empirical frequencies against the expected distribution. Each frequency of N draws has
// standard deviation sqrt(p(1-p)/N); 5 of them (plus a small floor) makes a false failure
// of any of a handful of components a below-1e-5 event. The seeds are fixed anyway, so
// the outcome is deterministic; the tolerance is what makes the fixed outcome meaningful.
void expect_distribution(const std::vector<double>& observed, const std::vector<double>& expected, int draws) {
  ASSERT_EQ(observed.size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    const double sigma = std::sqrt(expected[i] * (1.0 - expected[i]) / draws);
    EXPECT_NEAR(observed[i], expected[i], 5.0 * sigma + 1e-3) << "token " << i;
  }
}

TEST(Sampler, GreedyIsArgmax) {
  Sampler sampler(greedy_params());
  for (uint32_t seed = 0; seed < 50; ++seed) {
    const auto logits = random_logits(1000, seed);
    EXPECT_EQ(sampler.sample(logits, {}), argmax(logits));
  }
  // Negative logits only, and the best at either end.
  EXPECT_EQ(sampler.sample(std::vector<float>{-5.0f, -1.0f, -3.0f}, {}), 1);
  EXPECT_EQ(sampler.sample(std::vector<float>{9.0f, 1.0f, 3.0f}, {}), 0);
  EXPECT_EQ(sampler.sample(std::vector<float>{1.0f, 1.0f, 3.0f}, {}), 2);
  EXPECT_EQ(sampler.sample(std::vector<float>{7.0f}, {}), 0);
  // A negative temperature is greedy as well (validate() refuses it; the sampler copes).
  SamplingParams negative = greedy_params();
  negative.temperature = -1.0f;
  Sampler negative_sampler(negative);
  const auto logits = random_logits(300, 99);
  EXPECT_EQ(negative_sampler.sample(logits, {}), argmax(logits));
}

std::vector<int32_t> draw_sequence(const SamplingParams& params, int n) {
  Sampler sampler(params);
  std::vector<int32_t> out;
  std::vector<int32_t> history;
  for (int i = 0; i < n; ++i) {
    const auto logits = random_logits(500, 1000 + i);
    out.push_back(sampler.sample(logits, history));
    history.push_back(out.back());
  }
  return out;
}

TEST(Sampler, SameSeedSameSequenceDifferentSeedsDiffer) {
  SamplingParams params;  // the defaults: top-k 40, top-p 0.95, min-p 0.05, T 0.8
  params.temperature = 1.5f;  // flat enough that the draw matters
  params.min_p = 0.0f;
  params.seed = 42;
  const auto a = draw_sequence(params, 200);
  const auto b = draw_sequence(params, 200);
  EXPECT_EQ(a, b);
  params.seed = 43;
  const auto c = draw_sequence(params, 200);
  EXPECT_NE(a, c);
  int differing = 0;
  for (size_t i = 0; i < a.size(); ++i) differing += a[i] != c[i];
  EXPECT_GT(differing, 50) << "two seeds should give mostly different draws";

  Sampler seeded(params);
  EXPECT_EQ(seeded.seed(), 43u);
  // Without a seed one is chosen and reported, and using it reproduces the draws.
  SamplingParams unseeded = params;
  unseeded.seed.reset();
  Sampler random_seed(unseeded);
  SamplingParams replay = params;
  replay.seed = random_seed.seed();
  Sampler replayed(replay);
  const auto logits = random_logits(500, 7);
  for (int i = 0; i < 100; ++i) ASSERT_EQ(random_seed.sample(logits, {}), replayed.sample(logits, {}));
}

TEST(Sampler, TopKOneIsGreedy) {
  SamplingParams params = plain(1.0f, 5);
  params.top_k = 1;
  Sampler sampler(params);
  for (uint32_t seed = 0; seed < 200; ++seed) {
    const auto logits = random_logits(256, seed);
    ASSERT_EQ(sampler.sample(logits, {}), argmax(logits));
  }
}

TEST(Sampler, TopKKeepsTheKBestRenormalized) {
  const std::vector<float> logits = {1.0f, 3.0f, 0.0f, 2.0f, -1.0f};
  SamplingParams params = plain(1.0f, 11);
  params.top_k = 2;
  Sampler sampler(params);
  const int draws = 20000;
  const auto observed = frequencies(sampler, logits, draws);
  const double e = std::exp(1.0);
  expect_distribution(observed, {0.0, e / (e + 1.0), 0.0, 1.0 / (e + 1.0), 0.0}, draws);
}

TEST(Sampler, TinyTopPKeepsOnlyTheBest) {
  SamplingParams params = plain(2.0f, 9);
  params.top_p = 1e-6f;
  Sampler sampler(params);
  for (uint32_t seed = 0; seed < 200; ++seed) {
    const auto logits = random_logits(256, seed);
    ASSERT_EQ(sampler.sample(logits, {}), argmax(logits));
  }
}

TEST(Sampler, TopPKeepsTheSmallestSetReachingTheMass) {
  // Probabilities 0.5, 0.3, 0.15, 0.05: top-p 0.7 keeps the first two (0.5 < 0.7 <= 0.8).
  const std::vector<double> p = {0.5, 0.3, 0.15, 0.05};
  std::vector<float> logits;
  for (double x : p) logits.push_back(static_cast<float>(std::log(x)));
  SamplingParams params = plain(1.0f, 21);
  params.top_p = 0.7f;
  Sampler sampler(params);
  const int draws = 20000;
  expect_distribution(frequencies(sampler, logits, draws), {0.625, 0.375, 0.0, 0.0}, draws);
  // top-p 0.9 keeps three.
  params.top_p = 0.9f;
  Sampler wider(params);
  expect_distribution(frequencies(wider, logits, draws), {0.5 / 0.95, 0.3 / 0.95, 0.15 / 0.95, 0.0}, draws);
}

TEST(Sampler, MinPDropsTokensBelowTheFractionOfTheBest) {
  const std::vector<double> p = {0.5, 0.3, 0.15, 0.05};
  std::vector<float> logits;
  for (double x : p) logits.push_back(static_cast<float>(std::log(x)));
  const int draws = 20000;
  // min-p 0.5: threshold 0.25, keeps 0.5 and 0.3.
  SamplingParams params = plain(1.0f, 31);
  params.min_p = 0.5f;
  Sampler sampler(params);
  expect_distribution(frequencies(sampler, logits, draws), {0.625, 0.375, 0.0, 0.0}, draws);
  // min-p 0.2: threshold 0.1, keeps three.
  params.min_p = 0.2f;
  Sampler lower(params);
  expect_distribution(frequencies(lower, logits, draws), {0.5 / 0.95, 0.3 / 0.95, 0.15 / 0.95, 0.0}, draws);
  // min-p 1: only the best (ties aside).
  params.min_p = 1.0f;
  Sampler only_best(params);
  const auto observed = frequencies(only_best, logits, 1000);
  EXPECT_EQ(observed[0], 1.0);
}

TEST(Sampler, TemperatureMatchesSoftmaxAndSharpensOrFlattens) {
  const std::vector<float> logits = {2.0f, 1.0f, 0.0f, -1.0f, 0.5f};
  const int draws = 40000;
  std::vector<double> best_share;
  for (float temperature : {0.25f, 0.5f, 1.0f, 2.0f, 4.0f}) {
    SCOPED_TRACE(temperature);
    Sampler sampler(plain(temperature, 1234));
    const auto observed = frequencies(sampler, logits, draws);
    expect_distribution(observed, softmax(logits, temperature), draws);
    best_share.push_back(observed[0]);
  }
  // Higher temperature: the best token's share falls (monotonically, with a clear margin).
  for (size_t i = 1; i < best_share.size(); ++i) EXPECT_LT(best_share[i], best_share[i - 1] - 0.02);
  // And the worst token's share rises from T=0.5 to T=4.
  Sampler cold(plain(0.5f, 3)), hot(plain(4.0f, 3));
  EXPECT_LT(frequencies(cold, logits, draws)[3] + 0.05, frequencies(hot, logits, draws)[3]);
}

TEST(Sampler, RepetitionPenaltyDividesPositiveAndMultipliesNegativeLogits) {
  Sampler sampler([] {
    SamplingParams p = greedy_params();
    p.repetition_penalty = 1.5f;
    return p;
  }());
  const std::vector<float> logits = {5.0f, 4.0f, 1.0f};
  EXPECT_EQ(sampler.sample(logits, {}), 0);
  EXPECT_EQ(sampler.sample(logits, std::vector<int32_t>{0}), 1);        // 5 / 1.5 = 3.33 < 4
  EXPECT_EQ(sampler.sample(logits, std::vector<int32_t>{2, 2, 2}), 0);  // an unrelated token
  const std::vector<float> negative = {-1.0f, -1.2f};
  EXPECT_EQ(sampler.sample(negative, {}), 0);
  EXPECT_EQ(sampler.sample(negative, std::vector<int32_t>{0}), 1);  // -1 * 1.5 = -1.5 < -1.2
  // Penalty below 1 encourages repeats.
  SamplingParams encourage = greedy_params();
  encourage.repetition_penalty = 0.5f;
  Sampler encouraging(encourage);
  EXPECT_EQ(encouraging.sample(logits, std::vector<int32_t>{1}), 1);  // 4 / 0.5 = 8 > 5
  // History ids outside the vocabulary are ignored.
  EXPECT_EQ(sampler.sample(logits, std::vector<int32_t>{-1, 3, 1000000}), 0);
}

TEST(Sampler, PresenceAndFrequencyPenalties) {
  const std::vector<float> logits = {2.0f, 1.5f, 0.0f};
  // Presence: subtracted once, however often the token appeared.
  SamplingParams presence = greedy_params();
  presence.presence_penalty = 0.4f;
  Sampler by_presence(presence);
  EXPECT_EQ(by_presence.sample(logits, std::vector<int32_t>{0, 0, 0, 0}), 0);  // 1.6 > 1.5
  presence.presence_penalty = 1.0f;
  Sampler by_presence_strong(presence);
  EXPECT_EQ(by_presence_strong.sample(logits, std::vector<int32_t>{0}), 1);  // 1.0 < 1.5
  // Frequency: subtracted per occurrence.
  SamplingParams frequency = greedy_params();
  frequency.frequency_penalty = 0.3f;
  Sampler by_frequency(frequency);
  EXPECT_EQ(by_frequency.sample(logits, std::vector<int32_t>{0}), 0);     // 1.7 > 1.5
  EXPECT_EQ(by_frequency.sample(logits, std::vector<int32_t>{0, 0}), 1);  // 1.4 < 1.5
  // Negative presence penalty rewards tokens already present.
  SamplingParams reward = greedy_params();
  reward.presence_penalty = -1.0f;
  Sampler rewarding(reward);
  EXPECT_EQ(rewarding.sample(logits, std::vector<int32_t>{2}), 0);  // 1.0 < 2.0
  EXPECT_EQ(rewarding.sample(logits, std::vector<int32_t>{1}), 1);  // 2.5 > 2.0
}

TEST(Sampler, PenaltyWindowLimitsTheLookBack) {
  const std::vector<float> logits = {2.0f, 1.5f, 0.0f};
  SamplingParams params = greedy_params();
  params.frequency_penalty = 1.0f;
  params.penalty_window = 2;
  Sampler windowed(params);
  EXPECT_EQ(windowed.sample(logits, std::vector<int32_t>{0, 2, 2}), 0);  // token 0 is outside the window
  EXPECT_EQ(windowed.sample(logits, std::vector<int32_t>{2, 2, 0}), 1);  // inside it
  params.penalty_window = -1;  // the whole history
  Sampler whole(params);
  EXPECT_EQ(whole.sample(logits, std::vector<int32_t>{0, 2, 2, 2, 2, 2, 2}), 1);
  params.penalty_window = 0;  // no look-back at all
  Sampler none(params);
  EXPECT_EQ(none.sample(logits, std::vector<int32_t>{0, 0, 0}), 0);
}

TEST(Sampler, PenaltiesShiftSampledDistributionsToo) {
  // With temperature sampling, a penalized token is drawn less often than without.
  const std::vector<float> logits = {1.0f, 1.0f, 1.0f, 1.0f};
  SamplingParams params = plain(1.0f, 77);
  params.presence_penalty = 1.0f;
  Sampler sampler(params);
  const int draws = 20000;
  const auto observed = frequencies(sampler, logits, draws, {0});
  const double e = std::exp(-1.0);
  const double total = e + 3.0;
  expect_distribution(observed, {e / total, 1 / total, 1 / total, 1 / total}, draws);
}

TEST(Sampler, LogitBiasBansAndForces) {
  const auto logits = random_logits(200, 3);
  const int32_t best = argmax(logits);
  const int32_t worst =
      static_cast<int32_t>(std::min_element(logits.begin(), logits.end()) - logits.begin());

  SamplingParams ban = greedy_params();
  ban.logit_bias[best] = -100.0f;
  Sampler banned_greedy(ban);
  EXPECT_NE(banned_greedy.sample(logits, {}), best);

  // A token far ahead of the others, banned: never drawn even at high temperature.
  std::vector<float> peaked(50, 0.0f);
  peaked[7] = 20.0f;
  SamplingParams ban_sampled = plain(2.0f, 8);
  ban_sampled.logit_bias[7] = -100.0f;
  Sampler banned(ban_sampled);
  EXPECT_EQ(frequencies(banned, peaked, 5000)[7], 0.0);

  SamplingParams force = plain(1.0f, 4);
  force.logit_bias[worst] = 100.0f;
  Sampler forced(force);
  for (int i = 0; i < 2000; ++i) ASSERT_EQ(forced.sample(logits, {}), worst);
  force.temperature = 0.0f;
  Sampler forced_greedy(force);
  EXPECT_EQ(forced_greedy.sample(logits, {}), worst);

  // Bias ids outside the logits are ignored by the sampler (validate() refuses them).
  SamplingParams stray = greedy_params();
  stray.logit_bias[100000] = 100.0f;
  stray.logit_bias[-3] = 100.0f;
  Sampler stray_sampler(stray);
  EXPECT_EQ(stray_sampler.sample(logits, {}), best);
}

TEST(SamplerValidate, AcceptsDefaultsAndEdges) {
  EXPECT_EQ(validate(SamplingParams{}, 100), "");
  SamplingParams p;
  p.temperature = 0.0f;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  p.repetition_penalty = 10.0f;
  p.presence_penalty = -2.0f;
  p.frequency_penalty = 2.0f;
  p.penalty_window = -1;
  p.logit_bias = {{0, -100.0f}, {99, 100.0f}};
  EXPECT_EQ(validate(p, 100), "");
  p.temperature = 100.0f;
  p.min_p = 1.0f;
  EXPECT_EQ(validate(p, 100), "");
}

TEST(SamplerValidate, RejectsNaNAndOutOfRange) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  struct Case {
    const char* what;
    void (*apply)(SamplingParams&, float, float);
    const char* needle;
  };
  const std::vector<Case> cases = {
      {"temperature NaN", [](SamplingParams& p, float n, float) { p.temperature = n; }, "temperature"},
      {"temperature inf", [](SamplingParams& p, float, float i) { p.temperature = i; }, "temperature"},
      {"temperature -1", [](SamplingParams& p, float, float) { p.temperature = -1.0f; }, "temperature"},
      {"temperature 101", [](SamplingParams& p, float, float) { p.temperature = 101.0f; }, "temperature"},
      {"top_k -1", [](SamplingParams& p, float, float) { p.top_k = -1; }, "top_k"},
      {"top_p 0", [](SamplingParams& p, float, float) { p.top_p = 0.0f; }, "top_p"},
      {"top_p 1.5", [](SamplingParams& p, float, float) { p.top_p = 1.5f; }, "top_p"},
      {"top_p NaN", [](SamplingParams& p, float n, float) { p.top_p = n; }, "top_p"},
      {"min_p -0.1", [](SamplingParams& p, float, float) { p.min_p = -0.1f; }, "min_p"},
      {"min_p 1.1", [](SamplingParams& p, float, float) { p.min_p = 1.1f; }, "min_p"},
      {"min_p NaN", [](SamplingParams& p, float n, float) { p.min_p = n; }, "min_p"},
      {"repetition 0", [](SamplingParams& p, float, float) { p.repetition_penalty = 0.0f; }, "repetition_penalty"},
      {"repetition -1", [](SamplingParams& p, float, float) { p.repetition_penalty = -1.0f; }, "repetition_penalty"},
      {"repetition 11", [](SamplingParams& p, float, float) { p.repetition_penalty = 11.0f; }, "repetition_penalty"},
      {"repetition NaN", [](SamplingParams& p, float n, float) { p.repetition_penalty = n; }, "repetition_penalty"},
      {"presence 2.5", [](SamplingParams& p, float, float) { p.presence_penalty = 2.5f; }, "presence_penalty"},
      {"presence -inf", [](SamplingParams& p, float, float i) { p.presence_penalty = -i; }, "presence_penalty"},
      {"presence NaN", [](SamplingParams& p, float n, float) { p.presence_penalty = n; }, "presence_penalty"},
      {"frequency -3", [](SamplingParams& p, float, float) { p.frequency_penalty = -3.0f; }, "frequency_penalty"},
      {"frequency NaN", [](SamplingParams& p, float n, float) { p.frequency_penalty = n; }, "frequency_penalty"},
      {"window -2", [](SamplingParams& p, float, float) { p.penalty_window = -2; }, "window"},
      {"bias id -1", [](SamplingParams& p, float, float) { p.logit_bias[-1] = 1.0f; }, "token -1"},
      {"bias id = vocab", [](SamplingParams& p, float, float) { p.logit_bias[100] = 1.0f; }, "token 100"},
      {"bias id huge", [](SamplingParams& p, float, float) { p.logit_bias[1 << 30] = 1.0f; }, "outside the vocabulary"},
      {"bias NaN", [](SamplingParams& p, float n, float) { p.logit_bias[5] = n; }, "logit_bias"},
      {"bias 101", [](SamplingParams& p, float, float) { p.logit_bias[5] = 101.0f; }, "logit_bias"},
      {"bias -inf", [](SamplingParams& p, float, float i) { p.logit_bias[5] = -i; }, "logit_bias"},
  };
  for (const auto& c : cases) {
    SamplingParams p;
    c.apply(p, nan, inf);
    const std::string message = validate(p, 100);
    EXPECT_NE(message, "") << c.what;
    EXPECT_NE(message.find(c.needle), std::string::npos) << c.what << ": " << message;
  }
}


// select_best_tokens against a full sort by (logit descending, id ascending), with ties,
// infinities, a NaN and a row shorter than kBestTokens (padded with id -1).
TEST(BestTokens, SelectionIsTheFirstOfAFullSort) {
  std::mt19937 rng(7);
  for (const size_t vocab : {size_t{10}, size_t{64}, size_t{65}, size_t{3000}}) {
    for (int trial = 0; trial < 20; ++trial) {
      std::vector<float> row(vocab);
      std::uniform_int_distribution<int> level(-6, 6);  // few distinct values: many ties
      for (auto& x : row) x = trial % 2 ? level(rng) * 0.5f : std::normal_distribution<float>(0, 3)(rng);
      row[rng() % vocab] = -std::numeric_limits<float>::infinity();
      if (trial % 3 == 0) row[rng() % vocab] = std::numeric_limits<float>::quiet_NaN();
      std::vector<model::TokenLogit> expected;
      for (size_t i = 0; i < vocab; ++i)
        if (!std::isnan(row[i])) expected.push_back({static_cast<int32_t>(i), row[i]});
      std::sort(expected.begin(), expected.end(), model::ranks_before);
      for (size_t i = 0; i < vocab; ++i)  // a NaN ranks below every number
        if (std::isnan(row[i])) expected.push_back({static_cast<int32_t>(i), row[i]});
      std::vector<model::TokenLogit> best(model::kBestTokens);
      model::select_best_tokens(row, best);
      for (size_t i = 0; i < best.size(); ++i) {
        if (i >= vocab) {
          EXPECT_EQ(best[i].id, -1) << "padding at " << i;
          continue;
        }
        EXPECT_EQ(best[i].id, expected[i].id) << "vocab " << vocab << " trial " << trial << " rank " << i;
      }
    }
  }
}

// Rows from a model-like distribution: a few tokens far above the rest (a peaked row), or
// all close (a flat one), with ties.
std::vector<float> model_like_row(size_t vocab, bool peaked, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, peaked ? 2.0f : 0.3f);
  std::vector<float> row(vocab);
  for (auto& x : row) x = std::round(normal(rng) * 64.0f) / 64.0f;
  if (peaked)
    for (int i = 0; i < 12; ++i) row[rng() % vocab] += 25.0f + static_cast<float>(rng() % 8);
  return row;
}

enum class Reads { Never, Sometimes, Always };  // of the whole row, without a mask
struct SamplerCase {
  const char* what;
  SamplingParams params;
  Reads reads;
};

std::vector<SamplerCase> best_token_cases() {
  auto with = [](float temperature, int top_k, float top_p, float min_p) {
    SamplingParams p = plain(temperature, 42);
    p.top_k = top_k, p.top_p = top_p, p.min_p = min_p;
    return p;
  };
  std::vector<SamplerCase> cases{
      {"greedy", with(0.0f, 0, 1.0f, 0.0f), Reads::Never},
      {"defaults", SamplingParams{}, Reads::Never},  // (seeded: SamplingParams{} draws a random seed)
      {"top_k 40, T 0.7", with(0.7f, 40, 1.0f, 0.0f), Reads::Never},
      {"top_k 64, T 1.0", with(1.0f, 64, 1.0f, 0.0f), Reads::Never},
      {"no top_k, T 1.0, top_p 0.9", with(1.0f, 0, 0.9f, 0.0f), Reads::Sometimes},
      {"no top_k, T 2.0", with(2.0f, 0, 1.0f, 0.0f), Reads::Sometimes},
      {"top_k 200", with(1.0f, 200, 1.0f, 0.0f), Reads::Sometimes},
      {"min_p 0.1", with(1.2f, 0, 1.0f, 0.1f), Reads::Sometimes},
  };
  cases[1].params.seed = 5;
  SamplingParams penalties = with(0.8f, 40, 0.95f, 0.05f);
  penalties.repetition_penalty = 1.3f, penalties.presence_penalty = 0.5f, penalties.frequency_penalty = 0.3f;
  cases.push_back({"lowering penalties", penalties, Reads::Sometimes});
  SamplingParams greedy_penalties = with(0.0f, 0, 1.0f, 0.0f);
  greedy_penalties.repetition_penalty = 2.0f, greedy_penalties.penalty_window = -1;
  greedy_penalties.logit_bias[3] = -100.0f;
  cases.push_back({"greedy, penalties, a ban", greedy_penalties, Reads::Never});
  SamplingParams raising = with(0.8f, 40, 1.0f, 0.0f);
  raising.logit_bias[5] = 30.0f;
  cases.push_back({"a raising bias", raising, Reads::Always});
  SamplingParams soft = with(0.0f, 0, 1.0f, 0.0f);
  soft.repetition_penalty = 0.8f;
  cases.push_back({"repetition penalty under 1", soft, Reads::Always});
  return cases;
}

// The same seeded draws from whole rows and from their best tokens: the same tokens,
// step after step (a differing random draw would show in the next steps too), with and
// without a constraint mask; the whole row is read only where the best tokens cannot decide.
TEST(BestTokens, SamplingFromTheBestTokensDrawsWhatTheWholeRowDraws) {
  constexpr size_t kVocab = 5000;
  for (const auto& c : best_token_cases()) {
    for (const bool peaked : {true, false}) {
      for (const bool masked : {false, true}) {
        std::mt19937 rng(11);
        Sampler whole(c.params), from_best(c.params);
        std::vector<int32_t> history;
        std::vector<uint8_t> allowed;
        int reads = 0, steps = 0;
        for (int step = 0; step < 150; ++step, ++steps) {
          const auto row = model_like_row(kVocab, peaked, rng);
          if (masked) {
            allowed.assign(kVocab, 0);
            for (size_t i = 0; i < kVocab; ++i) allowed[i] = (i * 7 + step) % 3 == 0;
          }
          std::vector<model::TokenLogit> best(model::kBestTokens);
          model::select_best_tokens(row, best);
          LogitsRow logits(best, [&] { return ++reads, std::span<const float>(row); });
          const int32_t expected = whole.sample(row, history, allowed);
          ASSERT_EQ(from_best.sample(logits, history, allowed), expected)
              << c.what << (peaked ? ", peaked" : ", flat") << (masked ? ", masked" : "") << ", step " << step;
          history.push_back(expected);
        }
        if (masked) continue;  // (a mask can leave too few of the best tokens)
        const std::string what = std::string(c.what) + (peaked ? ", peaked" : ", flat");
        if (c.reads == Reads::Never) {
          EXPECT_EQ(reads, 0) << what << ": the best tokens decide";
        } else if (c.reads == Reads::Always) {
          EXPECT_EQ(reads, steps) << what << ": only the whole row decides";
        }
      }
    }
  }
}

// Whether raises_logits() sees each way a logit can go up.
TEST(BestTokens, RaisingAdjustmentsAreRecognized) {
  SamplingParams p;
  EXPECT_FALSE(Sampler(p).raises_logits());
  p.logit_bias[1] = -5.0f;
  EXPECT_FALSE(Sampler(p).raises_logits());
  p.logit_bias[2] = 0.5f;
  EXPECT_TRUE(Sampler(p).raises_logits());
  for (auto set : {+[](SamplingParams& q) { q.repetition_penalty = 0.9f; },
                   +[](SamplingParams& q) { q.presence_penalty = -0.1f; },
                   +[](SamplingParams& q) { q.frequency_penalty = -0.1f; }}) {
    SamplingParams q;
    set(q);
    EXPECT_TRUE(Sampler(q).raises_logits());
  }
}

}  // namespace
}  // namespace splash::engine

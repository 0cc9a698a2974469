#include "model/rope_scaling.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numbers>

#include "common/error.h"

namespace splash::model {

std::string RopeScaling::describe() const {
  switch (kind) {
    case Kind::None: return "";
    case Kind::Linear: return fmt::format("linear x{:g}", factor);
    case Kind::Yarn: return fmt::format("YaRN x{:g} over an original {}-token window", factor, original_context);
  }
  return "";
}

namespace {

// The pair index (fractional) that turns `rotations` times over `context` positions:
// pair i has wavelength 2 pi base^(2i / d).
double pair_turning(double rotations, int head_dim, double base, int context) {
  return head_dim * std::log(context / (rotations * 2.0 * std::numbers::pi)) / (2.0 * std::log(base));
}

}  // namespace

RopeFrequencies rope_frequencies(double base, int head_dim, const RopeScaling& scaling) {
  if (scaling.kind != RopeScaling::Kind::None && !(scaling.factor >= 1.0 && std::isfinite(scaling.factor)))
    fail("RoPE scaling factor {} (must be at least 1)", scaling.factor);
  const int half = head_dim / 2;
  RopeFrequencies out;
  out.inv_freq.resize(half);
  for (int i = 0; i < half; ++i) out.inv_freq[i] = std::pow(base, -2.0 * i / head_dim);
  if (scaling.kind == RopeScaling::Kind::Linear) {
    for (auto& f : out.inv_freq) f /= scaling.factor;
  } else if (scaling.kind == RopeScaling::Kind::Yarn) {
    if (scaling.original_context <= 0) fail("YaRN RoPE scaling needs the original context length");
    if (!(scaling.beta_fast > scaling.beta_slow && scaling.beta_slow > 0))
      fail("YaRN RoPE scaling: beta_fast {} must exceed beta_slow {} > 0", scaling.beta_fast, scaling.beta_slow);
    // Pairs below `low` turn more than beta_fast times (kept), above `high` fewer than
    // beta_slow times (interpolated); whole pairs, as both reference implementations round.
    const double low = std::max(0.0, std::floor(pair_turning(scaling.beta_fast, head_dim, base, scaling.original_context)));
    double high = std::min(static_cast<double>(head_dim - 1),
                           std::ceil(pair_turning(scaling.beta_slow, head_dim, base, scaling.original_context)));
    if (high == low) high += 0.001;
    for (int i = 0; i < half; ++i) {
      const double ramp = std::clamp((i - low) / (high - low), 0.0, 1.0);  // 0: kept, 1: interpolated
      const double kept = out.inv_freq[i];
      out.inv_freq[i] = kept * (1.0 - ramp) + kept / scaling.factor * ramp;
    }
    out.attention_factor = scaling.factor > 1.0 ? 0.1 * std::log(scaling.factor) + 1.0 : 1.0;
  }
  out.attention_factor *= scaling.attention_multiplier;
  return out;
}

}  // namespace splash::model

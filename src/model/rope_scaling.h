#pragma once
// Rotary position embeddings' frequencies, as trained or stretched past the trained window.
// Every backend rotates query/key pair i at position p by the angle p * inv_freq[i] and
// scales the rotation's cosine and sine by attention_factor; this header is where the
// frequencies come from, so that the CPU tables and the GPU kernels turn by the same angles.
//
// Stretching (the GGUF's `<arch>.rope.scaling.*`, or chosen at load for a window past the
// trained one where the family's recipe has it: llama_hparams.h fit_rope_to_context):
//   linear  every frequency divided by the factor (position interpolation);
//   YaRN    (Peng et al. 2023, as transformers' "yarn" rope type and llama.cpp compute it)
//           pairs that turn fewer than beta_slow times over the original window are divided
//           by the factor, pairs that turn more than beta_fast times keep their frequency,
//           and a linear ramp mixes the two in between; cos and sin are scaled by
//           0.1 ln(factor) + 1.
#include <string>
#include <vector>

namespace splash::model {

struct RopeScaling {
  enum class Kind { None, Linear, Yarn };
  Kind kind = Kind::None;
  double factor = 1.0;       // the window stretched this many times
  int original_context = 0;  // YaRN: the window the frequencies were trained for
  double beta_fast = 32.0, beta_slow = 1.0;
  double attention_multiplier = 1.0;  // the file's attn_factor: cos and sin times it (and YaRN's own)
  // "" for none, else e.g. "YaRN x2 over an original 32768-token window".
  std::string describe() const;
};

struct RopeFrequencies {
  std::vector<double> inv_freq;   // head_dim / 2
  double attention_factor = 1.0;  // cos and sin are multiplied by it
};

// Throws splash::Error for a scaling that cannot be computed (factor below 1, YaRN without
// its original window).
RopeFrequencies rope_frequencies(double base, int head_dim, const RopeScaling& scaling);

}  // namespace splash::model

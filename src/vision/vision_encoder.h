#pragma once
// The vision tower of a SmolVLM (Hugging Face Idefics3) model, read from its llama.cpp
// "mmproj" GGUF (clip.projector_type "idefics3"): a SigLIP vision transformer over 16x16
// patches of a square image, then the connector, which pixel-shuffles each s x s group of
// patch features into one row and projects it to the text model's width. The result is one
// row per image token, to stand in the text model's prompt where "<image>" tokens are.
//
// Weights run through the same packed matmul kernels as the text model (F32, F16, BF16 and
// the integer formats); attention is full (not causal) over the patches of one image.
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "common/error.h"
#include "formats/gguf.h"
#include "vision/image.h"
#include "vision/image_preprocess.h"

namespace splash::vision {

struct VisionInfo {
  std::string projector;      // "idefics3"
  int image_size = 0;         // the encoder's square input, in pixels
  int patch_size = 0;
  int width = 0;              // hidden size of the vision transformer
  int layers = 0, heads = 0, ffn = 0;
  int scale_factor = 0;       // the connector's pixel-shuffle factor
  int tokens_per_view = 0;    // (image_size / patch_size / scale_factor)^2
  int projection_dim = 0;     // the text model's width
  size_t weight_bytes = 0;    // packed weights, resident
  std::string weight_types;   // e.g. "F16 (74), F32 (126)"
};

// One image's features: tokens_per_view rows of projection_dim floats for each view, the
// layout's tiles first (row-major), the whole image last.
struct ImageFeatures {
  ImageLayout layout;
  int tokens = 0;  // layout.views() * tokens_per_view
  int dim = 0;
  std::vector<float> values;
  const float* row(int token) const { return values.data() + static_cast<size_t>(token) * dim; }
};

// An encoding stopped because its request was cancelled (its client left).
class EncodingCancelled : public Error {
 public:
  EncodingCancelled() : Error("the image encoding was cancelled") {}
};

class VisionEncoder {
 public:
  // Opens and checks an mmproj GGUF, packs its weights. Throws splash::Error naming the file
  // and the problem (another projector type, missing tensors, unsupported shapes).
  static std::unique_ptr<VisionEncoder> load(const std::string& path, int threads);
  virtual ~VisionEncoder() = default;

  virtual const VisionInfo& info() const = 0;
  // The tiles an image of this size is split into (from its size alone: for counting tokens).
  virtual ImageLayout layout(int width, int height) const = 0;
  // Preprocesses (vision/image_preprocess.h: the model's tiles and whole view) and encodes one
  // image. Thread-safe: concurrent callers take turns (each encode uses every thread of the
  // encoder's pool). `cancelled`, asked while waiting for a turn and between views (a view
  // is a fraction of a second to seconds), stops an encoding nobody waits for any more: it
  // throws EncodingCancelled.
  virtual ImageFeatures encode(const RgbImage& image, const std::function<bool()>& cancelled) = 0;
  // Encodes one already preprocessed [3][image_size][image_size] view (for tests and the
  // reference check): a single-view layout.
  virtual ImageFeatures encode_pixels(std::span<const float> pixels) = 0;
};

// What an encoder of this mmproj file will take, from its header alone (for the memory
// plan); throws like load() on a file that is not a supported projector.
struct VisionMemory {
  size_t weight_bytes = 0;      // packed weights and tables
  size_t activation_bytes = 0;  // scratch of one image
};
VisionMemory estimate_vision_memory(const gguf::File& file);

}  // namespace splash::vision

#include "engine/image_prompt.h"

#include "common/error.h"

namespace splash::engine {

ImageTokenIds find_image_tokens(const tokenizer::Tokenizer& tokenizer) {
  auto id = [&](std::string_view text) {
    const auto found = tokenizer.find_token(text);
    if (!found) fail("the vocabulary has no '{}' token, so this model cannot take images", text);
    return *found;
  };
  return {id("<image>"), id("<fake_token_around_image>"), id("<global-img>")};
}

uint64_t image_digest(std::string_view bytes) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a 64, then a final mix so nearby files spread
  for (unsigned char c : bytes) h = (h ^ c) * 1099511628211ull;
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdull;
  h ^= h >> 33;
  return h;
}

namespace {

// A 30-bit key per (image, position in the image): a collision needs every one of a block's
// 16 positions to collide at once.
int32_t image_key(uint64_t digest, int index) {
  uint64_t h = digest + 0x9e3779b97f4a7c15ull * static_cast<uint64_t>(index + 1);
  h ^= h >> 31;
  h *= 0xbf58476d1ce4e5b9ull;
  h ^= h >> 29;
  return kImageKeyBit | static_cast<int32_t>(h & (kImageKeyBit - 1));
}

}  // namespace

ImagePrompt expand_image_markers(std::span<const int32_t> prompt, const ImageTokenIds& ids, int tokens_per_image,
                                 std::span<const EncodedImage> images) {
  const bool counting = images.empty();
  ImagePrompt out;
  size_t next = 0;
  for (int32_t token : prompt) {
    if (token != ids.marker) {
      out.tokens.push_back(token);
      out.cache_keys.push_back(token);
      out.embeddings.push_back(nullptr);
      continue;
    }
    if (!counting && next == images.size()) break;  // reported below
    const EncodedImage* image = counting ? nullptr : &images[next++];
    if (image && image->features.tokens != tokens_per_image)
      fail("an image of {} feature rows where the model takes {}", image->features.tokens, tokens_per_image);
    auto plain = [&](int32_t id) {
      out.tokens.push_back(id);
      out.cache_keys.push_back(id);
      out.embeddings.push_back(nullptr);
    };
    plain(ids.around);
    plain(ids.global);
    for (int i = 0; i < tokens_per_image; ++i) {
      out.tokens.push_back(ids.marker);
      out.cache_keys.push_back(image ? image_key(image->digest, i) : ids.marker);
      out.embeddings.push_back(image ? image->features.row(i) : nullptr);
    }
    plain(ids.around);
  }
  size_t markers = 0;
  for (int32_t token : prompt) markers += token == ids.marker ? 1 : 0;
  if (!counting && markers != images.size())
    fail("the prompt has {} image places for {} images (this model's chat format cannot show images here)", markers,
         images.size());
  return out;
}

}  // namespace splash::engine

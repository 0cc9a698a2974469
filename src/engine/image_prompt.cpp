#include "engine/image_prompt.h"

#include <fmt/format.h>

#include "common/error.h"

namespace splash::engine {

ImageTokenIds find_image_tokens(const tokenizer::Tokenizer& tokenizer) {
  auto id = [&](std::string_view text) {
    const auto found = tokenizer.find_token(text);
    if (!found) fail("the vocabulary has no '{}' token, so this model cannot take images", text);
    return *found;
  };
  ImageTokenIds ids{id("<image>"), id("<fake_token_around_image>"), id("<global-img>"), {}, {}, {}};
  for (int r = 1;; ++r) {
    std::vector<int32_t> row;
    for (int c = 1;; ++c) {
      const auto found = tokenizer.find_token(fmt::format("<row_{}_col_{}>", r, c));
      if (!found) break;
      row.push_back(*found);
    }
    if (row.empty()) break;
    ids.row_col.push_back(std::move(row));
  }
  ids.newline = tokenizer.encode("\n", false);
  ids.double_newline = tokenizer.encode("\n\n", false);
  return ids;
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

class Expansion {
 public:
  Expansion(ImagePrompt& out, const EncodedImage& image) : out_(out), image_(image) {}

  void text(int32_t id) {
    out_.tokens.push_back(id);
    out_.cache_keys.push_back(id);
    out_.embeddings.push_back(nullptr);
  }
  void text(const std::vector<int32_t>& ids) {
    for (int32_t id : ids) text(id);
  }
  // The next view's feature rows.
  void view(int32_t marker, int tokens_per_view) {
    const bool encoded = !image_.features.values.empty();
    for (int i = 0; i < tokens_per_view; ++i, ++row_) {
      out_.tokens.push_back(marker);
      out_.cache_keys.push_back(encoded ? image_key(image_.digest, row_) : marker);
      out_.embeddings.push_back(encoded ? image_.features.row(row_) : nullptr);
    }
  }

 private:
  ImagePrompt& out_;
  const EncodedImage& image_;
  int row_ = 0;
};

}  // namespace

ImagePrompt expand_image_markers(std::span<const int32_t> prompt, const ImageTokenIds& ids, int tokens_per_view,
                                 std::span<const EncodedImage> images) {
  size_t markers = 0;
  for (int32_t token : prompt) markers += token == ids.marker ? 1 : 0;
  if (markers != images.size())
    fail("the prompt has {} image places for {} images (this model's chat format cannot show images here)", markers,
         images.size());
  ImagePrompt out;
  size_t next = 0;
  for (int32_t token : prompt) {
    if (token != ids.marker) {
      out.tokens.push_back(token);
      out.cache_keys.push_back(token);
      out.embeddings.push_back(nullptr);
      continue;
    }
    const EncodedImage& image = images[next++];
    const vision::ImageLayout& layout = image.layout;
    if (!image.features.values.empty() && image.features.tokens != layout.views() * tokens_per_view)
      fail("an image of {} feature rows where its {} views take {}", image.features.tokens, layout.views(),
           layout.views() * tokens_per_view);
    if (layout.rows > static_cast<int>(ids.row_col.size()) ||
        (layout.rows > 0 && layout.cols > static_cast<int>(ids.row_col[0].size())))
      fail("an image split into {}x{} tiles needs tile tokens the vocabulary does not have", layout.rows, layout.cols);
    Expansion expand(out, image);
    for (int r = 0; r < layout.rows; ++r) {
      for (int c = 0; c < layout.cols; ++c) {
        expand.text(ids.around);
        expand.text(ids.row_col[r][c]);
        expand.view(ids.marker, tokens_per_view);
      }
      if (r + 1 < layout.rows) expand.text(ids.newline);
    }
    if (layout.rows > 0) expand.text(ids.double_newline);  // the last row's "\n", then the "\n" before the view
    expand.text(ids.around);
    expand.text(ids.global);
    expand.view(ids.marker, tokens_per_view);
    expand.text(ids.around);
  }
  return out;
}

}  // namespace splash::engine

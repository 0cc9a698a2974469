#pragma once
// Images in a prompt. The chat format writes one image marker token per image (SmolVLM:
// "<image>"); here each marker becomes the sequence the model was trained to read an image
// as, the way transformers' Idefics3Processor writes it: for a split image, each tile row
//   <fake_token_around_image> <row_R_col_C> <image> x N   (for each column C)   "\n"
// then "\n" and the whole image
//   <fake_token_around_image> <global-img> <image> x N <fake_token_around_image>
// (an unsplit image is the last line alone). The <image> positions take the image's features
// from the vision encoder instead of the token's embedding; the "\n" are text, tokenized as
// the processor's string is (the last row's "\n" and the next one form one "\n\n" piece).
//
// The KV cache indexes prompts by token ids, and every image has the same <image> ids; so the
// cache sees a second sequence, `cache_keys`, where each image position holds a key derived
// from the image's bytes and its index in the image. Two prompts then share cached blocks
// only as far as their images are the same files.
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "tokenizer/tokenizer.h"
#include "vision/vision_encoder.h"

namespace splash::engine {

// An image of a request: its layout, and (once encoded) its features; a request being only
// counted has no features.
struct EncodedImage {
  vision::ImageLayout layout;
  vision::ImageFeatures features;  // empty until encoded
  uint64_t digest = 0;             // of the image file's bytes
};

// The vocabulary's image tokens. Throws splash::Error naming a missing one.
struct ImageTokenIds {
  int32_t marker = -1;  // <image>: what the chat format writes, and what each feature row stands on
  int32_t around = -1;  // <fake_token_around_image>
  int32_t global = -1;  // <global-img>
  std::vector<std::vector<int32_t>> row_col;  // [r][c]: <row_{r+1}_col_{c+1}>, as many as the vocabulary has
  std::vector<int32_t> newline, double_newline;  // "\n" and "\n\n" as the tokenizer encodes them
};
ImageTokenIds find_image_tokens(const tokenizer::Tokenizer& tokenizer);

struct ImagePrompt {
  std::vector<int32_t> tokens;           // what the model reads
  std::vector<int32_t> cache_keys;       // what the KV cache indexes (== tokens outside images)
  std::vector<const float*> embeddings;  // per position: a feature row of `images`, or null
};

// Expands the markers of `prompt` in order, one per image, each view to tokens_per_view image
// positions. Throws splash::Error when the prompt holds a different number of markers than
// there are images (a chat format that has no place for images writes none), or an image's
// tiles need row/column tokens the vocabulary lacks. Images without features (counting)
// expand with null embeddings and plain token keys.
ImagePrompt expand_image_markers(std::span<const int32_t> prompt, const ImageTokenIds& ids, int tokens_per_view,
                                 std::span<const EncodedImage> images);

uint64_t image_digest(std::string_view file_bytes);

// Cache keys of image positions lie above every token id (bit 30 set), so they never equal
// a real token.
inline constexpr int32_t kImageKeyBit = 1 << 30;

}  // namespace splash::engine

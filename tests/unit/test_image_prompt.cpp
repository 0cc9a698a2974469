// Images in prompts: each marker the chat format writes becomes the Idefics3 image sequence,
// its image positions carry the image's feature rows, and the cache keys tell images apart
// by content while agreeing with the tokens everywhere else.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "chat/chat_format.h"
#include "common/error.h"
#include "engine/image_feature_cache.h"
#include "engine/image_prompt.h"

namespace splash::engine {
namespace {

const ImageTokenIds kIds{/*marker=*/900, /*around=*/901, /*global=*/902,
                         /*row_col=*/{{911, 912, 913}, {921, 922, 923}}, /*newline=*/{198}, /*double_newline=*/{271}};

// A single-view image of `tokens` feature rows (rows x cols tiles: (rows*cols + 1) views).
EncodedImage image(int tokens, int dim, float fill, uint64_t digest, int rows = 0, int cols = 0) {
  EncodedImage out;
  out.layout = {rows, cols};
  out.features.layout = out.layout;
  out.features.tokens = tokens * out.layout.views();
  out.features.dim = dim;
  out.features.values.assign(static_cast<size_t>(out.features.tokens) * dim, fill);
  out.digest = digest;
  return out;
}

TEST(ImagePrompt, EachMarkerBecomesTheIdefics3Sequence) {
  const std::vector<int32_t> prompt{1, 2, 900, 3, 900, 4};
  const std::vector<EncodedImage> images{image(4, 8, 1.0f, 11), image(4, 8, 2.0f, 22)};
  const ImagePrompt out = expand_image_markers(prompt, kIds, 4, images);
  const std::vector<int32_t> expected{1, 2, 901, 902, 900, 900, 900, 900, 901, 3, 901, 902, 900, 900, 900, 900, 901, 4};
  EXPECT_EQ(out.tokens, expected);
  ASSERT_EQ(out.embeddings.size(), expected.size());
  ASSERT_EQ(out.cache_keys.size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    const bool image_position = expected[i] == kIds.marker;
    EXPECT_EQ(out.embeddings[i] != nullptr, image_position) << i;
    EXPECT_EQ((out.cache_keys[i] & kImageKeyBit) != 0, image_position) << i;
    if (!image_position) {
      EXPECT_EQ(out.cache_keys[i], expected[i]) << i;
    }
  }
  // Rows in order: the first image's 4 rows, then the second's.
  EXPECT_EQ(out.embeddings[4], images[0].features.row(0));
  EXPECT_EQ(out.embeddings[7], images[0].features.row(3));
  EXPECT_EQ(out.embeddings[12], images[1].features.row(0));
}

// transformers' Idefics3Processor string for a 2 x 3 split: each tile "<fake><row_r_col_c>
// <image>*N", "\n" after each row, then "\n<fake><global-img><image>*N<fake>" (the last row's
// "\n" and this one tokenized together as "\n\n").
TEST(ImagePrompt, SplitImagesWriteTheirTilesRowByRowThenTheWholeImage) {
  const std::vector<int32_t> prompt{7, 900, 8};
  const std::vector<EncodedImage> images{image(2, 4, 1.0f, 5, /*rows=*/2, /*cols=*/3)};
  const EncodedImage& split = images[0];
  const ImagePrompt out = expand_image_markers(prompt, kIds, 2, images);
  const std::vector<int32_t> expected{7,
                                      901, 911, 900, 900, 901, 912, 900, 900, 901, 913, 900, 900, 198,
                                      901, 921, 900, 900, 901, 922, 900, 900, 901, 923, 900, 900, 271,
                                      901, 902, 900, 900, 901,
                                      8};
  EXPECT_EQ(out.tokens, expected);
  // Feature rows in order: the six tiles' rows, then the whole image's.
  std::vector<const float*> rows;
  for (const float* p : out.embeddings)
    if (p) rows.push_back(p);
  ASSERT_EQ(rows.size(), 14u);
  for (int i = 0; i < 14; ++i) EXPECT_EQ(rows[i], split.features.row(i)) << i;
  // Counting (no features) gives the same tokens.
  EncodedImage counted;
  counted.layout = {2, 3};
  EXPECT_EQ(expand_image_markers(prompt, kIds, 2, std::vector{counted}).tokens, expected);
  // More tiles than the vocabulary has row/column tokens for is refused.
  EncodedImage too_wide;
  too_wide.layout = {1, 4};
  EXPECT_THROW(expand_image_markers(prompt, kIds, 2, std::vector{too_wide}), Error);
}

TEST(ImagePrompt, CacheKeysDependOnTheImageAndThePosition) {
  const std::vector<int32_t> prompt{1, 900};
  const auto a = expand_image_markers(prompt, kIds, 64, std::vector{image(64, 4, 0.0f, image_digest("png bytes A"))});
  const auto a2 = expand_image_markers(prompt, kIds, 64, std::vector{image(64, 4, 9.0f, image_digest("png bytes A"))});
  const auto b = expand_image_markers(prompt, kIds, 64, std::vector{image(64, 4, 0.0f, image_digest("png bytes B"))});
  EXPECT_EQ(a.cache_keys, a2.cache_keys);  // the same file: the same keys (its features are the same)
  EXPECT_EQ(a.tokens, b.tokens);           // the model reads the same tokens...
  for (size_t i = 0; i < a.cache_keys.size(); ++i)  // ...but the cache keys differ at every image position
    if (a.tokens[i] == kIds.marker) {
      EXPECT_NE(a.cache_keys[i], b.cache_keys[i]) << i;
    }
  // Within one image the keys differ from position to position (no repeated block key).
  std::set<int32_t> keys;
  for (size_t i = 0; i < a.cache_keys.size(); ++i)
    if (a.tokens[i] == kIds.marker) keys.insert(a.cache_keys[i]);
  EXPECT_EQ(keys.size(), 64u);
  EXPECT_TRUE(std::all_of(keys.begin(), keys.end(), [](int32_t k) { return k > 0; }));  // never negative
}

TEST(ImagePrompt, CountingExpandsWithoutFeatures) {
  const std::vector<int32_t> prompt{5, 900, 6};
  EncodedImage counted;  // a layout, no features
  const auto out = expand_image_markers(prompt, kIds, 64, std::vector{counted});
  EXPECT_EQ(out.tokens.size(), prompt.size() + 64 + 2);
  EXPECT_TRUE(std::all_of(out.embeddings.begin(), out.embeddings.end(), [](const float* p) { return p == nullptr; }));
  EXPECT_EQ(out.cache_keys, out.tokens);
}

TEST(ImagePrompt, MarkersAndImagesMustAgree) {
  const std::vector<EncodedImage> one{image(4, 8, 1.0f, 1)};
  EXPECT_THROW(expand_image_markers(std::vector<int32_t>{1, 2}, kIds, 4, one), Error);           // no place for it
  EXPECT_THROW(expand_image_markers(std::vector<int32_t>{900, 900}, kIds, 4, one), Error);       // two places
  EXPECT_THROW(expand_image_markers(std::vector<int32_t>{900}, kIds, 8, one), Error);            // wrong row count
}

TEST(ImagePrompt, DigestSeparatesFiles) {
  EXPECT_EQ(image_digest("abc"), image_digest("abc"));
  EXPECT_NE(image_digest("abc"), image_digest("abd"));
  EXPECT_NE(image_digest(""), image_digest(std::string(1, '\0')));
}

}  // namespace
}  // namespace splash::engine

namespace splash::chat {
namespace {

TEST(SmolVlmFormat, TurnsImagesAndGenerationPrompt) {
  SmolVlmFormat format;
  std::vector<ChatMessage> chat{{"system", "Be brief."}, {"user", "What is this?"}};
  chat[1].images = {{"img1"}, {"img2"}};
  chat.push_back({"assistant", "A cat."});
  chat.push_back({"user", "Sure?"});
  const RenderedPrompt out = format.render_conversation(chat, {}, true);
  EXPECT_EQ(out.text,
            "<|im_start|>System: Be brief.<end_of_utterance>\n"
            "User:<image><image>What is this?<end_of_utterance>\n"
            "Assistant: A cat.<end_of_utterance>\n"
            "User: Sure?<end_of_utterance>\n"
            "Assistant:");
  // The markers are markup, never inside a content span (so they become the image token,
  // while a user typing "<image>" gets plain text).
  const size_t first_marker = out.text.find("<image>");
  for (const auto& span : out.content) EXPECT_FALSE(first_marker >= span.begin && first_marker < span.end);
  EXPECT_EQ(format.stop_texts(), std::vector<std::string>{"<end_of_utterance>"});
  EXPECT_EQ(format.image_marker(), "<image>");
}

TEST(SmolVlmFormat, ToolResultImagesStayWithTheirTurn) {
  SmolVlmFormat format;
  std::vector<ChatMessage> chat{{"user", "Take a screenshot"}};
  ChatMessage call{"assistant", ""};
  call.tool_calls.push_back({"call_1", "screenshot", "{}"});
  chat.push_back(call);
  ChatMessage result{"tool", "done", {}, "call_1"};
  result.images = {{"png"}};
  chat.push_back(result);
  const std::string text = format.render_conversation(chat, {}, true).text;
  // The result's image was before its text: inside the tool_response block, before "done".
  EXPECT_NE(text.find("User: <tool_response>\n<image>done\n</tool_response><end_of_utterance>"), std::string::npos) << text;
}

// Parts keep their order: an image after text is written after it ("Role: " then, as the
// template writes text first), one inside text splits it; every text piece stays a content span.
TEST(SmolVlmFormat, ImagesSitWhereTheyWereAmongTheText) {
  SmolVlmFormat format;
  std::vector<ChatMessage> chat{{"user", "What is this?Compare."}};
  chat[0].images = {{"a", 13}, {"b", 21}};
  const RenderedPrompt out = format.render_conversation(chat, {}, true);
  EXPECT_EQ(out.text, "<|im_start|>User: What is this?<image>Compare.<image><end_of_utterance>\nAssistant:");
  ASSERT_EQ(out.content.size(), 2u);
  EXPECT_EQ(out.text.substr(out.content[0].begin, out.content[0].end - out.content[0].begin), "What is this?");
  EXPECT_EQ(out.text.substr(out.content[1].begin, out.content[1].end - out.content[1].begin), "Compare.");
}

TEST(SmolVlmFormat, OtherFormatsHaveNoPlaceForImages) {
  const auto chatml = chat_format_for_template("llama", "");
  EXPECT_EQ(chatml->image_marker(), "");
}

}  // namespace
}  // namespace splash::chat

namespace splash::engine {
namespace {

vision::ImageFeatures features_of(int tokens, float fill) {
  vision::ImageFeatures f;
  f.tokens = tokens;
  f.dim = 256;  // 1 KiB per row
  f.values.assign(static_cast<size_t>(tokens) * f.dim, fill);
  return f;
}

TEST(ImageFeatureCache, KeepsRecentImagesWithinItsBudget) {
  ImageFeatureCache cache(10 * 1024);  // ten 1-row images
  for (int i = 0; i < 12; ++i) cache.store(100 + i, 50, features_of(1, static_cast<float>(i)));
  EXPECT_FALSE(cache.find(100, 50));  // the two oldest left
  EXPECT_FALSE(cache.find(101, 50));
  const auto kept = cache.find(102, 50);
  ASSERT_TRUE(kept);
  EXPECT_EQ(kept->values[0], 2.0f);
  EXPECT_FALSE(cache.find(102, 51));  // the file size is part of the key
  cache.store(200, 50, features_of(1, 9.0f));  // 102 was just used: 103 leaves, not 102
  EXPECT_TRUE(cache.find(102, 50));
  EXPECT_FALSE(cache.find(103, 50));
  cache.store(300, 50, features_of(11, 0.0f));  // larger than the whole budget: not kept
  EXPECT_FALSE(cache.find(300, 50));
  const auto counters = cache.counters();
  EXPECT_EQ(counters.images, 10u);
  EXPECT_EQ(counters.bytes, 10u * 1024);
  EXPECT_EQ(counters.hits, 2u);
  EXPECT_EQ(counters.misses, 5u);
}

}  // namespace
}  // namespace splash::engine

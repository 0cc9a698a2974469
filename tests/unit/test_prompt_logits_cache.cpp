// The kept next-token logits of recent prompts: found only for exactly the same tokens,
// least recently used dropped first.
#include <gtest/gtest.h>

#include "engine/prompt_logits_cache.h"

namespace splash::engine {
namespace {

TEST(PromptLogitsCache, FindsOnlyTheExactPrompt) {
  PromptLogitsCache cache(2);
  const std::vector<int32_t> a{1, 2, 3}, longer{1, 2, 3, 4}, shorter{1, 2}, other{1, 2, 4};
  const std::vector<float> la{0.5f, 1.5f};
  cache.store(a, la);
  ASSERT_NE(cache.find(a), nullptr);
  EXPECT_EQ(*cache.find(a), la);
  EXPECT_EQ(cache.find(longer), nullptr);
  EXPECT_EQ(cache.find(shorter), nullptr);
  EXPECT_EQ(cache.find(other), nullptr);
  EXPECT_EQ(cache.find({}), nullptr);
}

TEST(PromptLogitsCache, DropsTheLeastRecentlyUsed) {
  PromptLogitsCache cache(2);
  const std::vector<int32_t> a{1}, b{2}, c{3};
  cache.store(a, std::vector<float>{1.0f});
  cache.store(b, std::vector<float>{2.0f});
  ASSERT_NE(cache.find(a), nullptr);  // a is now more recent than b
  cache.store(c, std::vector<float>{3.0f});
  EXPECT_NE(cache.find(a), nullptr);
  EXPECT_EQ(cache.find(b), nullptr);
  EXPECT_NE(cache.find(c), nullptr);
  cache.store(c, std::vector<float>{4.0f});  // replaces, does not duplicate
  EXPECT_EQ(cache.find(c)->front(), 4.0f);
  EXPECT_NE(cache.find(a), nullptr);
}

}  // namespace
}  // namespace splash::engine

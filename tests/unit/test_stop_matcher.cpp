// Stop strings over streamed text: caught inside a chunk or across chunks, never shown,
// and text that only looked like the start of a stop string is released.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "engine/stop_matcher.h"

namespace splash::engine {
namespace {

// Pushes the chunks in order (stopping when the matcher does) and returns everything shown,
// flush included.
std::string stream(StopMatcher& matcher, const std::vector<std::string>& chunks) {
  std::string shown;
  for (const auto& chunk : chunks) {
    shown += matcher.push(chunk);
    if (matcher.stopped()) break;
  }
  shown += matcher.flush();
  return shown;
}

TEST(StopMatcher, StopInsideOneChunk) {
  StopMatcher matcher({"STOP"});
  EXPECT_EQ(matcher.push("hello STOP world"), "hello ");
  EXPECT_TRUE(matcher.stopped());
  EXPECT_EQ(matcher.matched(), "STOP");
  EXPECT_EQ(matcher.push("more text"), "");  // nothing after a stop
  EXPECT_EQ(matcher.flush(), "");
}

TEST(StopMatcher, StopSpanningTwoChunks) {
  StopMatcher matcher({"STOP"});
  EXPECT_EQ(matcher.push("hello ST"), "hello ");  // "ST" is held back
  EXPECT_FALSE(matcher.stopped());
  EXPECT_EQ(matcher.push("OP rest"), "");
  EXPECT_TRUE(matcher.stopped());
  EXPECT_EQ(matcher.matched(), "STOP");
  EXPECT_EQ(matcher.flush(), "");
}

TEST(StopMatcher, StopSpanningThreeChunks) {
  StopMatcher matcher({"<|end|>"});
  EXPECT_EQ(matcher.push("ab<|e"), "ab");
  EXPECT_EQ(matcher.push("nd"), "");
  EXPECT_FALSE(matcher.stopped());
  EXPECT_EQ(matcher.push("|>tail"), "");
  EXPECT_TRUE(matcher.stopped());
  EXPECT_EQ(matcher.flush(), "");
}

TEST(StopMatcher, StopSpreadOneCharacterPerChunk) {
  StopMatcher matcher({"</answer>"});
  const std::string text = "42</answer> ignored";
  std::string shown;
  for (char c : text) {
    shown += matcher.push(std::string(1, c));
    if (matcher.stopped()) break;
  }
  EXPECT_TRUE(matcher.stopped());
  EXPECT_EQ(shown, "42");
}

TEST(StopMatcher, PartialPrefixThatIsNotAStopIsReleased) {
  StopMatcher matcher({"STOP"});
  EXPECT_EQ(matcher.push("a ST"), "a ");
  EXPECT_EQ(matcher.push("AR"), "STAR");  // "STA" is no prefix of "STOP": all released
  EXPECT_FALSE(matcher.stopped());
  EXPECT_EQ(matcher.push("S"), "");  // "S" might start a stop again
  EXPECT_EQ(matcher.push("TO"), "");
  EXPECT_EQ(matcher.push("!"), "STO!");
  EXPECT_EQ(matcher.flush(), "");
  EXPECT_FALSE(matcher.stopped());
  EXPECT_EQ(matcher.matched(), "");
}

TEST(StopMatcher, OverlappingSelfPrefixes) {
  // "aab" in "aaab": the held "aa" must slide rather than be dropped or duplicated.
  StopMatcher matcher({"aab"});
  EXPECT_EQ(matcher.push("a"), "");
  EXPECT_EQ(matcher.push("a"), "");
  EXPECT_EQ(matcher.push("a"), "a");
  EXPECT_EQ(matcher.push("b"), "");
  EXPECT_TRUE(matcher.stopped());
}

TEST(StopMatcher, HeldPrefixIsReturnedByFlush) {
  StopMatcher matcher({"STOP"});
  EXPECT_EQ(matcher.push("xST"), "x");
  EXPECT_EQ(matcher.flush(), "ST");
  EXPECT_FALSE(matcher.stopped());
}

TEST(StopMatcher, SeveralStopsEarliestWins) {
  for (const auto& stops : {std::vector<std::string>{"world", "lo"}, std::vector<std::string>{"lo", "world"}}) {
    StopMatcher matcher(stops);
    EXPECT_EQ(matcher.push("hello world"), "hel");
    EXPECT_TRUE(matcher.stopped());
    EXPECT_EQ(matcher.matched(), "lo");
  }
  // Across chunks: the held prefix of one stop does not hide a complete other stop.
  StopMatcher matcher({"\n\n", "User:"});
  EXPECT_EQ(matcher.push("answer\n"), "answer");
  EXPECT_EQ(matcher.push("Us"), "\n");  // "\nUs": "\n" is not the start of "\n\n" any more
  EXPECT_EQ(matcher.push("er: hi"), "");
  EXPECT_EQ(matcher.matched(), "User:");
  // Both stops start at the same place: the text before it is the same either way.
  StopMatcher same_start({"abc", "ab"});
  EXPECT_EQ(same_start.push("xabcd"), "x");
  EXPECT_TRUE(same_start.stopped());
}

TEST(StopMatcher, EmptyStopListPassesEverythingThrough) {
  StopMatcher matcher({});
  EXPECT_EQ(matcher.push("anything at all"), "anything at all");
  EXPECT_EQ(matcher.push(""), "");
  EXPECT_EQ(matcher.push("<|im_end|>"), "<|im_end|>");
  EXPECT_FALSE(matcher.stopped());
  EXPECT_EQ(matcher.flush(), "");
  // Empty strings in the list are ignored (they would otherwise match everywhere).
  StopMatcher empties({"", ""});
  EXPECT_EQ(empties.push("text"), "text");
  EXPECT_FALSE(empties.stopped());
}

TEST(StopMatcher, StopAtTheVeryStart) {
  StopMatcher matcher({"STOP"});
  EXPECT_EQ(matcher.push("STOPxyz"), "");
  EXPECT_TRUE(matcher.stopped());
  StopMatcher exact({"STOP"});
  EXPECT_EQ(exact.push("STOP"), "");
  EXPECT_TRUE(exact.stopped());
  EXPECT_EQ(exact.flush(), "");
  StopMatcher split({"STOP"});
  EXPECT_EQ(split.push("S"), "");
  EXPECT_EQ(split.push("TOP"), "");
  EXPECT_TRUE(split.stopped());
}

TEST(StopMatcher, FlushWithoutStopReturnsTheRest) {
  StopMatcher matcher({"STOP"});
  EXPECT_EQ(matcher.push("no stop here"), "no stop here");
  EXPECT_EQ(matcher.flush(), "");
  EXPECT_FALSE(matcher.stopped());
  StopMatcher nothing({"STOP"});
  EXPECT_EQ(nothing.flush(), "");
}

TEST(StopMatcher, Utf8MultibyteText) {
  // Stop string of multibyte characters, split between chunks at a character boundary.
  StopMatcher matcher({"本語"});
  EXPECT_EQ(matcher.push("日本"), "日");  // "本" might start the stop
  EXPECT_EQ(matcher.push("語です"), "");
  EXPECT_TRUE(matcher.stopped());

  StopMatcher released({"本語"});
  EXPECT_EQ(released.push("日本"), "日");
  EXPECT_EQ(released.push("人"), "本人");
  EXPECT_EQ(released.flush(), "");

  // Chunks split inside a character (bytes of "é" = C3 A9).
  StopMatcher bytes({"é!"});
  EXPECT_EQ(bytes.push("caf\xC3"), "caf");
  EXPECT_EQ(bytes.push("\xA9"), "");
  EXPECT_EQ(bytes.push("!"), "");
  EXPECT_TRUE(bytes.stopped());

  // A character sharing a lead byte with the stop ("è" = C3 A8) is not held back for good.
  StopMatcher near({"é"});
  EXPECT_EQ(near.push("\xC3\xA8t\xC3\xA9"), "\xC3\xA8t");
  EXPECT_TRUE(near.stopped());

  // Emoji (4 bytes) and text before them survive intact.
  StopMatcher emoji({"🛑"});
  EXPECT_EQ(stream(emoji, {"ok 👍 ", "then \xF0\x9F", "\x9B\x91 gone"}), "ok 👍 then ");
}

// Random text, random chunking: what is shown is exactly the text before the first stop
// (or all of it). The stops are not substrings of one another, so the stop that starts
// first is also the one that completes first, whatever the chunking.
TEST(StopMatcher, RandomChunkingMatchesWholeTextSearch) {
  std::mt19937 rng(1234);
  const std::vector<std::vector<std::string>> stop_sets = {
      {"abab"}, {"aab"}, {"ba", "aaa"}, {"bbbb", "abba", "aaab"}, {"é\xC3\xA9", "aé"}};
  const std::vector<std::string> alphabet = {"a", "b", "é"};
  for (int trial = 0; trial < 3000; ++trial) {
    const auto& stops = stop_sets[trial % stop_sets.size()];
    std::string text;
    const int length = std::uniform_int_distribution<int>(0, 24)(rng);
    for (int i = 0; i < length; ++i)
      text += alphabet[std::uniform_int_distribution<size_t>(0, alphabet.size() - 1)(rng)];
    size_t first = std::string::npos;
    for (const auto& stop : stops) first = std::min(first, text.find(stop));
    const std::string expected = first == std::string::npos ? text : text.substr(0, first);

    std::vector<std::string> chunks;
    for (size_t at = 0; at < text.size();) {
      const size_t n = std::uniform_int_distribution<size_t>(0, 5)(rng);  // empty chunks too
      chunks.push_back(text.substr(at, n));
      at += n;
    }
    StopMatcher matcher(stops);
    const std::string shown = stream(matcher, chunks);
    ASSERT_EQ(shown, expected) << "text '" << text << "' trial " << trial;
    ASSERT_EQ(matcher.stopped(), first != std::string::npos) << text;
  }
}

}  // namespace
}  // namespace splash::engine

// Grammar builder + Matcher: literals, classes, repetition bounds, choice, completion,
// nondeterminism, left recursion, regex subset, token masks (fill_mask == can_accept).
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "common/error.h"
#include "grammar/grammar_builder.h"
#include "grammar/lark.h"
#include "grammar/matcher.h"
#include "grammar/token_trie.h"
#include "test_grammar_util.h"

namespace {

using splash::Error;
using namespace splash::grammar;
using splash::grammar::testing::expect_mask_exact;

// Whether the whole text is a sentence of g.
bool matches(const std::shared_ptr<const Grammar>& g, std::string_view text) {
  Matcher m(g);
  return m.accept(text) && m.is_complete();
}
bool prefix_ok(const std::shared_ptr<const Grammar>& g, std::string_view text) { return Matcher(g).can_accept(text); }

TEST(GrammarBuilder, LiteralAcceptsExactlyItself) {
  GrammarBuilder b;
  const auto g = b.build(b.literal("hello"));
  EXPECT_TRUE(matches(g, "hello"));
  EXPECT_FALSE(matches(g, "hell"));
  EXPECT_TRUE(prefix_ok(g, "hell"));
  EXPECT_FALSE(prefix_ok(g, "help"));
  EXPECT_FALSE(prefix_ok(g, "hello!"));
  Matcher m(g);
  EXPECT_FALSE(m.is_complete());
  EXPECT_TRUE(m.accept("he"));
  EXPECT_FALSE(m.accept("x"));  // rejected: state unchanged
  EXPECT_TRUE(m.accept("llo"));
  EXPECT_TRUE(m.is_complete());
  EXPECT_TRUE(m.is_dead());
}

TEST(GrammarBuilder, CharClassesAndNegation) {
  GrammarBuilder b;
  const auto g = b.build(b.sequence({b.char_class("a-c0-9_"), b.char_class("a-z", true)}));
  EXPECT_TRUE(matches(g, "a!"));
  EXPECT_TRUE(matches(g, "_Z"));
  EXPECT_TRUE(matches(g, "9\xff"));
  EXPECT_FALSE(matches(g, "d!"));
  EXPECT_FALSE(matches(g, "aq"));
}

TEST(GrammarBuilder, RepetitionBounds) {
  GrammarBuilder b;
  const auto g = b.build(b.repeat(b.literal("ab"), 2, 4));
  EXPECT_FALSE(matches(g, ""));
  EXPECT_FALSE(matches(g, "ab"));
  EXPECT_TRUE(matches(g, "abab"));
  EXPECT_TRUE(matches(g, "ababab"));
  EXPECT_TRUE(matches(g, "abababab"));
  EXPECT_FALSE(prefix_ok(g, "ababababa"));
  EXPECT_FALSE(matches(g, "ababa"));
  GrammarBuilder b2;
  const auto star = b2.build(b2.sequence({b2.literal("<"), b2.repeat(b2.char_class("x"), 0, -1), b2.literal(">")}));
  EXPECT_TRUE(matches(star, "<>"));
  EXPECT_TRUE(matches(star, fmt::format("<{}>", std::string(100000, 'x'))));  // no stack growth
  EXPECT_FALSE(matches(star, "<xyx>"));
  GrammarBuilder b3;
  const auto plus = b3.build(b3.repeat(b3.literal("z"), 1, -1));
  EXPECT_FALSE(matches(plus, ""));
  EXPECT_TRUE(matches(plus, "zzz"));
  GrammarBuilder b4;
  const auto exact = b4.build(b4.repeat(b4.char_class("0-9"), 3, 3));
  EXPECT_TRUE(matches(exact, "123"));
  EXPECT_FALSE(matches(exact, "12"));
  EXPECT_FALSE(prefix_ok(exact, "1234"));
}

TEST(GrammarBuilder, ChoiceAndCompletionWithContinuation) {
  GrammarBuilder b;
  const auto g = b.build(b.choice({b.literal("cat"), b.literal("catalog"), b.literal("dog")}));
  Matcher m(g);
  EXPECT_TRUE(m.accept("cat"));
  EXPECT_TRUE(m.is_complete());
  EXPECT_FALSE(m.is_dead());  // "catalog" may continue
  EXPECT_TRUE(m.accept("alog"));
  EXPECT_TRUE(m.is_dead());
  EXPECT_FALSE(matches(g, "ca"));
  EXPECT_FALSE(prefix_ok(g, "cow"));
  GrammarBuilder none;  // a grammar matching nothing is refused at build (AGrammarThatAdmitsNothingIsRefused)
  EXPECT_THROW(none.build(none.choice({})), Error);
}

TEST(GrammarBuilder, NondeterministicRegexThenNewline) {
  // /(.+)/ followed by LF, character level: the stack set keeps both readings alive.
  GrammarBuilder b;
  const auto g = b.build(b.sequence({b.regex("(.+)"), b.literal("\n"), b.literal("end")}));
  EXPECT_TRUE(matches(g, "a line with stuff\nend"));
  EXPECT_FALSE(prefix_ok(g, "\n"));
  EXPECT_FALSE(matches(g, "x\n\nend"));
}

TEST(GrammarBuilder, RecursionThroughNamedRules) {
  GrammarBuilder b;
  const auto r = b.rule("parens");
  b.define(r, b.choice({b.literal(""), b.sequence({b.literal("("), r, b.literal(")"), r})}));
  const auto g = b.build(r);
  EXPECT_TRUE(matches(g, ""));
  EXPECT_TRUE(matches(g, "(()())()"));
  EXPECT_FALSE(matches(g, "(()"));
  EXPECT_FALSE(prefix_ok(g, "())"));
  const std::string deep = std::string(5000, '(') + std::string(5000, ')');
  EXPECT_TRUE(matches(g, deep));
}

TEST(GrammarBuilder, RejectsLeftRecursionAndUndefinedRules) {
  GrammarBuilder b;
  const auto e = b.rule("expr");
  b.define(e, b.choice({b.sequence({e, b.literal("+"), b.literal("1")}), b.literal("1")}));
  try {
    b.build(e);
    FAIL() << "left recursion accepted";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("left-recursive"), std::string::npos) << err.what();
    EXPECT_NE(std::string(err.what()).find("expr"), std::string::npos) << err.what();
  }
  GrammarBuilder b2;
  const auto u = b2.rule("ghost");
  EXPECT_THROW(b2.build(b2.sequence({b2.literal("a"), u})), Error);
  // Nullable-then-self in tail position is fine (it is just repetition).
  GrammarBuilder b3;
  const auto s = b3.rule("s");
  b3.define(s, b3.choice({b3.literal(""), b3.sequence({b3.optional(b3.literal("a")), s})}));
  EXPECT_TRUE(matches(b3.build(s), "aaa"));
}

// A grammar whose start derives no string at all (every way out needs a rule that never
// ends) is refused at build, whatever built it.
TEST(GrammarBuilder, AGrammarThatAdmitsNothingIsRefused) {
  GrammarBuilder b;
  const auto loop = b.rule("loop");
  b.define(loop, b.sequence({b.literal("x"), loop}));  // only infinite strings
  EXPECT_THROW(b.build(b.choice({b.sequence({b.literal("a"), loop}), b.choice({})})), Error);
  GrammarBuilder b2;
  EXPECT_THROW(b2.build(b2.choice({})), Error);
  GrammarBuilder b3;
  EXPECT_TRUE(matches(b3.build(b3.literal("")), ""));  // the empty string is some output
  EXPECT_THROW(compile_lark("start: a\na: \"x\" a\n"), Error);
}

TEST(GrammarBuilder, HugeLiteralChoiceBecomesTrie) {
  GrammarBuilder b;
  std::vector<GrammarBuilder::Id> words;
  for (int i = 0; i < 50000; ++i) words.push_back(b.literal(fmt::format("w{}", i * 7919 % 1000003)));
  const auto g = b.build(b.choice(words));
  EXPECT_TRUE(matches(g, "w0"));
  EXPECT_TRUE(matches(g, fmt::format("w{}", 123 * 7919 % 1000003)));
  EXPECT_FALSE(matches(g, "w"));
  Matcher m(g);
  EXPECT_FALSE(m.overflowed());
}

TEST(GrammarBuilder, RollbackAndForcedBytes) {
  GrammarBuilder b;
  const auto g = b.build(b.sequence({b.literal("{\"name\": \""), b.repeat(b.char_class("a-z"), 1, -1), b.literal("\"}")}));
  Matcher m(g);
  EXPECT_EQ(m.forced_bytes(), "{\"name\": \"");
  EXPECT_TRUE(m.accept("{\"na"));
  EXPECT_TRUE(m.accept("me\": \"x"));
  EXPECT_EQ(m.forced_bytes(), "");
  EXPECT_TRUE(m.rollback(1));
  EXPECT_TRUE(m.can_accept("me"));
  EXPECT_FALSE(m.can_accept("\"}"));
  EXPECT_TRUE(m.rollback(1));
  EXPECT_TRUE(m.can_accept("{"));
  EXPECT_FALSE(m.rollback(1));
}

TEST(GrammarBuilder, ExponentialAmbiguityIsCappedFailSafe) {
  // x ::= "a" x "b" | "a" x "c" | (): after n a's there are 2^n distinct stacks.
  GrammarBuilder b;
  const auto x = b.rule("x");
  b.define(x, b.choice({b.sequence({b.literal("a"), x, b.literal("b")}), b.sequence({b.literal("a"), x, b.literal("c")}),
                        b.literal("")}));
  const auto g = b.build(x);
  EXPECT_TRUE(matches(g, "aaabcb"));
  Matcher m(g);
  EXPECT_TRUE(m.accept(std::string(10, 'a')));  // 1024 stacks: fine
  EXPECT_FALSE(m.overflowed());
  EXPECT_FALSE(m.accept(std::string(5, 'a')));  // 32768 stacks: refused, state kept
  EXPECT_TRUE(m.overflowed());
  EXPECT_TRUE(m.accept("b"));
}

TEST(GrammarBuilder, CachesAreCompactedOnLongGenerations) {
  // Every byte of a bounded repetition is a new parse state; past the cache limit the matcher
  // rebuilds its caches from the live state and goes on (rollback history included).
  GrammarBuilder b;
  const auto g = b.build(b.sequence({b.literal("<"), b.repeat(b.char_class("a-z"), 0, 50000), b.literal(">")}));
  Matcher m(g);
  ASSERT_TRUE(m.accept("<"));
  for (int i = 0; i < 49990; ++i) ASSERT_TRUE(m.accept("q")) << i;
  EXPECT_TRUE(m.accept("qqqqqqqqq"));
  EXPECT_TRUE(m.rollback(2));  // back to 49989 letters: room for 11 more
  EXPECT_TRUE(m.can_accept(std::string(11, 'q') + ">"));
  EXPECT_FALSE(m.can_accept(std::string(12, 'q')));
  EXPECT_TRUE(m.accept(std::string(11, 'q') + ">"));
  EXPECT_TRUE(m.is_complete());
}

TEST(GrammarRegex, SubsetAcceptsAndRejects) {
  struct Case {
    const char* pattern;
    const char* flags;
    std::vector<std::string> yes, no;
  };
  const std::vector<Case> cases = {
      {"a|bc|d*", "", {"a", "bc", "", "ddd"}, {"ab", "b"}},
      {"[a-c]{2,3}x?", "", {"ab", "abc", "abcx"}, {"a", "abcd"}},
      {"\\d+\\.\\d{2}", "", {"3.14", "100.00"}, {"3.1", ".14"}},
      {"[^\\n]*", "", {"any thing", ""}, {"a\nb"}},
      {"(?:ab)+", "", {"ab", "abab"}, {"aba"}},
      {"(?P<x>hi)!", "", {"hi!"}, {"hi"}},
      {"hello", "i", {"HeLLo"}, {"hell"}},
      {".", "", {"a", "\xc3\xa9", "\xe2\x82\xac"}, {"\n", "\xc3"}},
      {".", "s", {"\n"}, {}},
      {"[\\w\\s]+", "", {"a b_9"}, {"a-b"}},
      {"\\W", "", {"-", "\xc3\xa9"}, {"a"}},
      {"[é-ü]", "", {"\xc3\xa9", "\xc3\xbc"}, {"\xc3\xa8", "e"}},
      {"[^a]", "", {"b", "\xf0\x9f\x98\x80"}, {"a"}},
      {"a{2}", "", {"aa"}, {"a", "aaa"}},
      {"x{,2}", "", {"xx", ""}, {"x{,2}", "xxx"}},
      {"x{y", "", {"x{y"}, {"x"}},
      {"^ab$", "", {"ab"}, {"^ab$"}},
      {"\\u00e9\\x41", "", {"\xc3\xa9" "A"}, {}},
      {"a+?b*+", "", {"ab", "a"}, {}},
  };
  for (const auto& c : cases) {
    const auto g = compile_regex(c.pattern, c.flags);
    for (const auto& s : c.yes) EXPECT_TRUE(matches(g, s)) << "/" << c.pattern << "/ should match '" << s << "'";
    for (const auto& s : c.no) EXPECT_FALSE(matches(g, s)) << "/" << c.pattern << "/ should not match '" << s << "'";
  }
}

TEST(GrammarRegex, UnsupportedConstructsAreNamed) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"a(?=b)", "lookahead"}, {"(?<!a)b", "lookbehind"}, {"(a)\\1", "backreference"},
      {"\\bword", "word boundary"}, {"\\p{L}", "unsupported escape"}, {"(ab", "missing ')'"},
      {"[abc", "unterminated"}, {"*a", "quantifier"}, {"a{3,1}", "n < m"}, {"(?i)a", "unsupported group"},
  };
  for (const auto& [pattern, message] : cases) {
    try {
      compile_regex(pattern);
      ADD_FAILURE() << "accepted /" << pattern << "/";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << pattern << ": " << e.what();
    }
  }
}

// A synthetic vocabulary: every byte plus multi-byte pieces that cross grammar boundaries.
std::vector<std::string> synthetic_vocab() {
  std::vector<std::string> v;
  for (int b = 0; b < 256; ++b) v.emplace_back(1, static_cast<char>(b));
  for (const char* s : {"{\"", "\":", "\": ", "\", \"", "\"}", "},", "}]", "[{", "true", "false", "null", "nul",
                        "12", "3.5", "-1", "e+", "\\n", "\\\"", "\\u00", "\n  ", "  ", " \"", "abc", "name", "age",
                        "\"name\"", "\xc3\xa9", "\xc3", "\xa9x", "***", "*** ", "Begin Patch", "*** Begin Patch\n",
                        "\n+", "\n-", "\n ", "@@", "@@ ", "End", "+x\n", "", "\"\"", "[]", "{}", "0.", ".0"}) {
    v.emplace_back(s);
  }
  v.emplace_back("\"a", 2);
  return v;
}

TEST(TokenMask, FillMaskEqualsCanAcceptOnSyntheticVocab) {
  const auto vocab = synthetic_vocab();
  const TokenTrie trie(vocab);
  GrammarBuilder b;
  const auto g = b.build(b.json_value());
  for (uint64_t seed = 0; seed < 40; ++seed) {
    std::mt19937_64 rng(seed);
    Matcher m(g);
    std::vector<uint8_t> mask;
    for (int step = 0; step < 60 && !m.is_dead(); ++step) {
      expect_mask_exact(m, trie, vocab, fmt::format("seed {} step {}", seed, step));
      m.fill_mask(trie, mask);
      std::vector<size_t> ok;
      for (size_t i = 0; i < mask.size(); ++i) {
        if (mask[i]) ok.push_back(i);
      }
      if (ok.empty()) break;
      ASSERT_TRUE(m.accept(vocab[ok[rng() % ok.size()]]));
    }
  }
}

TEST(TokenMask, ExcludedAndEmptyTokensAreNeverAllowed) {
  const std::vector<std::string> vocab = {"a", "", "<|im_end|>", "ab", "a"};
  const TokenTrie trie(vocab, {false, false, true, false, false});
  GrammarBuilder b;
  const auto g = b.build(b.repeat(b.any_byte(), 0, -1));
  std::vector<uint8_t> mask;
  Matcher(g).fill_mask(trie, mask);
  EXPECT_EQ(mask, (std::vector<uint8_t>{1, 0, 0, 1, 1}));
}

TEST(TokenMask, DeadSubtreesArePruned) {
  const std::vector<std::string> vocab = {"x", "xy", "xyz", "y", "yx"};
  const TokenTrie trie(vocab);
  GrammarBuilder b;
  const auto g = b.build(b.literal("xy"));
  std::vector<uint8_t> mask;
  Matcher(g).fill_mask(trie, mask);
  EXPECT_EQ(mask, (std::vector<uint8_t>{1, 1, 0, 0, 0}));
}

}  // namespace
